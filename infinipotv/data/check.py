"""The dataset doctor: ``python -m infinipotv.data.check benchmark=NAME benchmark.root=... [--open N]``.

Takes the same Hydra overrides as ``run.py`` (composed against ``conf/``; model and policy overrides are accepted
and ignored), loads the annotations with the benchmark's own loader and the run's subset, looks for every video,
opens a sample of them with PyAV, and prints one table: scorable questions, videos found / missing / unreadable, bad
rows by cause with a few example ids, and the fix for each cause. Exit status: 0 when every question can be
answered, 1 when some would be scored as errors, 2 when the benchmark cannot be loaded at all (one line says why).
No model is loaded; it runs in seconds.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import av
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from infinipotv.config import BenchmarkConfig, ConfigError, register_configs
from infinipotv.data.base import VideoSample
from infinipotv.data.loading import benchmark_class
from infinipotv.data.subset import select
from infinipotv.data.video import VideoError, check_video_file

CONF = Path(__file__).resolve().parents[2] / "conf"
N_EXAMPLES = 3
_PREFIX = re.compile(r"^.*? \((?P<qid>[^()]*)\): ")  # "<file> row <i> (<qid>): " before a bad row's reason
_VALUE = re.compile(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\b\d+\b|(?<=labelled )[A-F]|(?<=position )[A-F]")
FIXES = [  # (pattern in the reason, the fix); the first match wins
    ("not valid JSON", "repair or delete that line of the file"),
    ("nested too deeply", "no released row nests JSON that deep: delete that line of the file"),
    (
        "outside the video root",
        "the row names a video outside benchmark.root: move it under the root, or run with "
        "benchmark.allow_outside_root=true if you trust the annotation file",
    ),
    (
        "missing field",
        "the row lacks a field this benchmark reads: re-download the released file, or check that "
        "benchmark.annotations (and benchmark.part) name the right file",
    ),
    ("time stamp", "write the stamp as H:MM:SS in the annotation row named, or leave it: it is scored as an error"),
    (
        "is labelled",
        "the released option labels are out of order, so the gold option is ambiguous: fix the row's "
        "options or leave it (scored as an error)",
    ),
    ("not one of the options", "the gold answer is not an option (a release error): fix the row or leave it"),
    (
        "neither an option letter nor a candidate",
        "the gold answer is not a candidate (a release error): fix the row or leave it",
    ),
    (
        "is not a candidate",
        "the official answer is a candidate's text, and this one is none (a release error, or a letter put for the "
        "text): fix the row or leave it",
    ),
    ("task_type", "a task this benchmark does not score: check benchmark.part and benchmark.annotations"),
    ("is empty", "fill the empty field in the row named (a null is never read as text)"),
    ("is null", "fill the null option in the row named (a null is never read as an option)"),
    ("does not hold", "an answer without its question: take questions.json and subset_answers.json from one release"),
    ("duplicate question id", "two rows share one id: remove the duplicate row"),
    ("questions have", "the row has the wrong number of options for this benchmark: fix the row or leave it"),
    ("options", "the row's options are not a list of 2-6 strings: fix the row or leave it"),
]
MISSING_FIX = "put the videos where conf/benchmark/{name}.yaml says (or set benchmark.root), then rerun"
UNREADABLE_FIX = "re-download the file, or re-encode it: ffmpeg -i IN -c:v libx264 -pix_fmt yuv420p OUT.mp4"


@dataclass
class Report:
    """What the doctor found; ``errors`` counts the questions a run would score as errors."""

    questions: int = 0
    scorable: int = 0
    found: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # video id -> expected path
    unreadable: dict[str, str] = field(default_factory=dict)  # video id -> reason
    opened: int = 0
    causes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # cause -> question ids
    errors: int = 0


def cause_of(error: str) -> tuple[str, str]:
    """A bad row's reason without its file, row and values (the cause), and its question id."""
    m = _PREFIX.match(error)
    reason = error[m.end() :] if m else error
    return _VALUE.sub("…", reason), (m.group("qid") if m else "?")


def fix_for(cause: str) -> str:
    return next((fix for pattern, fix in FIXES if pattern in cause), "fix the annotation row named in the example")


