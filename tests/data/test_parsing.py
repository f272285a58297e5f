"""The answer parsers: every accepted form, the priority rules, and the reference parsers' quirks."""

from __future__ import annotations

import pytest

from infinipotv.config import BenchmarkConfig
from infinipotv.data.base import Question
from infinipotv.data.egoschema import EgoSchema
from infinipotv.data.longvideobench import LongVideoBench
from infinipotv.data.parsing import by_form, egoschema, first_capital, first_char, lmms_view, seeded_choice
from infinipotv.data.streamingbench import StreamingBench


@pytest.mark.parametrize(
    "output, faithful, strict",
    [
        ("B", "B", "B"),  # a bare letter
        ("C.", "C", "C"),
        ("(D) a dog", "D", "D"),  # "(X)" at the start
        ("A) The man walks", "A", "A"),  # MLVU's "Best option: (" continuation
        ("A man is cooking, so D", "A", "A"),  # start beats end
        ("I think it is B.", "B", "B"),  # at the end
        ("Hmm (B) maybe", "B", "B"),  # "(X)"
        ("I think the answer is C because it fits", "C", "C"),  # "the answer is X" beats "(X)" and "X "
        ("The Answer is: D, I believe", "D", "D"),  # the phrase is case-insensitive
        ("Options (A) and (B) are wrong; pick (C) please", "C", "C"),  # last occurrence wins within a form
        ("Between A. and C. the latter", "C", "C"),  # "X."
        ("pick B) or maybe C: yes", "C", "C"),  # "X:" beats "X)"
        ("option B) fits", "B", "B"),  # "X)"
        ("option B fits", "B", "B"),  # "X "
        ("I choose (C) but B.", "B", "B"),  # the end beats a phrase
        ("none of these", None, None),
        ("b", None, None),  # only capitals count
        ("E", None, None),  # not one of the letters
        # lmms-eval 0.7.3's quirks, kept by the faithful parser and fixed by the strict one:
        ("Bees and Cats", "C", None),  # no form at all: the last capital option letter, even inside a word
        ("DATA shows", "A", None),  # forms match inside words: "A " in "DATA "
        ("the answer is B, Dog", "D", "B"),  # every letter after the phrase is a candidate; the later one wins
        ("(D) a dog, A.", "A", "D"),  # "(D)" is not a start (the parenthesis comes first); the final "A" is an end
    ],
)
def test_by_form(output: str, faithful: str | None, strict: str | None) -> None:
    assert by_form(output, "ABCD") == faithful
    assert by_form(output, "ABCD", strict=True) == strict


@pytest.mark.parametrize(
    "output, view",
    [
        ("  B\n", "B"),
        ("<think>A or C?</think> D", "D"),  # a reasoning block is dropped
        ("<analysis>A</analysis>B<think>C</think>", "B"),
        ("so it must be</think> C", "C"),  # a reply holding only the closing tag keeps what follows it
        ("<think>unclosed A", "<think>unclosed A"),
    ],
)
def test_lmms_view_is_what_lmms_evals_parsers_get(output: str, view: str) -> None:
    assert lmms_view(output) == view


def test_faithful_parsers_read_the_lmms_view() -> None:
    assert by_form("<think>The answer is A</think> D", "ABCD") == "D"
    assert egoschema("B\n", EGO, "q", 0, random_fallback=False) == "B"  # "B " once stripped and padded
    assert first_capital("<think>Answer: A</think>The answer is C", "ABCD", "q", 0) == "C"


def test_by_form_uses_the_question_letters() -> None:
    for strict in (False, True):
        assert by_form("E", "ABCDE", strict=strict) == "E"
        with pytest.raises(ValueError, match="letters"):
            by_form("A", "", strict=strict)


EGO = {"A": "cuts vegetables", "B": "washes dishes", "C": "reads a book", "D": "plays guitar", "E": "walks the dog"}


@pytest.mark.parametrize(
    "output, expected",
    [
        ("A", "A"),
        ("(C)", "C"),
        ("B.", "B"),  # trailing punctuation is stripped, then "B " matches
        ("The answer is D.", "D"),
        ("B or C", "B"),  # the earliest match wins
        ("so b. washes dishes is what he does here", "B"),  # long answer: lmms-eval matches "X. text"
    ],
)
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
    assert egoschema("unsure", EGO, "q7", 3, random_fallback=False) is None
    assert egoschema("(C)", EGO, "q7", 3, random_fallback=False) == "C"


@pytest.mark.parametrize(
    "output, faithful, strict",
    [
        ("Answer: B", "A", "B"),  # the quirk: the capital of "Answer"
        ("The best answer is C", "C", "C"),  # answer phrases are dropped first
        ("D. A book", "D", "D"),
        ("I'd go with C", "C", "C"),
        ("E", "E", None),  # faithful returns a letter the question does not have
    ],
)
def test_first_capital(output: str, faithful: str, strict: str | None) -> None:
    assert first_capital(output, "ABCD", "q", 0) == faithful
    assert first_capital(output, "ABCD", "q", 0, strict=True) == strict


def test_first_capital_unparseable() -> None:
    assert first_capital("no idea", "ABCD", "q1", 0) == seeded_choice("ABCD", "q1", 0)
    assert first_capital("no idea", "ABCD", "q1", 0, strict=True) is None
    assert first_capital("no idea", "ABCD", "q1", 0, random_fallback=False) is None
    assert first_capital("Answer: B", "ABCD", "q1", 0, random_fallback=False) == "A"


@pytest.mark.parametrize("output, expected", [("A. foo", "A"), ("C", "C"), (" A", None), ("", None), ("E", None)])
def test_first_char(output: str, expected: str | None) -> None:
    assert first_char(output, "ABCD") == expected


@pytest.mark.parametrize(
    "cls, output, faithful, strict",
    [
        (LongVideoBench, "Answer: B", "A", "B"),
        (StreamingBench, " The best option is B", None, "B"),
        (EgoSchema, "maybe", seeded_choice("ABCDE", "q", 0), None),
    ],
)
def test_benchmarks_dispatch_on_cfg_parser(cls, output: str, faithful: str | None, strict: str | None) -> None:
    letters = "ABCDE" if cls is EgoSchema else "ABCD"
    question = Question(qid="q", prompt="", gold="B", text="", options={x: f"text {x}" for x in letters})
    for parser, expected in (("faithful", faithful), ("strict", strict)):
        bench = cls(BenchmarkConfig(name=cls.name, root="/nonexistent", parser=parser))
        assert bench.parse(output, question) == expected
