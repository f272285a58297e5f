"""Whether a run is finished, and its figures as recorded: a study's next sitting returns a finished run untouched
(:func:`recorded_metrics`), and compaction trims only a finished run's trace (:mod:`infinipotv.results.compact`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .directory import METRICS, PROVENANCE


def _metrics(run_dir: Path) -> dict[str, Any] | None:
    """The run's metrics.json as an object, or None (absent, unreadable: the run is not finished)."""
    try:
        value = json.loads((run_dir / METRICS).read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def finished(run_dir: Path) -> bool:
    """Whether the run's metrics.json holds its figures for every question it asks (written after the last)."""
    metrics = _metrics(run_dir)
    return metrics is not None and metrics.get("complete") is True and isinstance(metrics.get("question_ids"), list)


def recorded_metrics(run_dir: Path, asked: Sequence[str]) -> dict[str, Any] | None:
    """The metrics of a run that is finished for exactly the questions ``asked`` (and has its provenance), as
    recorded; None otherwise. A finished run started again (the next sitting of its study) returns them untouched:
    computed again they would lose what only the process that answered measured (time to first token), stamp the
    provenance with today's code, and, from a compact run's trimmed trace, count one video's memory."""
    metrics = _metrics(run_dir)
    if metrics is None or not finished(run_dir) or not (run_dir / PROVENANCE).is_file():
        return None
    return metrics if [str(q) for q in metrics["question_ids"]] == list(asked) else None
