"""StreamingVLM through the real session, as upstream (mit-han-lab/streaming-vlm@a940d8c) runs it: the memory is
pruned before each chunk, so a chunk's forward reads exactly the window, itself included, and the video memory
never holds more than |M| tokens at any point of a stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.compress import build
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.cache import StoreLayer
from infinipotv.stream.reference import tiny_adapter
from infinipotv.stream.session import StreamingSession


def noise(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n, 56, 56, 3)).astype(np.uint8)


@pytest.mark.parametrize("pos_mode", ["shrink", "original"])
def test_each_chunk_attends_exactly_the_window(monkeypatch, pos_mode: str) -> None:
    """Tiny LLaVA-OneVision (16 tokens a frame), |M| = 72: a window of W = 4 frames; chunks of 1 to 3 frames. Every
    committing forward reads the prefix and min(W, frames streamed) frames, its own included; no forward (a
    question's frames since the boundary) reads more than prefix + |M| + its own tokens."""
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
        assert transient and own == per_frame and total - own == p + session.video.video_tokens <= p + budget
    assert sum(bool(s.compress) for s in session.trace) >= 8  # many evictions
    assert all(s.compress.tokens_before - s.compress.tokens_after >= 1 for s in session.trace if s.compress)
