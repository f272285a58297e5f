"""Video-MME (lmms-eval task ``videomme``): 900 videos x 3 questions, scored without subtitles (the paper's setting).

The prompt keeps "and the subtitles" even without subtitles: that is lmms-eval's protocol text, and the published
numbers were produced with it. Scores add the paper's S/M/L/Avg columns (Avg = micro accuracy over all questions,
which equals the mean of S/M/L on the full set of equal-sized durations).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, register
from infinipotv.data.loading import AnnotatedBenchmark, RowError, first_existing, gold_letter, options_from_list, text
from infinipotv.data.parsing import by_form

HEADER = (
    "Select the best answer to the following multiple-choice question based on the video and the subtitles. "
    "Respond with only the letter (A, B, C, or D) of the correct option."
)
POST = "\nAnswer with the option's letter from the given choices directly."
COLUMNS = {"short": "S", "medium": "M", "long": "L"}


@register
class VideoMME(AnnotatedBenchmark):
    """Annotations: the Hub parquet (or a .json/.jsonl export of it); videos: ``{root}/data/{videoID}.mp4``."""

    name = "videomme"
    default_annotations = "videomme/test-00000-of-00001.parquet"
    id_field = "question_id"
    video_field = "videoID"
    category_fields = {
        "duration": "duration",
        "domain": "domain",
        "sub_category": "sub_category",
        "task_type": "task_type",
    }

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        options = options_from_list(row["options"])
        if len(options) != 4:
            raise RowError(f"Video-MME questions have 4 options, got {len(options)}")
        if row["duration"] not in COLUMNS:
            raise RowError(f"duration {row['duration']!r} is not one of {', '.join(COLUMNS)}")
        vid = text(row, "videoID")
        prompt = f"{HEADER}\n{text(row, 'question')}\n" + "\n".join(map(str, row["options"])) + "\n" + POST
        question = Question(
            qid=text(row, "question_id"),
            prompt=prompt,
            gold=gold_letter(row["answer"], options),
            text=text(row, "question"),
            options=options,
            categories=self.categories(row),
        )
        return vid, first_existing([self.root / "data" / f"{vid}{ext}" for ext in (".mp4", ".MP4", ".mkv")]), question

    def parse(self, output: str, question: Question) -> str | None:
        return by_form(output, "".join(question.options), strict=self.strict)

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        scores = super().score(records)
        durations = scores["breakdown"]["duration"]
        scores.update({col: durations.get(d) for d, col in COLUMNS.items()}, Avg=scores["overall"])
        return scores
