"""MLVU dev, multiple-choice part (lmms-eval task ``mlvu_dev``): 2,174 questions over 7 task types.

Two releases load, the format read from the rows: the Hub parquet (``sy1998/MLVU_dev``: ``question_id``, the options
inside ``question``, the answer a letter) and the official per-task JSONs (``1_plotQA.json`` ... ``7_topic_reasoning
.json``: ``video, duration, question, candidates, answer`` (the option's text), ``question_type``, the needle task
typed ``findNeedle``), turned into the Hub's shape: ids ``<task>_<k>`` (k counts the task's questions in file order),
the question followed by its ``(A) ...`` lines. The open-ended tasks (``subPlot``, ``summary``) are not multiple
choice and are left out. The official answer is always a candidate's text, never a letter (candidates ``["B", "A",
"D", "C"]`` with answer ``"A"`` key option B, whose text is "A"): it names the last candidate equal to it, as the
official scorer does, and an answer that is not among the candidates (two in the release) is a bad row. The Hub's
answer is a letter (a candidate's text is taken too, for exports that give it).

The headline number (M-avg) is the macro mean of the 7 task accuracies; the INT4 study groups them as Holistic,
Single-detail and Multi-detail. A task without questions in a subset run is listed as ``missing`` and left out of
the means (lmms-eval would count it as 0, which deflates subset runs).
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, VideoSample, register
from infinipotv.data.loading import (
    LETTERS,
    AnnotatedBenchmark,
    DataError,
    RowError,
    check_root,
    first_existing,
    is_blank,
    options_from_list,
    read_records,
    text,
)
from infinipotv.data.parsing import by_form
from infinipotv.data.scoring import mean

TASKS = ("topic_reasoning", "anomaly_reco", "plotQA", "needle", "ego", "order", "count")
GROUPS = {
    "holistic": ("topic_reasoning", "anomaly_reco"),
    "single_detail": ("plotQA", "needle", "ego"),
    "multi_detail": ("order", "count"),
}
POST = "\nOnly give the best option.\nBest option: ("
OFFICIAL_TYPES = {
    "plotQA": "plotQA",
    "findNeedle": "needle",
    "ego": "ego",
    "count": "count",
    "order": "order",
    "anomaly_reco": "anomaly_reco",
    "topic_reasoning": "topic_reasoning",
}
OPEN_ENDED = ("subPlot", "summary")
HUB = "mlvu/test-00000-of-00001.parquet"
OFFICIAL_DIRS = ("json", "data")  # where the official release keeps its per-task JSONs (Hub MVLU/MLVU; GitHub)


def _task_order(path: Path) -> tuple[int, str]:
    head = path.name.split("_", 1)[0]
    return (int(head) if head.isdigit() else 99, path.name)


def bare_question(question: str) -> str:
    """The question without the candidate lines the release appends to it ("\n(A) ..."): the text retrieval reads
    (:attr:`Question.text`)."""
    return re.split(r"\n\(A\)", question, maxsplit=1)[0].strip()


def from_official(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Official per-task rows -> the Hub's shape; open-ended rows are dropped, other rows kept as they are."""
    counts: dict[str, int] = {}
    out = []
    for row in rows:
        if "question_type" not in row or "question_id" in row:
            out.append(row)
            continue
        if row["question_type"] in OPEN_ENDED:
            continue
        task = OFFICIAL_TYPES.get(row["question_type"], row["question_type"])
        k = counts[task] = counts.get(task, -1) + 1
        source = {"_source": row["_source"]} if "_source" in row else {}
        cands = row.get("candidates")
        lines = "".join(f"\n({x}) {c}" for x, c in zip(LETTERS, cands)) if isinstance(cands, list) else ""
        question = None if is_blank(row.get("question")) else f"{row['question']}{lines}"
        out.append(
            {
                "video_name": row.get("video"),
                "duration": row.get("duration"),
                "candidates": cands,
                "question": question,
                "answer": row.get("answer"),
                "answer_is_text": True,  # the official files' answer: a candidate's text, never a letter
                "task_type": task,
                "question_id": f"{task}_{k}",
                **source,
            }
        )
    return out


def _gold(answer: str, options: dict[str, str], official: bool) -> str:
    """The gold letter: the official files' answer is a candidate's text (the last equal one, as upstream), the Hub's
    a letter, else a candidate's text."""
    by_text = {t: letter for letter, t in options.items()}  # a repeated candidate: the last one, as upstream
    if official:
        if answer not in by_text:
            raise RowError(
                f"answer {answer!r} is not a candidate (the official files give the answer as a candidate's text)"
            )
        return by_text[answer]
    gold = answer if answer in options else by_text.get(answer)
    if gold is None:
        raise RowError(f"answer {answer!r} is neither an option letter nor a candidate")
    return gold


@register
class MLVU(AnnotatedBenchmark):
    """Annotations: the Hub dev parquet (or a .json/.jsonl export), or the official per-task JSONs (a folder of
    them or one file; found by default under ``{root}/json/`` or ``{root}/data/`` when the parquet is absent);
    videos: ``{root}/{video_name}``, also found under ``{root}/video/`` and its per-task folders (the layout of the
    released zips)."""

    name = "mlvu"
    default_annotations = HUB
    id_field = "question_id"
    video_field = "video_name"
    category_fields = {"task_type": "task_type"}

    @cached_property
    def _task_folders(self) -> list[Path]:
        videos = self.root / "video"
        return sorted(p for p in videos.iterdir() if p.is_dir()) if videos.is_dir() else []

    @property
    def annotations(self) -> Path:
        if self.cfg.annotations:
            return Path(self.cfg.annotations)
        candidates = [self.root / HUB, *(self.root / d for d in OFFICIAL_DIRS)]
        return next((p for p in candidates if p.exists()), candidates[0])

    def load(self) -> list[VideoSample]:
        check_root(self.root)
        path = self.annotations
        if path.is_dir():
            files = sorted(path.glob("*.json"), key=_task_order)
            if not files:
                raise DataError(
                    f"{path} holds no per-task .json files; put the official 1_plotQA.json ... "
                    f"7_topic_reasoning.json there or point benchmark.annotations at the Hub parquet"
                )
            rows = [{**r, "_source": f"{f.name} row {i}"} for f in files for i, r in enumerate(read_records(f))]
        else:
            rows = read_records(path)
        return self.collect(from_official(rows))

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        if row["task_type"] not in TASKS:
            raise RowError(f"task_type {row['task_type']!r} is not one of the 7 multiple-choice tasks {TASKS}")
        options = options_from_list(row["candidates"])
        gold = _gold(text(row, "answer").strip(), options, row.get("answer_is_text", False))
        name = text(row, "video_name")
        candidates = [self.root / name, self.root / "video" / name, *(d / name for d in self._task_folders)]
        question = Question(
            qid=text(row, "question_id"),
            prompt=f"{text(row, 'question')}{POST}",
            gold=gold,
            text=bare_question(text(row, "question")),
            options=options,
            categories=self.categories(row),
        )
        return name, first_existing(candidates), question

    def parse(self, output: str, question: Question) -> str | None:
        return by_form(output, "".join(question.options), strict=self.strict)

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        scores = super().score(records)
        tasks = scores["breakdown"]["task_type"]
        avg = mean(tasks.get(t) for t in TASKS)
        scores.update(
            micro=scores["overall"],
            overall=avg,
            avg=avg,
            tasks={t: tasks[t] for t in TASKS if t in tasks},
            groups={g: mean(tasks.get(t) for t in members) for g, members in GROUPS.items()},
            missing=[t for t in TASKS if t not in tasks],
        )
        return scores
