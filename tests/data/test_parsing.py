"""The answer parsers: every accepted form, the priority rules, and the reference parsers' quirks."""

from __future__ import annotations

import pytest

from infinipotv.config import BenchmarkConfig
from infinipotv.data.base import Question
from infinipotv.data.egoschema import EgoSchema
from infinipotv.data.longvideobench import LongVideoBench
from infinipotv.data.parsing import by_form, egoschema, first_capital, first_char, seeded_choice
from infinipotv.data.streamingbench import StreamingBench


@pytest.mark.parametrize("output, expected", [
    ("B", "B"),  # a bare letter
    ("C.", "C"),
    ("(D) a dog", "D"),  # at the very start, in parentheses
    ("A) The man walks", "A"),  # MLVU's "Best option: (" continuation
    ("A man is cooking, so D", "A"),  # start beats end
    ("I think it is B.", "B"),  # at the end
    ("Hmm (B) maybe", "B"),  # "(X)"
    ("I think the answer is C because it fits", "C"),  # "the answer is X" beats "(X)" and "X "
    ("The Answer is: D, I believe", "D"),  # the phrase is case-insensitive
    ("Options (A) and (B) are wrong; pick (C) please", "C"),  # last occurrence wins within a form
    ("Between A. and C. the latter", "C"),  # "X."
    ("pick B) or maybe C: yes", "C"),  # "X:" beats "X)"
    ("option B) fits", "B"),  # "X)"
    ("option B fits", "B"),  # "X "
    ("none of these", None),
    ("b", None),  # only capitals count
    ("E", None),  # not one of the letters
    ("Bees and Cats", None),  # letters inside words are not answers
])
def test_by_form(output: str, expected: str | None) -> None:
    assert by_form(output, "ABCD") == expected


def test_by_form_uses_the_question_letters() -> None:
    assert by_form("E", "ABCDE") == "E"
    with pytest.raises(ValueError, match="letters"):
        by_form("A", "")


EGO = {"A": "cuts vegetables", "B": "washes dishes", "C": "reads a book", "D": "plays guitar", "E": "walks the dog"}


@pytest.mark.parametrize("output, expected", [
    ("A", "A"),
    ("(C)", "C"),
    ("B.", "B"),  # trailing punctuation is stripped, then "B " matches
    ("The answer is D.", "D"),
    ("B or C", "B"),  # the earliest match wins
    ("so b. washes dishes is what he does here", "B"),  # long answer: lmms-eval matches "X. text"
])
def test_egoschema_faithful(output: str, expected: str) -> None:
    assert egoschema(output, EGO, "q", 0) == expected


def test_egoschema_long_answer_matched_by_option_text() -> None:
    long = "it looks like the person washes dishes in the kitchen"
    assert egoschema(long, EGO, "q", 0, strict=True) == "B"
    assert egoschema("he reads a book", EGO, "q", 0, strict=True) is None  # <= 5 words: no text matching


def test_egoschema_unparseable_is_seeded_random_faithful_and_none_strict() -> None:
    assert egoschema("unsure", EGO, "q7", 3) == seeded_choice("ABCDE", "q7", 3)
    assert egoschema("unsure", EGO, "q7", 3) == egoschema("unsure", EGO, "q7", 3)
    assert len({egoschema("unsure", EGO, f"q{i}", s) for i in range(10) for s in range(3)}) > 1
    assert egoschema("unsure", EGO, "q7", 3, strict=True) is None


@pytest.mark.parametrize("output, faithful, strict", [
    ("Answer: B", "A", "B"),  # the quirk: the capital of "Answer"
    ("The best answer is C", "C", "C"),  # answer phrases are dropped first
    ("D. A book", "D", "D"),
    ("I'd go with C", "C", "C"),
    ("E", "E", None),  # faithful returns a letter the question does not have
])
def test_first_capital(output: str, faithful: str, strict: str | None) -> None:
    assert first_capital(output, "ABCD", "q", 0) == faithful
    assert first_capital(output, "ABCD", "q", 0, strict=True) == strict


def test_first_capital_unparseable() -> None:
    assert first_capital("no idea", "ABCD", "q1", 0) == seeded_choice("ABCD", "q1", 0)
    assert first_capital("no idea", "ABCD", "q1", 0, strict=True) is None


@pytest.mark.parametrize("output, expected", [("A. foo", "A"), ("C", "C"), (" A", None), ("", None), ("E", None)])
def test_first_char(output: str, expected: str | None) -> None:
    assert first_char(output, "ABCD") == expected


@pytest.mark.parametrize("cls, output, faithful, strict", [
    (LongVideoBench, "Answer: B", "A", "B"),
    (StreamingBench, " The best option is B", None, "B"),
    (EgoSchema, "maybe", seeded_choice("ABCDE", "q", 0), None),
])
def test_benchmarks_dispatch_on_cfg_parser(cls, output: str, faithful: str | None, strict: str | None) -> None:
    letters = "ABCDE" if cls is EgoSchema else "ABCD"
    question = Question(qid="q", prompt="", gold="B", options={x: f"text {x}" for x in letters})
    for parser, expected in (("faithful", faithful), ("strict", strict)):
        bench = cls(BenchmarkConfig(name=cls.name, root="/nonexistent", parser=parser))
        assert bench.parse(output, question) == expected
