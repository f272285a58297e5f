"""A study's runs as git keeps them: compact, and resumable from a fresh clone.

A study (``experiments/study.sh``) writes its runs under ``results/runs/STUDY/``, and that same folder is committed.
``python -m infinipotv.results.compact STUDY`` makes it fit: each run keeps its ``config.yaml``, ``provenance.json``,
``predictions.jsonl`` and ``metrics.json``; its step trace ``memory.jsonl`` (some 35 KB a video on the symbolic
benchmark) stays whole while the run is unfinished, since a resume counts the memory peaks and frames from it, and is
trimmed to one video once ``metrics.json`` holds the finished run's figures: the video the memory figure shows (the
longest, the first by id among equals), so the figure draws the same from a clone. ``compact.json`` records what
was trimmed; it is written before the trace is cut, so no trimmed trace is ever without it. The study's own
``.gitignore`` (written here; the root one lets it decide) keeps the rest out: Hydra's ``.hydra/`` and log, the lock,
answers set aside. The study's committed runs must stay under ``--limit-mib`` (30 MiB): over it, one line names the
total and the largest files, and nothing is changed. STUDY is a name, never a path (``.`` would compact every run
under the runs folder), and everything is checked before the first file changes.

A later sitting resumes from them: a finished run is returned as its ``metrics.json`` records it
(:func:`infinipotv.runs.recorded_metrics`), never recomputed; an unfinished one continues from its whole trace; a
compact run that would answer a question again (``retry_errors``, a changed annotation) is refused before anything is
touched (:func:`infinipotv.data.answers.check_restream`), since its trimmed trace no longer holds what its metrics
were counted from. Both live below the job, which reads them; this module is the study's tool, beside the aggregator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infinipotv.runs import (
    COMPACT,
    CONFIG,
    MEMORY,
    METRICS,
    PREDICTIONS,
    PROVENANCE,
    RunDirError,
    finished,
    parse_line,
    rewrite,
)

#: What git keeps of each run of a study, and of the study's folder itself.
RUN_FILES = (CONFIG, PROVENANCE, PREDICTIONS, METRICS, MEMORY, COMPACT)
STUDY_FILES = (".gitignore", "study.log")
LIMIT_MIB = 30.0
IGNORE_HEADER = """\
# What git keeps of this study's runs (written by python -m infinipotv.results.compact; docs/runs.md, "A study's runs
# are committed"): each run's config, provenance, predictions, metrics and step trace (trimmed to one video once the
# run is finished), and the study's log. Hydra's .hydra/ and log, the lock and answers set aside stay out.
"""


def _video_steps(path: Path) -> tuple[list[bytes], list[Any], list[int]]:
    """memory.jsonl's lines, each line's video id and frames seen (None and -1 for a line that is not a step)."""
    lines = path.read_bytes().splitlines(keepends=True) if path.is_file() else []
    videos, frames = [], []
    for line in lines:
        step = parse_line(line)[0]
        ok = isinstance(step, dict) and isinstance(step.get("frames_seen"), int)
        videos.append(step.get("video_id") if ok else None)
        frames.append(step["frames_seen"] if ok else -1)
    return lines, videos, frames


@dataclass
class Trim:
    """A finished run's memory.jsonl cut to one video, planned: the lines kept and the record of the cut."""

    run_dir: Path
    kept: bytes
    record: str

    def apply(self) -> None:
        """The record first, then the trace: a kill between the two leaves a run marked compact whose trace is still
        whole (a resume refuses to answer again, :func:`infinipotv.data.answers.check_restream`; the next compaction
        finishes the trim), never a trimmed trace without its record, which a resume would count from as if whole."""
        rewrite(self.run_dir / COMPACT, self.record)
        rewrite(self.run_dir / MEMORY, self.kept)


def _trimmed(run_dir: Path) -> bool:
    """Whether the run's memory.jsonl is what its compact.json says the trim left."""
    try:
        record = json.loads((run_dir / COMPACT).read_bytes())[MEMORY]
        return (run_dir / MEMORY).stat().st_size == record["bytes_after"]
    except (OSError, ValueError, TypeError, KeyError):
        return False


def plan_trim(run_dir: Path) -> Trim | None:
    """How to trim a finished run's memory.jsonl to the steps of its longest video (the first by id among equals:
    the one the memory figure picks), recorded in compact.json; None for an unfinished run, or one trimmed before
    (a trim a kill interrupted is planned again: the same video, :meth:`Trim.apply`)."""
    path = run_dir / MEMORY
    if not finished(run_dir) or not path.is_file() or _trimmed(run_dir):
        return None
    lines, videos, frames = _video_steps(path)
    longest: dict[str, int] = {}
    for video, n in zip(videos, frames):
        if video is not None:
            longest[str(video)] = max(longest.get(str(video), -1), n)
    if not longest:
        return None
    keep = min(longest, key=lambda v: (-longest[v], v))
    kept = [line for line, video in zip(lines, videos) if video is not None and str(video) == keep]
    record = {
        MEMORY: {
            "video_id": keep,
            "steps_kept": len(kept),
            "lines_dropped": len(lines) - len(kept),
            "bytes_before": sum(map(len, lines)),
            "bytes_after": sum(map(len, kept)),
        }
    }
    return Trim(run_dir, b"".join(kept), json.dumps(record, indent=2) + "\n")


