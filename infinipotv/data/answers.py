"""What a run's answers say about it: a run whose every answer is an error holds no result (:func:`failure`), an
answer whose question was edited since no longer answers it (:func:`changed`), and a compact run cannot answer again
(:func:`check_restream`). The job reads them; none needs the model stack, so this module imports nothing heavy."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, VideoSample
from infinipotv.data.rescore import why_not_a_prediction
from infinipotv.runs import COMPACT, MEMORY, PREDICTIONS, RunDirError, read_jsonl


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


def check_restream(run_dir: Path, questions: Asked, retry_errors: bool) -> None:
    """Refuse, in one line and before anything is touched, a compact run that would answer a question again: one
    without an answer, an error record under ``retry_errors``, an answer the resume does not keep
    (:func:`answer_again`: its question changed since, a field the metrics cannot read). Its
    metrics would be counted from a trace that holds one video."""
    if not (run_dir / COMPACT).is_file():
        return
    records, _ = read_jsonl(run_dir / PREDICTIONS)
    kept = {
        str(r.get("question_id"))
        for r in records
        if str(r.get("question_id")) in questions
        and not (retry_errors and r.get("error") is not None)
        and answer_again(r, questions) is None
    }
    again = [qid for qid in questions if qid not in kept]
    if again:
        raise RunDirError(
            f"{run_dir} is a compact run ({COMPACT}: its {MEMORY} trimmed to one video), so it cannot answer "
            f"{len(again)} question(s) again ({', '.join(again[:3])}{', ...' if len(again) > 3 else ''}) and count "
            f"its memory: rerun it whole in a new run directory (delete this one, or give another run_dir=)"
        )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
