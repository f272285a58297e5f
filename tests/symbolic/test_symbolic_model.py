"""The symbolic family against the contract the other families are held to (tests/models): streaming a glyph video
chunk by chunk equals the language model reading the same text in one forward pass; positions are 1-D and
sequential (the diagonal layout, an option, moves a frame by one position); questions leave the memory unchanged;
compression runs on it."""

from __future__ import annotations

import pytest
import torch

from infinipotv import compress
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.stream.session import StreamingSession
from tests.symbolic.conftest import text_frames

LINES = ["The kitchen kettle is red."] * 3 + ["The secret code is 4817."] + ["In the garden the bench is blue."] * 4
PROMPT = "Question: What is the secret code?\nAnswer: The secret code is"


def session(adapter, policy=None, budget=None) -> StreamingSession:
    return StreamingSession(adapter, policy, budget, 0.75, lambda: FullPrecisionStore(adapter.dtype))


def streamed(adapter, frames, chunk: int, s: StreamingSession | None = None) -> StreamingSession:
    s = s or session(adapter)
    s.start("v")
    for i in range(0, len(frames), chunk):
        s.feed(frames[i : i + chunk], fps=2.0)
    s.finish()
    return s


@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_streaming_equals_reading_the_text_in_one_forward(symbolic, chunk):
    frames, ids = text_frames(symbolic, LINES)
    answer = streamed(symbolic, frames, chunk).ask(PROMPT, max_new_tokens=5)
    prompt = symbolic.prefix_ids() + ids.reshape(-1).tolist() + symbolic.question_ids(PROMPT)
    with torch.inference_mode():
        logits = symbolic.model(input_ids=torch.tensor([prompt])).logits[0, -1]
    assert (answer.first_logprobs - torch.log_softmax(logits, -1)).abs().max() < 1e-4
    assert answer.text.strip().startswith("4817")  # the real model reads the needle back


def test_positions_are_sequential_over_prefix_frames_and_question(symbolic):
    frames, _ = text_frames(symbolic, LINES)
    spy: list[torch.Tensor] = []
    forward = symbolic.forward
    symbolic.forward = lambda e, p, c, **kw: (spy.append(p.clone()), forward(e, p, c, **kw))[1]
    try:
        s = streamed(symbolic, frames, 3)
        s.ask(PROMPT, max_new_tokens=1)
    finally:
        del symbolic.forward
    positions = torch.cat(spy, dim=1)
    assert positions.shape[0] == 1 and torch.equal(positions[0], torch.arange(positions.shape[1]))


def test_questions_leave_the_memory_unchanged(symbolic):
    frames, _ = text_frames(symbolic, LINES)
    s = streamed(symbolic, frames, 2)
    before = [store.read()[0].clone() for store in s.video.cache.stores]
    first = s.ask(PROMPT, max_new_tokens=3)
    s.ask("Question: What colour is the bench?\nAnswer: In the garden the bench is", max_new_tokens=3)
    again = s.ask(PROMPT, max_new_tokens=3)
    assert all(torch.equal(b, store.read()[0]) for b, store in zip(before, s.video.cache.stores))
    assert first.tokens == again.tokens


def test_tar_van_pool_compresses_the_glyph_stream(symbolic):
    frames, _ = text_frames(symbolic, LINES * 3)
    policy = compress.build("tar_van_pool")
    s = session(symbolic, policy, budget=72)  # six frames of 12 tokens; one frame per chunk
    policy.validate(s.schedule.n_keep, 12, s.schedule.budget + 12)
    streamed(symbolic, frames, 1, s)
    passes = [t.compress for t in s.trace if t.compress]
    assert len(passes) >= 3 and all(p.tokens_after == s.schedule.n_keep for p in passes)
    assert torch.isfinite(s.ask(PROMPT, max_new_tokens=3).first_logprobs).all()


def test_the_diagonal_layout_moves_an_unchanged_glyph_by_one_position_per_frame(symbolic):
    frames, _ = text_frames(symbolic, LINES[:3])
    sequential = symbolic.encode_frames(frames, first_frame=5, fps=2.0, video_start=10).positions.view(3, 12)
    symbolic.positions = "diagonal"
    try:
        diagonal = symbolic.encode_frames(frames, first_frame=5, fps=2.0, video_start=10).positions.view(3, 12)
    finally:
        symbolic.positions = "sequential"
    slots = torch.arange(12)
    assert torch.equal(sequential, 10 + torch.arange(5, 8).unsqueeze(1) * 12 + slots)
    assert torch.equal(diagonal, 10 + torch.arange(5, 8).unsqueeze(1) + slots)
