"""What a run's answers say about it: a run whose every answer is an error holds no result (:func:`failure`), and an
answer whose question was edited since no longer answers it (:func:`changed`). The job reads both; neither needs the
model stack, so this module imports nothing heavy."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from infinipotv.data.base import Question, VideoSample
from infinipotv.data.rescore import why_not_a_prediction


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
#: A question of the run with the video it is asked of, by question id.
Asked = dict[str, tuple[Question, str]]


def asked_of(samples: Iterable[VideoSample]) -> Asked:
    """Each question of ``samples`` with its video, by id: what :func:`changed` compares a record with."""
    return {q.qid: (q, s.video_id) for s in samples for q in s.questions}


def changed(record: dict[str, Any], question: Question, video_id: str) -> str | None:
    """Why ``record`` no longer answers ``question``, asked of ``video_id``, or None: the annotations were edited
    since (its text, options, gold, time or categories differ from what the record kept, or it is asked of another
    video: the answer read that one's frames)."""
    now = {key: json.loads(json.dumps(getattr(question, key))) for key in QUESTION_FIELDS}  # as a record holds it
    for key, value in {"video_id": video_id, **now}.items():
        if key in record and record[key] != value:
            was, shown = (_short(v) for v in (record[key], value))
            return f"question {question.qid!r} changed since it was answered ({key}: {was} -> {shown}): answered again"
    return None


def answer_again(record: dict[str, Any], questions: Asked) -> str | None:
    """Why a record a resume found (of a question of the run) is not kept and its question is answered again, or
    None: the metrics cannot read it (a field missing or of another kind: the rule the aggregator and ``rescore``
    read by, as the trace's steps are checked), or its question changed since (:func:`changed`)."""
    why = why_not_a_prediction(record, ("question_id", "video_id"))
    return why or changed(record, *questions[str(record["question_id"])])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
