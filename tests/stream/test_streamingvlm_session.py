"""StreamingVLM through the real session, as upstream (mit-han-lab/streaming-vlm@a940d8c) runs it: the memory is
pruned before each chunk, so a chunk's forward reads exactly the window, itself included, and the video memory
never holds more than |M| tokens at any point of a stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.compress import build
from infinipotv.config import ModelConfig
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.cache import StoreLayer
from infinipotv.models import ADAPTERS
from infinipotv.models.base import ModelAdapter
from infinipotv.stream.reference import tiny_adapter
from infinipotv.stream.session import TEXT_ID, StreamingSession
from tests.models.test_rerotate import rotated_by_the_decoder
from tests.stream.test_peer_methods import glyph_video, pre_rope_keys_by_token


def noise(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n, 56, 56, 3)).astype(np.uint8)


@pytest.mark.parametrize("pos_mode", ["shrink", "original"])
def test_each_chunk_attends_exactly_the_window(monkeypatch, pos_mode: str) -> None:
    """Tiny LLaVA-OneVision (16 tokens a frame), |M| = 72: a window of W = 4 frames; chunks of 1 to 3 frames. Every
    committing forward reads the prefix and min(W, frames streamed) frames, its own included; no forward (a
    question's frames since the boundary) reads more than prefix + |M|, its own tokens included: the memory is read
    as pruned for them, as upstream prunes before their chunk."""
    adapter, budget = tiny_adapter("llava_ov"), 72
    per_frame, window = 16, 4
    reads: list[tuple[bool, int, int]] = []  # (transient, tokens read in all, the forward's own tokens)
    update = StoreLayer.update

    def counted(self, key_states, value_states, *args, **kwargs):
        out = update(self, key_states, value_states, *args, **kwargs)
        if self is session.video.cache.layers[0]:
            reads.append((self.transient, out[0].shape[2], key_states.shape[2]))
        return out

    monkeypatch.setattr(StoreLayer, "update", counted)
    session = StreamingSession(
        adapter, build("streamingvlm", pos_mode=pos_mode), budget, 0.75, lambda: FullPrecisionStore(torch.float32)
    )
    session.start("v")
    p = session.video.prefix_len
    video, streamed, sizes = noise(31), 0, [1, 3, 2, 2, 1, 3, 3, 1, 2, 2, 3, 1, 2, 3, 1]
    for size in sizes:
        reads.clear()
        session.feed(video[streamed : streamed + size], fps=2.0)
        streamed += size
        (transient, total, own), *_ = reads
        assert not transient and own == size * per_frame
        assert total - p == min(window, streamed) * per_frame, (streamed, total - p)
        assert session.video.video_tokens <= budget
        reads.clear()
        session.ask("What is shown?", max_new_tokens=2, frames=video[streamed : streamed + 1], fps=2.0)
        (transient, total, own), *_ = reads  # the question's frames since the boundary, read after the memory
        held = min(session.video.video_tokens, (window - 1) * per_frame)  # pruned for the one frame it brings
        assert transient and own == per_frame and total - own == p + held and total <= p + budget
    assert sum(bool(s.compress) for s in session.trace) >= 8  # many evictions
    assert all(s.compress.tokens_before - s.compress.tokens_after >= 1 for s in session.trace if s.compress)


@pytest.mark.parametrize("pos_mode", ["shrink", "original"])
@pytest.mark.parametrize("family", ["llava_ov", "qwen2vl"])
def test_a_questions_frames_are_read_where_upstream_prefills_their_chunk(family: str, pos_mode: str) -> None:
    """Upstream prunes the memory, then prefills the chunk the frames since the boundary belong to, then the
    question. A question bringing those frames answers (fp32) as a session that fed them as a chunk first, and
    leaves its memory as it was (the frames are fed again, as part of their chunk)."""
    adapter = tiny_adapter(family)
    step = adapter.frames_per_step
    video = noise(12 * step)

    def streamed(frames: int) -> StreamingSession:
        probe = StreamingSession(adapter, None, None, 0.75, lambda: FullPrecisionStore(torch.float32))
        probe.start("probe")
        probe.feed(video[:step], fps=2.0)
        budget = 4 * probe.video.grid[0] * probe.video.grid[1]  # W = 4 frames
        session = StreamingSession(
            adapter, build("streamingvlm", pos_mode=pos_mode), budget, 0.75, lambda: FullPrecisionStore(torch.float32)
        )
        session.start("v")
        for at in range(0, frames, 2 * step):
            session.feed(video[at : min(at + 2 * step, frames)], fps=2.0)
        return session

    for tail in (1, 2):  # model frames since the boundary
        first = 8 * step
        asking = streamed(first)
        before = [store.token_ids().clone() for store in asking.video.cache.stores]
        brought = asking.ask("What is shown?", 1, frames=video[first : first + tail * step], fps=2.0)
        assert all(torch.equal(s.token_ids(), b) for s, b in zip(asking.video.cache.stores, before))
        fed = streamed(first)
        fed.feed(video[first : first + tail * step], fps=2.0)
        expected = fed.ask("What is shown?", 1)
        torch.testing.assert_close(brought.first_logprobs, expected.first_logprobs, atol=1e-4, rtol=1e-4)


# -- shrink: the memory sits where a fresh session fed only its frames would put it ------------------------------
def family_adapter(family: str) -> ModelAdapter:
    """A tiny model per family; the real SmolLM2 for the symbolic ones (1-D RoPE, sequential or diagonal)."""
    if not family.startswith("symbolic"):
        return tiny_adapter(family)
    layout = family.split("-")[1]
    return ADAPTERS["symbolic"].load(
        ModelConfig(family="symbolic", max_pixels=3072, use_chat_template=False, options={"positions": layout})
    )


def fresh_positions(adapter: ModelAdapter, frames: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions a fresh session with no policy gives ``frames`` (fed as one chunk) and the first token of a
    question asked after them: the forwards' own position arguments."""
    spy: list[torch.Tensor] = []
    session = StreamingSession(adapter, None, None, 0.75, lambda: FullPrecisionStore(torch.float32))
    forward = adapter.forward
    adapter.forward = lambda e, p, c, **kw: (spy.append(p.cpu().clone()), forward(e, p, c, **kw))[1]
    try:
        session.start("fresh")
        session.feed(frames, fps=FPS)
        session.ask("What is shown?", max_new_tokens=1)
    finally:
        del adapter.forward
    return spy[1], spy[2][:, :1]


FPS = 2.0
SHRINK_CASES = [  # family, budget, raw frames, chunk sizes (raw frames)
    ("qwen2vl", 16, 20, [2, 4, 2, 2, 4, 2, 2, 2]),  # 4 tokens a model frame: W = 4 model frames
    ("qwen25vl", 16, 20, [2, 4, 2, 2, 4, 2, 2, 2]),
    ("llava_ov", 64, 16, [1, 2, 3, 1, 2, 2, 1, 2, 2]),  # 16 tokens a frame: W = 4
    pytest.param("symbolic-sequential", 36, 16, [2, 1, 2, 2, 3, 2, 2, 2], marks=pytest.mark.slow),  # 12 a frame
    pytest.param("symbolic-diagonal", 36, 16, [2, 1, 2, 2, 3, 2, 2, 2], marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("family", "budget", "n", "sizes"), SHRINK_CASES)
def test_shrink_stores_every_key_where_a_fresh_session_of_the_held_frames_would(
    family: str, budget: int, n: int, sizes: list[int]
) -> None:
    """After every chunk (past several evictions), with FP32 storage: every stored key equals its pre-RoPE key
    rotated at the position a fresh session fed only the held frames gives it (within 1e-4 of the largest key), the
    newest chunk was prefilled at that session's positions for it, and a question starts where that session's
    does (the model's rule for text after a video)."""
    adapter = family_adapter(family)
    video = glyph_video(n) if family.startswith("symbolic") else noise(n)
    session = StreamingSession(adapter, build("streamingvlm"), budget, 0.75, lambda: FullPrecisionStore(torch.float32))
    table, handles = pre_rope_keys_by_token(adapter, session)
    spy: list[torch.Tensor] = []
    forward = adapter.forward
    adapter.forward = lambda e, p, c, **kw: (spy.append(p.cpu().clone()), forward(e, p, c, **kw))[1]
    try:
        session.start("v")
        v, streamed, step = session.video, 0, adapter.frames_per_step
        for size in sizes:
            spy.clear()
            session.feed(video[streamed : streamed + size], fps=FPS)
            streamed += size
            chunk_positions = spy[0]
            per_frame = v.grid[0] * v.grid[1]
            frames = (v.cache.stores[0].token_ids()[0, v.prefix_len :].long() // per_frame).unique().tolist()
            assert frames == list(range(frames[0], frames[0] + len(frames)))  # the newest whole frames
            held = np.concatenate([video[f * step : (f + 1) * step] for f in frames])
            adapter.forward = forward
            expected, question = fresh_positions(adapter, held)
            adapter.forward = lambda e, p, c, **kw: (spy.append(p.cpu().clone()), forward(e, p, c, **kw))[1]
            assert torch.equal(chunk_positions, expected[:, -chunk_positions.shape[1] :])
            positions = torch.cat([adapter.text_positions(0, v.prefix_len).cpu(), expected], dim=1)
            for layer, store in enumerate(v.cache.stores):
                keys, _ = store.read()
                ids = store.token_ids()[0].tolist()
                pre = torch.stack([table[layer][(t, j if t == TEXT_ID else 0)] for j, t in enumerate(ids)], dim=1)
                rotated = rotated_by_the_decoder(adapter, pre, positions)
                torch.testing.assert_close(keys, rotated, atol=1e-4 * float(rotated.abs().max()), rtol=0)
            spy.clear()
            session.ask("What is shown?", max_new_tokens=1)
            assert torch.equal(spy[0][:, :1], question)
        assert sum(bool(s.compress) for s in session.trace) >= 4 and v.video_tokens <= budget
    finally:
        del adapter.forward
        for handle in handles:
            handle.remove()
