"""Accuracy from prediction records, overall and per category field, on a 0-100 scale.

A record is one answered (or failed) question: ``{benchmark, question_id, video_id, categories, prompt, output,
parsed, gold, correct, error}``. A record with an ``error`` (undecodable video, malformed annotation) counts as wrong
and is counted in ``n_errors``: dropping it would raise the accuracy of a run that failed on hard cases. A category
value with no records is absent (never 0), so a subset run cannot report a fake zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Record = dict[str, Any]


def is_correct(record: Record) -> bool:
    """Right answer (``correct`` is true itself: a NaN or a 1 is not) and no error."""
    return record.get("correct") is True and record.get("error") is None


def accuracy(records: Sequence[Record]) -> float | None:
    """Micro accuracy x 100, or None for no records."""
    return 100.0 * sum(map(is_correct, records)) / len(records) if records else None


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that exist (macro averages over tasks), or None when none do."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def group_by(records: Iterable[Record], field: str) -> dict[str, list[Record]]:
    """Records per value of a category field, values sorted; records without the field are left out."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        value = (r.get("categories") or {}).get(field)
        if value is not None:
            groups.setdefault(str(value), []).append(r)
    return dict(sorted(groups.items()))


def by_field(records: Sequence[Record], field: str) -> dict[str, float]:
    """Accuracy per value of one category field."""
    return {value: accuracy(rs) for value, rs in group_by(records, field).items()}


def summary(records: Sequence[Record], fields: Sequence[str]) -> dict[str, Any]:
    """The block every benchmark's score starts from: overall, n, n_errors, and accuracy and counts per field."""
    groups = {f: group_by(records, f) for f in fields}
    return {
        "overall": accuracy(records),
        "n": len(records),
        "n_errors": sum(r.get("error") is not None for r in records),
        "breakdown": {f: {v: accuracy(rs) for v, rs in g.items()} for f, g in groups.items()},
        "counts": {f: {v: len(rs) for v, rs in g.items()} for f, g in groups.items()},
    }


def gate_counts(records: Iterable[Record]) -> dict[str, Any] | None:
    """How many answers each branch of an answer-time gate gave (a record's ``gate.branch``: WeaveTime's
    ``retrieval`` / ``cache_only``), their total ``n`` and the ``retrieval_share``; None when no record has a
    gate. Counted from the records, so a sharded run's is its shards' together."""
    counts: dict[str, int] = {}
    for record in records:
        if isinstance(record.get("gate"), dict):
            branch = str(record["gate"].get("branch"))
            counts[branch] = counts.get(branch, 0) + 1
    if not counts:
        return None
    total = sum(counts.values())
    return {**dict(sorted(counts.items())), "n": total, "retrieval_share": counts.get("retrieval", 0) / total}
