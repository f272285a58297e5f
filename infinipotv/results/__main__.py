"""``python -m infinipotv.results EXPERIMENT``: the experiment's tables, tidy CSV/JSON and figures from its runs.

Prints every file it wrote and a summary line; a corrupt run file is skipped with a ``warning:`` line naming it. Exit
2 with one ``error:`` line on bad input: no matching run, runs of several models in a table without a model column,
a table spec naming a key no run has, runs of one config made by different code (another commit or package versions;
``--allow-mixed`` uses them, the table's note naming the run it shows), or an output folder that already holds the
report (``--force`` replaces it). The report is written whole or not at all: an error leaves the folder as it was.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from infinipotv.data.rescore import SkippedInput, print_skipped
from infinipotv.results.report import FORMATS, OutputExists, build_report
from infinipotv.results.scoring import ScorerError
from infinipotv.results.stats import N_BOOT, SEED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.results", description=__doc__)
    parser.add_argument("experiment", help="name of experiments/NAME.yaml (or a path to an experiment file)")
    parser.add_argument(
        "--runs",
        default=None,
        help="folder searched recursively for run dirs (default: the study's own, results/runs/EXPERIMENT, and "
        "those of the experiments its tables name)",
    )
    parser.add_argument("--format", default=",".join(FORMATS), help="comma-separated: md,tex")
    parser.add_argument("--out", default=None, help="output folder (default results/EXPERIMENT/)")
    parser.add_argument("--stats", action="store_true", help="also print paired statistics tables (always in CSV/JSON)")
    parser.add_argument("--baseline", default=None, help="row id or first stub cell to compare against")
    parser.add_argument("--n", dest="show_n", action="store_true", help="show the number of questions in every cell")
    parser.add_argument("--n-boot", type=int, default=N_BOOT, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed")
    parser.add_argument("--experiments-dir", default="experiments")
    parser.add_argument(
        "--model",
        default=None,
        help="only this model's runs (the name the tables' captions show: the checkpoint folder's name, "
        "e.g. Qwen2-VL-7B-Instruct, else the family, e.g. qwen2vl-tiny)",
    )
    parser.add_argument("--force", action="store_true", help="replace the outputs already in the output folder")
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="use runs of one config made by different code (another commit or package versions) instead of "
        "refusing them; the table's note names the run shown and what differs",
    )
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        print(
            f"error: --out {args.out} is a file, not a folder: name a folder (it is created if missing)",
            file=sys.stderr,
        )
        return 2
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always", SkippedInput)
        try:
            report = build_report(
                args.experiment,
                args.runs,
                args.out,
                formats,
                args.stats,
                args.baseline,
                args.show_n,
                args.n_boot,
                args.seed,
                args.experiments_dir,
                args.model,
                args.force,
                args.allow_mixed,
            )
        except (OSError, OutputExists, ValueError, ScorerError) as err:  # bad input, a folder not ours: one line
            print_skipped(skipped)
            print(f"error: {err}", file=sys.stderr)
            return 2
    print_skipped(skipped)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for path in report.files:
        print(path)
    print(f"wrote {len(report.files)} files to {report.out}/ from {report.n_runs} runs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