def run_dirs(study: Path) -> list[Path]:
    """The run directories under ``study``: folders with a config.yaml (Hydra's .hydra/ copies aside), sorted."""
    return sorted(Path(root) for root, dirs, files in os.walk(study) if CONFIG in files and Path(root).name != ".hydra")


def committed_files(study: Path) -> list[Path]:
    """The files git keeps of ``study`` under its .gitignore (:func:`ignore_text`): the study's, then each run's."""
    files = [study / name for name in STUDY_FILES if (study / name).is_file()]
    for run in run_dirs(study):
        files += [run / name for name in RUN_FILES if (run / name).is_file()]
    return files


def ignore_text() -> str:
    """A study's ``.gitignore``: everything out but :data:`STUDY_FILES` and each run's :data:`RUN_FILES`."""
    lines = ["*", "!*/", *(f"!/{name}" for name in STUDY_FILES), *(f"!{name}" for name in RUN_FILES), ".hydra/"]
    return IGNORE_HEADER + "\n".join(lines) + "\n"


@dataclass
class Summary:
    """What :func:`compact_study` does and what the study commits then (each file's size once compacted)."""

    study: Path
    runs: int = 0
    finished: int = 0
    trimmed: int = 0
    sizes: dict[Path, int] = field(default_factory=dict)

    @property
    def files(self) -> list[Path]:
        return list(self.sizes)

    @property
    def nbytes(self) -> int:
        return sum(self.sizes.values())

    def line(self, limit_mib: float) -> str:
        return (
            f"{self.study}: {self.runs} runs ({self.finished} finished, {self.trimmed} of them trimmed now; "
            f"{self.runs - self.finished} unfinished, kept whole): {self.nbytes / 2**20:.2f} MiB to commit "
            f"(limit {limit_mib:g} MiB)"
        )

    def check(self, limit_mib: float) -> None:
        """A ValueError naming the total and the largest files when the study would commit over ``limit_mib``."""
        if self.nbytes <= limit_mib * 2**20:
            return
        largest = sorted(self.sizes, key=lambda p: -self.sizes[p])[:3]
        shown = ", ".join(f"{p.relative_to(self.study)} ({self.sizes[p] / 2**20:.2f} MiB)" for p in largest)
        raise ValueError(
            f"{self.study} would commit {self.nbytes / 2**20:.2f} MiB, over the {limit_mib:g} MiB limit (largest: "
            f"{shown}): trim the study's grid, or split it into studies of their own"
        )


def compact_study(study: Path, limit_mib: float = LIMIT_MIB) -> Summary:
    """Trim the study's finished runs and write its .gitignore, once what it would then commit is checked against
    ``limit_mib``: over it, a ValueError naming the total and the largest files, and nothing is changed."""
    if not study.is_dir():
        raise ValueError(f"{study} is no folder: give the study's name (its runs are under results/runs/NAME/)")
    runs = run_dirs(study)
    trims = [trim for trim in map(plan_trim, runs) if trim is not None]
    summary = Summary(study, len(runs), sum(map(finished, runs)), len(trims))
    summary.sizes = {path: path.stat().st_size for path in committed_files(study)}
    summary.sizes[study / ".gitignore"] = len(ignore_text().encode())
    for trim in trims:
        summary.sizes[trim.run_dir / MEMORY] = len(trim.kept)
        summary.sizes[trim.run_dir / COMPACT] = len(trim.record.encode())
    summary.check(limit_mib)
    for trim in trims:
        trim.apply()
    rewrite(study / ".gitignore", ignore_text())
    return summary


def study_name(text: str) -> str:
    """``text`` if it names one study (a folder name under the runs folder); else a ValueError: a path (``.``,
    ``..``, empty, absolute, holding a ``/``) would compact every run under the folder it names, irreversibly."""
    if text in ("", ".", "..") or "/" in text or (os.altsep is not None and os.altsep in text):
        raise ValueError(
            f"{text!r} is not a study's name: give the name of one study, whose runs are under RUNS/NAME/ (e.g. "
            f"fair_peers), not a path"
        )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.results.compact", description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="the study's name: its runs are under RUNS/STUDY")
    parser.add_argument("--runs", default="results/runs", help="the folder that holds the studies' run folders")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="the most the study may commit")
    args = parser.parse_args(argv)
    try:
        summary = compact_study(Path(args.runs) / study_name(args.study), args.limit_mib)
    except (OSError, RunDirError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(summary.line(args.limit_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
