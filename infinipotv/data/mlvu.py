"""MLVU dev, multiple-choice part (lmms-eval task ``mlvu_dev``): 2,174 questions over 7 task types.

The headline number (M-avg) is the macro mean of the 7 task accuracies; the INT4 study groups them as Holistic,
Single-detail and Multi-detail. A task without questions in a subset run is listed as ``missing`` and left out of
the means (lmms-eval would count it as 0, which deflates subset runs).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, register
from infinipotv.data.loading import AnnotatedBenchmark, RowError, first_existing, options_from_list
from infinipotv.data.parsing import by_form
from infinipotv.data.scoring import mean

TASKS = ("topic_reasoning", "anomaly_reco", "plotQA", "needle", "ego", "order", "count")
GROUPS = {
    "holistic": ("topic_reasoning", "anomaly_reco"),
    "single_detail": ("plotQA", "needle", "ego"),
    "multi_detail": ("order", "count"),
}
POST = "\nOnly give the best option.\nBest option: ("


@register
class MLVU(AnnotatedBenchmark):
    """Annotations: the Hub dev parquet (or a .json/.jsonl export); videos: ``{root}/{video_name}``, also found
    under ``{root}/video/`` and its per-task folders (the layout of the released zips)."""

    name = "mlvu"
    default_annotations = "mlvu/test-00000-of-00001.parquet"
    id_field = "question_id"
    video_field = "video_name"
    category_fields = {"task_type": "task_type"}

    @cached_property
    def _task_folders(self) -> list[Path]:
        videos = self.root / "video"
        return sorted(p for p in videos.iterdir() if p.is_dir()) if videos.is_dir() else []

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        if row["task_type"] not in TASKS:
            raise RowError(f"task_type {row['task_type']!r} is not one of the 7 multiple-choice tasks {TASKS}")
        options = options_from_list(row["candidates"])
        answer = str(row["answer"]).strip()
        texts = {text: letter for letter, text in options.items()}
        gold = answer if answer in options else texts.get(answer)
        if gold is None:
            raise RowError(f"answer {answer!r} is neither an option letter nor a candidate")
        name = str(row["video_name"])
        candidates = [self.root / name, self.root / "video" / name, *(d / name for d in self._task_folders)]
        question = Question(qid=str(row["question_id"]), prompt=f"{row['question']}{POST}", gold=gold,
                            options=options, categories=self.categories(row))
        return name, first_existing(candidates), question

    def parse(self, output: str, question: Question) -> str | None:
        return by_form(output, "".join(question.options), strict=self.strict)

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        scores = super().score(records)
        tasks = scores["breakdown"]["task_type"]
        avg = mean(tasks.get(t) for t in TASKS)
        scores.update(
            micro=scores["overall"], overall=avg, avg=avg,
            tasks={t: tasks[t] for t in TASKS if t in tasks},
            groups={g: mean(tasks.get(t) for t in members) for g, members in GROUPS.items()},
            missing=[t for t in TASKS if t not in tasks],
        )
        return scores
