"""What a run's answers say about it: a run whose every answer is an error holds no result (:func:`failure`), and an
answer whose question was edited since no longer answers it (:func:`changed`). The job reads both; neither needs the
model stack, so this module imports nothing heavy."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from infinipotv.data.base import Question


class RunFailed(RuntimeError):
    """Every question of a run ended in an error: its files are written (metrics.json says ``failed``), but it
    holds no result, so run.py exits non-zero and a sweep counts the job FAILED."""


def failure(records: list[dict[str, Any]]) -> str | None:
    """Why a run holds no result, in one line, when every question it answered ended in an error (a run where only
    some did is a result: a bad question costs only itself); None otherwise. It names each cause's count and the
    first error, which is what the fix needs."""
    errors = [r.get("error") for r in records]
    if not errors or any(e is None for e in errors):
        return None
    causes = Counter(str(e).split(":")[0] for e in errors)
    counts = ", ".join(f"{cause}: {n}" for cause, n in causes.most_common())
    first = " ".join(str(errors[0]).split())
    return f"every one of the {len(errors)} questions ended in an error ({counts}), the first: {first}"


#: What a record keeps of the question it answers (:func:`infinipotv.job._record`): a resume compares it with the
#: annotations.
QUESTION_FIELDS = ("prompt", "options", "gold", "time_s", "categories")


def changed(record: dict[str, Any], questions: dict[str, Question]) -> str | None:
    """Why ``record`` no longer answers its question, or None: the annotations were edited since (its text, options,
    gold, time or categories differ from what the record kept)."""
    q = questions[str(record["question_id"])]
    for key in QUESTION_FIELDS:
        now = json.loads(json.dumps(getattr(q, key)))  # as the record holds it (tuples as lists)
        if key in record and record[key] != now:
            was, shown = (_short(v) for v in (record[key], now))
            return f"question {q.qid!r} changed since it was answered ({key}: {was} -> {shown}): answered again"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
