"""``python -m infinipotv.results.tuning STUDY``: each method's memory knob chosen on a development seed by a rule
written down before the sweep, and the table of the grid and the choices (issue 44).

The rule and the grid live in the study's experiment file, in its ``tuning`` block, beside the runs it reads::

    tuning:
      where: {benchmark.seed: 2, compress.budget: 144}   # the development runs (a seed no table reports)
      check: {benchmark.seed: 2, compress.budget: 288}   # the budget where a choice is checked again
      score: overall                                     # the score the rule reads
      margin: 3.0                                        # points a setting must gain over the default
      grids:                                             # per method: its knobs and the values tried besides
        rekv: {compress.c_ratio: [0.25, 0.75]}           # the method's default (its upstream proportion)
        weavetime: {compress.c_ratio: [0.25], compress.threshold: [0.3]}  # one knob at a time, the other default

The rule: each method's default (the run without the knob set: its upstream proportion) is kept unless another
value of the grid scores at least ``margin`` points more on the development runs; then the best such value is
chosen (the first in grid order on a tie). The margin is about the noise of 100 questions, so a setting the
development seed cannot tell apart from the default does not replace it. The choice is applied as a proportion at
every budget and checked at ``check``: the tuned and default runs there say whether it still holds.

Writes ``results/STUDY/tuning.md`` (the grid, each value's development score and n, the choice and the check) and
``results/STUDY/tuning.json`` (the chosen overrides per method), which the study's script reads back with
``--overrides METHOD`` to launch the tuned runs. A value counts only from a complete run of the whole development
selection at one commit: a value without such a run (none yet, one killed after a few answers, a subset, shards made
at different commits) is a missing row (the table says why), and its method keeps its default, with ``complete``
false in tuning.json, until every value has one: a partial grid never chooses. Bad input (no tuning.json, a corrupt
one, an unknown experiment, a runs folder that does not exist) is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infinipotv import compress
from infinipotv.data.rescore import SkippedInput, print_skipped
from infinipotv.results.collect import Run, load_runs
from infinipotv.results.published import same_value
from infinipotv.results.report import experiment_file, read_experiment
from infinipotv.results.tables import matches

C_RATIO = "compress.c_ratio"


@dataclass(frozen=True)
class Trial:
    """One value of a method's knob on the development runs (``score`` None: no run that counts yet; ``why``: what
    the run found instead lacks)."""

    method: str
    knob: str
    value: Any
    default: bool
    score: float | None
    n: int
    why: str = ""


def default_value(method: str, knob: str) -> Any:
    """The value a run takes when ``knob`` is not given: the policy's own split, or its declared default."""
    if knob == C_RATIO:
        return compress.POLICIES[method].default_c_ratio
    return compress.policy_params(method)[knob.removeprefix("compress.")]


def commits(run: Run) -> list[str]:
    """The commits its provenance names (merged shards name each of theirs, comma-separated)."""
    return sorted({sha for sha in str(run.provenance.get("git_sha") or "").split(",") if sha})


def not_counted(run: Run) -> str | None:
    """Why the run's score cannot stand for its value, or None: a value counts only from a complete run of the whole
    development selection at one commit (a run killed after one answer scores 100.0 on n = 1)."""
    if not run.complete:
        return f"partial: {'; '.join(run.problems)}"
    if run.subset:
        return "a subset of the development questions"
    if len(commits(run)) > 1:
        return f"made at {len(commits(run))} commits ({', '.join(commits(run))})"
    return None


def _score(
    runs: Sequence[Run], method: str, knob: str, setting: Mapping[str, Any], where: Mapping[str, Any], score: str
) -> Trial:
    """``knob``'s value in ``setting`` (every knob of the method's grid: the others at their defaults), scored."""
    value = setting[knob]
    found = [
        r
        for r in runs
        if r.fields["policy"] == method
        and matches(r.fields, where)
        and all(same_value(r.flat_config.get(k), v) for k, v in setting.items())
    ]
    default = same_value(value, default_value(method, knob))
    counted = [r for r in found if not_counted(r) is None]
    if not counted:
        best = max(found, key=lambda r: len(r.predictions), default=None)
        why = "" if best is None else str(not_counted(best))
        return Trial(method, knob, value, default, None, 0 if best is None else len(best.predictions), why)
    run = max(counted, key=lambda r: len(r.predictions))
    value_found = run.scores.get(score)
    return Trial(
        method, knob, value, default, None if value_found is None else float(value_found), len(run.predictions)
    )


def trials(runs: Sequence[Run], spec: Mapping[str, Any], where: Mapping[str, Any]) -> dict[str, list[Trial]]:
    """Per method, the default first and then the grid's values, each with its score on the runs ``where``. A grid
    of several knobs varies one at a time, the others at their defaults (WeaveTime's split and its gate)."""
    out = {}
    score = spec.get("score", "overall")
    for method, grid in spec["grids"].items():
        defaults = {knob: default_value(method, knob) for knob in grid}
        first = next(iter(grid))
        out[method] = [_score(runs, method, first, defaults, where, score)] + [
            _score(runs, method, knob, {**defaults, knob: v}, where, score)
            for knob, values in grid.items()
            for v in values
            if not same_value(v, defaults[knob])
        ]
    return out


