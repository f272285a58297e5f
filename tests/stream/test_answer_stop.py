"""Decoding ends where the benchmark's ``stop`` says the answer is decided, and the tokens before it are unchanged."""

from __future__ import annotations

import re

import pytest
import torch

from infinipotv.data.symbolic import FIRST_WORD, choose, normalize
from infinipotv.kv import FullPrecisionStore
from infinipotv.stream.session import StreamingSession
from tests.stream.test_compress_session import video


@pytest.mark.parametrize(
    ("text", "decided"),
    [
        (" 89", False),
        (" 89 ", True),
        (" Alice.", True),
        (" 7:", True),
        (" (B", False),
        (" (B)", True),
        ("  ", False),
        (" visitor's", False),
        (" visitor's ", True),
    ],
)
def test_the_first_word_is_decided_once_it_has_ended(text, decided):
    assert bool(re.search(FIRST_WORD, text)) is decided


@pytest.mark.parametrize("text", [" 89 years old.", " Alice.\nThe", " 7:30am.", " (B) red", " red kettle", " 4817."])
def test_stopping_at_the_first_word_keeps_every_score(text):
    """What a symbolic answer cut at its first word parses to is what the whole answer parses to."""
    cut = next(text[: i + 1] for i in range(len(text)) if re.search(FIRST_WORD, text[: i + 1]))
    options = {"A": "89", "B": "red", "C": "7", "D": "4817"}
    assert normalize(cut) == normalize(text)
    assert choose(cut, options) == choose(text, options)


def test_decoding_stops_at_the_stop_pattern_and_keeps_the_tokens_before_it(tiny_qwen2vl):
    session = StreamingSession(tiny_qwen2vl, None, None, 0.75, lambda: FullPrecisionStore(torch.float32))
    session.start("v")
    session.feed(video(8), fps=2.0)
    session.finish()
    whole = session.ask("Describe the video.", max_new_tokens=6)
    first = session.ask("Describe the video.", max_new_tokens=6, stop=r"[\s\S]")  # any character: one token
    assert len(whole.tokens) == 6 and first.tokens == whole.tokens[:1]
    assert session.ask("Describe the video.", max_new_tokens=6, stop=r"(?!)").tokens == whole.tokens  # never matches
