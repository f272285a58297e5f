"""LongVideoBench validation set (lmms-eval task ``longvideobench_val_v``): 1,337 questions, up to 5 options.

lmms-eval's parser takes the first capital A-E anywhere, so "Answer: B" scores as A; ``faithful`` keeps that (and
its seeded random letter for an unparseable answer) to match published numbers, ``strict`` reads the standalone
letter. Answers get 32 new tokens, as in lmms-eval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinipotv.data.base import Question, register
from infinipotv.data.loading import ANSWER_DIRECTLY, LETTERS, AnnotatedBenchmark, RowError, is_null, text
from infinipotv.data.parsing import first_capital

MAX_NEW_TOKENS = 32


def _options(row: dict[str, Any]) -> list[str]:
    """The real options: the ``candidates`` list of the released json, or the Hub's option0..option4 minus the
    trailing "N/A" (unused) ones, as lmms-eval drops them. A null option, or a used one after an "N/A", is a bad row:
    dropping it would move every later option up a letter, and ``correct_choice`` (an index) would name another. An
    empty one is a bad row too: it would be shown as a bare ``B. ``."""
    if "candidates" in row:
        if not isinstance(row["candidates"], list):
            raise RowError(f"candidates must be a list of 2-5 strings, got {row['candidates']!r}")
        named = [(f"candidates[{i}]", o) for i, o in enumerate(row["candidates"])]
    else:
        named = [(f"option{i}", row[f"option{i}"]) for i in range(5) if f"option{i}" in row]
    for name, option in named:
        if is_null(option):
            raise RowError(f"{name} is null")
        if str(option).strip() == "":  # it would be shown as a bare "B. " and scored like any option
            raise RowError(f"{name} is empty")
    used = [str(o) != "N/A" for _, o in named]
    n_options = used.index(False) if False in used else len(used)
    if any(used[n_options:]):
        raise RowError(f'{named[n_options][0]} is "N/A" but a later option is used: the letters after it would shift')
    if not 2 <= n_options <= 5:
        raise RowError(f"expected 2-5 options, got {n_options}")
    return [str(o) for _, o in named[:n_options]]


@register
class LongVideoBench(AnnotatedBenchmark):
    """Annotations: ``{root}/lvb_val.json`` as released (or the Hub parquet); videos: ``{root}/videos/{video_path}``."""

    name = "longvideobench"
    default_annotations = "lvb_val.json"
    id_field = "id"
    video_field = "video_id"
    category_fields = {
        "duration_group": "duration_group",
        "question_category": "question_category",
        "topic_category": "topic_category",
    }

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        options = dict(zip(LETTERS, _options(row)))
        choice = row["correct_choice"]
        if isinstance(choice, bool) or (not isinstance(choice, int) and not str(choice).strip().isdigit()):
            raise RowError(f"correct_choice {choice!r} must be an option index 0-{len(options) - 1}")
        choice = int(choice)
        if not 0 <= choice < len(options):
            raise RowError(f"correct_choice {choice} is not an index of the {len(options)} options")
        lines = "\n".join(f"{letter}. {text}" for letter, text in options.items())
        question = Question(
            qid=text(row, "id"),
            prompt=f"{text(row, 'question')}\n{lines}\n{ANSWER_DIRECTLY}\n",
            gold=LETTERS[choice],
            text=text(row, "question"),
            options=options,
            categories=self.categories(row),
            max_new_tokens=MAX_NEW_TOKENS,
        )
        return text(row, "video_id"), self.root / "videos" / text(row, "video_path"), question

    def parse(self, output: str, question: Question) -> str | None:
        return first_capital(output, "".join(question.options), question.qid, self.cfg.seed, strict=self.strict)