def choose(candidates: Sequence[Trial], margin: float) -> Trial | None:
    """The rule (module docstring): None while a value has not run."""
    if any(t.score is None for t in candidates):
        return None
    default = candidates[0]
    better = [t for t in candidates[1:] if t.score >= default.score + margin]
    return max(better, key=lambda t: t.score, default=None) or default


def overrides(trial: Trial) -> list[str]:
    """The command-line overrides that run ``trial``'s setting (none for a default)."""
    return [] if trial.default else [f"{trial.knob}={trial.value}"]


def _shown(trial: Trial) -> str:
    """A trial's score cell: the score, or – and why the run found does not count."""
    if trial.score is not None:
        return f"{trial.score:.1f}"
    return f"– ({trial.why})" if trial.why else "–"


def _fmt(value: Any) -> str:
    """A value as the table shows it; None is a knob left to the policy, which derives it from upstream's share."""
    if value is None:
        return "None (upstream's share)"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def tuning_report(runs: Sequence[Run], spec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The markdown table of the grid and the choices, and the JSON of the chosen overrides."""
    margin = float(spec.get("margin", 0.0))
    dev = trials(runs, spec, spec["where"])
    check = trials(runs, spec, spec["check"]) if spec.get("check") else {}
    lines = [
        f"Development runs: {json.dumps(spec['where'])}; score `{spec.get('score', 'overall')}`; rule: keep the "
        f"default (the method's upstream proportion) unless a value scores >= {margin:g} points more (then the best).",
        "",
        "| Method | Knob | Value | Default | Dev score | n | Chosen | Check score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    chosen_json: dict[str, Any] = {}
    for method, candidates in dev.items():
        chosen = choose(candidates, margin)
        checked = {(t.knob, _fmt(t.value)): t for t in check.get(method, [])}
        for t in candidates:
            c = checked.get((t.knob, _fmt(t.value)))
            lines.append(
                f"| {method} | {t.knob.removeprefix('compress.')} | {_fmt(t.value)} | {'yes' if t.default else ''} | "
                f"{_shown(t)} | {t.n or '–'} | "
                f"{'**yes**' if chosen is t else ''} | "
                f"{'' if c is None or c.score is None else f'{c.score:.1f}'} |"
            )
        knob = (chosen or candidates[0]).knob
        chosen_json[method] = {
            "knob": knob,
            "default": default_value(method, knob),
            "chosen": None if chosen is None else chosen.value,
            "overrides": None if chosen is None else overrides(chosen),
            "complete": chosen is not None,
        }
    if check:
        lines += [
            "",
            f"Check score: the same value on {json.dumps(spec['check'])} (only the default and the chosen run).",
        ]
    return "\n".join(lines) + "\n", chosen_json


def chosen_overrides(path: Path, method: str) -> list[str]:
    """``method``'s chosen overrides as ``path`` (tuning.json) records them; a ValueError line naming the file and
    the fix when there are none to read."""
    again = "run `python -m infinipotv.results.tuning EXPERIMENT` (after the development runs) to write it"
    if not path.is_file():
        raise ValueError(f"{path} does not exist: {again}")
    try:
        tuning = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not JSON ({err}): {again} again") from None
    chosen = tuning.get(method) if isinstance(tuning, dict) else None
    if (
        not isinstance(chosen, dict)
        or chosen.get("complete") is not True
        or not isinstance(chosen.get("overrides"), list)
    ):
        raise ValueError(f"{method} has no complete tuning in {path}")
    return [str(o) for o in chosen["overrides"]]


def write_tuning(path: Path, runs_dir: str, out: Path) -> str:
    """The tuning table of the experiment file ``path`` from the runs under ``runs_dir``, written into ``out``."""
    experiment = read_experiment(path)
    spec = experiment.get("tuning")
    if not spec:
        raise ValueError(f"{path} has no `tuning` block")
    name = experiment.get("experiment", path.stem)
    runs = [r for r in load_runs(runs_dir) if r.fields["experiment"] == name]
    text, chosen = tuning_report(runs, spec)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuning.md").write_text(text)
    (out / "tuning.json").write_text(json.dumps(chosen, indent=2, sort_keys=True) + "\n")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.results.tuning", description=__doc__)
    parser.add_argument("experiment", help="name of experiments/NAME.yaml (its `tuning` block)")
    parser.add_argument("--runs", default="results/runs", help="folder searched recursively for run dirs")
    parser.add_argument("--out", default=None, help="output folder (default results/EXPERIMENT/)")
    parser.add_argument("--overrides", metavar="METHOD", help="print METHOD's chosen overrides (from tuning.json)")
    args = parser.parse_args(argv)
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always", SkippedInput)
        try:
            path = experiment_file(args.experiment)
            out = Path(args.out or Path("results") / path.stem)
            if args.overrides:
                print(" ".join(chosen_overrides(out / "tuning.json", args.overrides)))
                return 0
            text = write_tuning(path, args.runs, out)
        except (OSError, ValueError) as err:  # a missing or corrupt file, an unknown experiment: one line
            print_skipped(skipped)
            print(f"error: {err}", file=sys.stderr)
            return 2
    print_skipped(skipped)
    print(text)
    print(f"wrote {out / 'tuning.md'} and {out / 'tuning.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
