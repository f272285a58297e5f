"""StreamingBench (THUNLP-MT): questions asked while the video streams, each at its own time stamp.

The model sees the stream only up to a question's ``time_s``, answers, and keeps watching; all questions of a video
are answered in one pass, in time order, on the same compressed memory (multi-turn, query-agnostic compression).
``part`` picks the released file: ``real_time`` (the 10 Real-Time Visual Understanding tasks that InfiniPot-V
reports), ``omni`` or ``contextual`` (its multiple-choice tasks). The prompt is StreamingBench's own; ``faithful``
parsing is its scorer's (the output's first character), ``strict`` the Video-MME form-priority parser.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.base import Question, VideoSample, register
from infinipotv.data.loading import (AnnotatedBenchmark, RowError, gold_letter, hms_seconds, options_from_list,
                                     read_records)
from infinipotv.data.parsing import by_form, first_char

PARTS = {  # part -> (group name, default annotation file under root)
    "real_time": ("Real-Time Visual Understanding", "questions_real.json"),
    "omni": ("Omni-Source Understanding", "questions_omni.json"),
    "contextual": ("Contextual Understanding", "questions_context.json"),
}
CSV_VIDEO = "videos/sample_{n}_real.mp4"  # where StreamingBench's preprocessing puts sample N of the real-time part
PROMPT = (
    "You are an advanced video question-answering AI assistant. You have been provided with some frames from the "
    "video and a multiple-choice question related to the video. Your task is to carefully analyze the video and "
    "provide the best answer to question, choosing from the four options provided. Respond with only the letter "
    "(A, B, C, or D) of the correct option.\n\nQuestion: {question}\n\nOptions:\n{options}\n\nThe best option is:"
)


def _option_list(raw: Any) -> Any:
    """The CSV stores the option list as a Python literal string."""
    if not isinstance(raw, str):
        return raw
    try:
        return ast.literal_eval(raw)
    except (SyntaxError, ValueError):
        raise RowError(f"options {raw!r} is not a list literal") from None


@register
class StreamingBench(AnnotatedBenchmark):
    """Annotations: the released JSON (entries with ``video_path`` and ``questions``), or the one-question-per-row
    CSV (videos then at ``{root}/`` + ``options.csv_video``, default ``videos/sample_{n}_real.mp4``)."""

    name = "streamingbench"
    streaming = True
    id_field = "question_id"
    video_field = "video_id"
    category_fields = {"task_type": "task_type", "group": "group"}

    def __init__(self, cfg: BenchmarkConfig) -> None:
        super().__init__(cfg)
        if self.part not in PARTS:
            raise ConfigError(f"benchmark.part={cfg.part!r} is unknown for streamingbench; "
                              f"use one of {', '.join(PARTS)}")

    @property
    def part(self) -> str:
        return self.cfg.part or "real_time"

    @property
    def annotations(self) -> Path:
        return Path(self.cfg.annotations) if self.cfg.annotations else self.root / PARTS[self.part][1]

    def load(self) -> list[VideoSample]:
        rows = read_records(self.annotations)
        flat = self._from_csv(rows) if self.annotations.suffix.lower() == ".csv" else self._from_json(rows)
        samples = self.collect([{**r, "group": PARTS[self.part][0]} for r in flat])
        for s in samples:
            s.questions.sort(key=lambda q: q.time_s or 0.0)
        return samples

    @staticmethod
    def _from_json(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per question; ids are ``<video stem>_<k>`` (1-based, in released order) as the JSON has none."""
        flat = []
        for e, entry in enumerate(entries):
            path = str(entry.get("video_path", ""))
            vid = Path(path).stem or f"entry{e}"
            questions = entry.get("questions")
            if not isinstance(questions, list):
                flat.append({"question_id": f"{vid}_0", "video_id": vid, "_problem": "entry has no 'questions' list"})
                continue
            flat += [{"question_id": f"{vid}_{k}", **q, "video_id": vid, "video_path": path}
                     for k, q in enumerate(questions, start=1)]
        return flat

    def _from_csv(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pattern = self.cfg.options.get("csv_video", CSV_VIDEO)
        flat = []
        for row in rows:
            m = re.search(r"sample_(\d+)", str(row.get("question_id", "")))
            if m is None:
                flat.append({**row, "_problem": "question_id has no sample_<n> naming its video"})
                continue
            flat.append({**row, "video_id": f"sample_{m.group(1)}", "video_path": pattern.format(n=m.group(1))})
        return flat

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        if "_problem" in row:
            raise RowError(row["_problem"])
        options = options_from_list(_option_list(row["options"]))
        lines = "\n".join(f"{letter}. {text}" for letter, text in options.items())
        question = Question(qid=str(row["question_id"]), prompt=PROMPT.format(question=row["question"], options=lines),
                            gold=gold_letter(row["answer"], options), options=options,
                            categories=self.categories(row), time_s=hms_seconds(row["time_stamp"]))
        return str(row["video_id"]), self.root / str(row["video_path"]), question

    def parse(self, output: str, question: Question) -> str | None:
        letters = "".join(question.options)
        return by_form(output, letters, strict=True) if self.strict else first_char(output, letters)

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        scores = super().score(records)
        return {**scores, "tasks": scores["breakdown"]["task_type"], "groups": scores["breakdown"]["group"]}
