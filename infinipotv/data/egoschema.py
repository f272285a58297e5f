"""EgoSchema, the 500-question subset with public answers (lmms-eval task ``egoschema_subset``).

Two releases load, the format read from the rows: the Hub ``Subset`` parquet (``question_idx, question, video_idx,
option`` (five "A. ..." strings), ``answer`` (an index "0"-"4")) and the official pair, ``questions.json`` (all
5,031 questions: ``q_uid, question, option 0 ... option 4``) with ``subset_answers.json`` beside it (``{q_uid:
index}``, the 500 public answers). The official pair becomes the Hub's shape (ids and video names are the ``q_uid``)
and only its answered questions are the subset; an answer whose ``q_uid`` has no question is a bad row.

Parsing follows lmms-eval, whose fallback for an unparseable answer is a random letter; ``faithful`` keeps that
fallback but seeds it by question id and ``benchmark.seed`` so a rerun gives the same number, ``strict`` scores
such an answer as wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, VideoSample, register
from infinipotv.data.loading import (
    ANSWER_DIRECTLY,
    AnnotatedBenchmark,
    DataError,
    RowError,
    check_root,
    first_existing,
    is_blank,
    options_from_list,
    read_json,
    read_records,
    text,
)
from infinipotv.data.parsing import egoschema

HUB = "Subset/test-00000-of-00001.parquet"
OFFICIAL = "questions.json"
ANSWERS = "subset_answers.json"


def from_official(questions: list[dict[str, Any]], answers: dict[str, Any]) -> list[dict[str, Any]]:
    """The official questions with a public answer, in the Hub's shape, in the order of ``questions.json``."""
    by_uid = {str(q.get("q_uid")): q for q in questions}
    rows = []
    for q in questions:
        uid = str(q.get("q_uid"))
        if uid not in answers:
            continue
        options = [
            f"{'ABCDE'[i]}. {q[f'option {i}']}" if not is_blank(q.get(f"option {i}")) else None for i in range(5)
        ]
        rows.append(
            {
                "question_idx": uid,
                "question": q.get("question"),
                "video_idx": uid,
                "option": options,
                "answer": answers[uid],
            }
        )
    rows += [
        {"question_idx": uid, "_problem": f"{ANSWERS} names q_uid {uid!r}, which {OFFICIAL} does not hold"}
        for uid in answers
        if uid not in by_uid
    ]
    return rows


@register
class EgoSchema(AnnotatedBenchmark):
    """Annotations: the Hub ``Subset`` parquet (or a .json/.jsonl export), or the official ``questions.json`` with
    ``subset_answers.json`` beside it (used by default when the parquet is absent); videos:
    ``{root}/videos/{video_idx}.mp4``."""

    name = "egoschema"
    default_annotations = HUB
    id_field = "question_idx"
    video_field = "video_idx"

    @property
    def annotations(self) -> Path:
        if self.cfg.annotations:
            return Path(self.cfg.annotations)
        return first_existing([self.root / HUB, self.root / OFFICIAL])

    def load(self) -> list[VideoSample]:
        check_root(self.root)
        rows = read_records(self.annotations)
        if rows and "q_uid" in rows[0]:
            answers_path = self.annotations.with_name(ANSWERS)
            if not answers_path.is_file():
                raise DataError(
                    f"{self.annotations} is the official question file; its answers "
                    f"{answers_path} are missing: download {ANSWERS} from the EgoSchema release"
                )
            answers = read_json(answers_path)
            if not isinstance(answers, dict):
                raise DataError(f"{answers_path} must map q_uid -> answer index, found {type(answers).__name__}")
            rows = from_official(rows, {str(k): v for k, v in answers.items()})
        return self.collect(rows)

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        options = options_from_list(row["option"])
        if len(options) != 5:
            raise RowError(f"EgoSchema questions have 5 options, got {len(options)}")
        answer = str(row["answer"]).strip()
        if answer not in {"0", "1", "2", "3", "4"}:
            raise RowError(f"answer {row['answer']!r} must be an option index 0-4")
        vid = text(row, "video_idx")
        prompt = f"{text(row, 'question')}\n" + "\n".join(map(str, row["option"])) + f"\n{ANSWER_DIRECTLY}"
        question = Question(
            qid=text(row, "question_idx"),
            prompt=prompt,
            gold="ABCDE"[int(answer)],
            text=text(row, "question"),
            options=options,
        )
        return vid, first_existing([self.root / "videos" / f"{vid}{ext}" for ext in (".mp4", ".MP4")]), question

    def parse(self, output: str, question: Question) -> str | None:
        return egoschema(output, question.options, question.qid, self.cfg.seed, strict=self.strict)