def readable(path: Path) -> str | None:
    """None when PyAV opens the file and decodes its first frame, else why not."""
    try:
        with av.open(str(path)) as container:
            next(container.decode(video=0))
    except (av.error.FFmpegError, StopIteration, IndexError, ValueError) as err:
        return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return None


def _look_for(sample: VideoSample, report: Report) -> None:
    """Found, missing, or unreadable as the run would say it (a FIFO is never opened: it would block)."""
    try:
        check_video_file(sample.path)
    except VideoError as err:
        if sample.path.exists() or sample.path.is_symlink():
            report.unreadable[sample.video_id] = str(err)
        else:
            report.missing[sample.video_id] = str(sample.path)
        return
    report.found.append(sample.video_id)


def examine(samples: list[VideoSample], n_open: int) -> Report:
    """Count questions, look for every video and open up to ``n_open`` of those found (spread over the list)."""
    report = Report()
    for s in samples:
        report.questions += len(s.questions)
        if s.error is not None:
            cause, qid = cause_of(s.error)
            report.causes[cause].append(qid)
            report.errors += len(s.questions)
        else:
            _look_for(s, report)
    paths = {s.video_id: s.path for s in samples if s.error is None}
    step = max(1, len(report.found) // max(1, n_open)) if n_open else 0
    to_open = report.found[::step][:n_open] if step else []
    for vid in to_open:
        why = readable(paths[vid])
        if why is not None:
            report.unreadable[vid] = why
    report.opened = len(to_open)
    bad_videos = set(report.missing) | set(report.unreadable)
    lost = sum(len(s.questions) for s in samples if s.error is None and s.video_id in bad_videos)
    report.errors += lost
    report.scorable = report.questions - report.errors
    return report


def _examples(items: list[str]) -> str:
    more = f" (+{len(items) - N_EXAMPLES} more)" if len(items) > N_EXAMPLES else ""
    return ", ".join(items[:N_EXAMPLES]) + more


def table(report: Report, name: str) -> str:
    """The one table the doctor prints."""
    rows = [
        ("questions", str(report.questions), "", ""),
        ("  scorable", str(report.scorable), "", ""),
        ("  would be errors", str(report.errors), "", ""),
        ("videos found", str(len(report.found)), f"{report.opened} opened with PyAV", ""),
        (
            "videos missing",
            str(len(report.missing)),
            _examples([f"{v} ({p})" for v, p in report.missing.items()]),
            MISSING_FIX.format(name=name) if report.missing else "",
        ),
        (
            "videos unreadable",
            str(len(report.unreadable)),
            _examples([f"{v}: {why}" for v, why in report.unreadable.items()]),
            UNREADABLE_FIX if report.unreadable else "",
        ),
    ]
    rows += [
        (f"bad rows: {cause}", str(len(qids)), _examples(qids), fix_for(cause))
        for cause, qids in sorted(report.causes.items(), key=lambda kv: -len(kv[1]))
    ]
    widths = [max(len(r[i]) for r in rows + [("what", "count", "examples", "fix")]) for i in range(3)]
    lines = [f"{'what':<{widths[0]}}  {'count':>{widths[1]}}  {'examples':<{widths[2]}}  fix"]
    lines += [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows]
    return "\n".join(lines)


def benchmark_config(overrides: list[str]) -> BenchmarkConfig:
    """The run's benchmark config, composed from ``conf/`` exactly as ``run.py`` composes it."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_object(cfg.benchmark)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.data.check", description=__doc__.split("\n")[0])
    parser.add_argument("--open", type=int, default=16, metavar="N", help="videos to open with PyAV (default 16)")
    args, overrides = parser.parse_known_args(argv)
    try:
        cfg = benchmark_config(overrides)
        bench = benchmark_class(cfg.name)(cfg)
        samples = select(bench.samples(), cfg)
    except (ConfigError, HydraException, OmegaConfBaseException) as err:
        print(f"error: {err}".splitlines()[0], file=sys.stderr)
        return 2
    annotations = getattr(bench, "annotations", None)
    part = f" part={cfg.part}" if cfg.part else ""
    print(f"benchmark={cfg.name}{part} root={cfg.root} annotations={annotations}")
    report = examine(samples, args.open)
    print(table(report, cfg.name))
    verdict = (
        "every question can be answered"
        if report.errors == 0
        else f"{report.errors} of {report.questions} questions would be scored as errors"
    )
    print(f"\n{verdict}")
    return 0 if report.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
