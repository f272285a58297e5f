"""Our faithful parsers against lmms-eval 0.7.3's own functions, on tricky replies and thousands of random ones.

The replies go through lmms-eval's evaluator steps first (reasoning blocks removed, then stripped), as in a real run;
our parsers take the raw reply, as run.py gives it.
"""

from __future__ import annotations

import random

import pytest

from tests.lmms.lmms_data import NO_LMMS

pytestmark = pytest.mark.lmms
pytest.importorskip("lmms_eval", reason=NO_LMMS)

from lmms_eval.api.reasoning import strip_reasoning_tags  # noqa: E402
from lmms_eval.tasks._task_utils.mcq_extract import extract_mcq_answer  # noqa: E402
from lmms_eval.tasks.egoschema import utils as ego_utils  # noqa: E402
from lmms_eval.tasks.longvideobench import utils as lvb_utils  # noqa: E402

from infinipotv.data.loading import options_from_list  # noqa: E402
from infinipotv.data.parsing import by_form, egoschema, first_capital  # noqa: E402

TAGS = [["<think>", "</think>"], ["<analysis>", "</analysis>"]]  # lmms-eval's default --reasoning_tags
TRICKY = [
    "A",
    "B.",
    " C\n",
    "(D) a dog",
    "A) The man walks",
    "I think the answer is C because it fits",
    "Bees and Cats",
    "the answer is B, Dog",
    "DATA shows",
    "USA.",
    "",
    "   ",
    "(D) a dog, A.",
    '"C"',
    ".,A",
    "\u7b54\u6848\u662fB",
    "I choose (C) but B.",
    "Answer: B",
    "The best answer is D",
    "<think>A or B</think> C",
    "so</think>D",
    "E",
    "maybe c. washes dishes is what he does",
    "The answer is (E) because c walks the dog every day",
    "he clearly washes dishes here in the kitchen",
    "A. c does thing 0 in q. then more words here",
]
ALPHABET = list("ABCDEabcde .,:;()!?'\"\n") + [
    "the answer is ",
    "I pick ",
    "<think>",
    "</think>",
    "Best option:",
    "washes dishes",
    "A. cuts vegetables",
]


def replies(n: int = 6000) -> list[str]:
    rng = random.Random(0)
    return TRICKY + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def as_lmms_sees(reply: str) -> str:
    return strip_reasoning_tags(reply, TAGS).strip()


def test_video_mme_and_mlvu_parser_is_lmms_evals() -> None:
    for reply in replies():
        assert (by_form(reply, "ABCD") or "") == extract_mcq_answer(as_lmms_sees(reply), choices=list("ABCD")), reply


EGO_OPTIONS = ["A. cuts vegetables", "B. washes dishes", "C. reads a book", "D. plays guitar", "E. walks the dog"]


def test_egoschema_parser_is_lmms_evals_where_it_does_not_draw() -> None:
    index2ans, letters = ego_utils.get_multi_choice_info({"option": EGO_OPTIONS})
    options = options_from_list(EGO_OPTIONS)
    drawn = 0
    for reply in replies():
        theirs, matched = ego_utils.parse_multi_choice_response(as_lmms_sees(reply), letters, index2ans)
        ours = egoschema(reply, options, "q", 0, random_fallback=False)
        assert ours == (theirs if matched else None), reply
        drawn += not matched
    assert 0 < drawn < len(replies())  # both branches were exercised


@pytest.mark.parametrize("n_options", [4, 5])
def test_longvideobench_parser_is_lmms_evals_where_it_does_not_draw(n_options: int) -> None:
    letters = "ABCDE"[:n_options]
    index2ans = {x: f"event {x}" for x in letters}
    for reply in replies():
        ours = first_capital(reply, letters, "q", 0, random_fallback=False)
        theirs = lvb_utils.parse_multi_choice_response(as_lmms_sees(reply), list(letters), index2ans)
        if ours is None:  # lmms-eval drew a random option letter
            assert theirs in letters, reply
        else:
            assert ours == theirs, reply
