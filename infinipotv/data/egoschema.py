"""EgoSchema, the 500-question subset with public answers (lmms-eval task ``egoschema_subset``).

Parsing follows lmms-eval, whose fallback for an unparseable answer is a random letter; ``faithful`` keeps that
fallback but seeds it by question id and ``benchmark.seed`` so a rerun gives the same number, ``strict`` scores
such an answer as wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, register
from infinipotv.data.loading import ANSWER_DIRECTLY, AnnotatedBenchmark, RowError, first_existing, options_from_list
from infinipotv.data.parsing import egoschema


@register
class EgoSchema(AnnotatedBenchmark):
    """Annotations: the Hub ``Subset`` parquet (or a .json/.jsonl export); videos: ``{root}/videos/{video_idx}.mp4``."""

    name = "egoschema"
    default_annotations = "Subset/test-00000-of-00001.parquet"
    id_field = "question_idx"
    video_field = "video_idx"

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        options = options_from_list(row["option"])
        if len(options) != 5:
            raise RowError(f"EgoSchema questions have 5 options, got {len(options)}")
        answer = str(row["answer"]).strip()
        if answer not in {"0", "1", "2", "3", "4"}:
            raise RowError(f"answer {row['answer']!r} must be an option index 0-4")
        vid = str(row["video_idx"])
        prompt = f"{row['question']}\n" + "\n".join(map(str, row["option"])) + f"\n{ANSWER_DIRECTLY}"
        question = Question(qid=str(row["question_idx"]), prompt=prompt, gold="ABCDE"[int(answer)], options=options)
        return vid, first_existing([self.root / "videos" / f"{vid}{ext}" for ext in (".mp4", ".MP4")]), question

    def parse(self, output: str, question: Question) -> str | None:
        return egoschema(output, question.options, question.qid, self.cfg.seed, strict=self.strict)
