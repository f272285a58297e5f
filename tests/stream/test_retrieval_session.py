"""ReKV and LiveVLM through the real session on the tiny models: the memory is bounded and a question leaves it as
it found it; retrieved blocks re-rotated to contiguous positions answer exactly as a fresh prefill of those frames
at those positions (a one-layer model, whose keys depend on no context)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from infinipotv.compress import build, compressed_size
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.host import HostStore
from infinipotv.models import ADAPTERS
from infinipotv.stream.reference import tiny_adapter, tiny_config
from infinipotv.stream.session import StreamingSession
from tests.stream.fresh_prefill import fresh_prefill_logprobs

BUDGET, C_RATIO = 96, 0.5
PROMPT = "What is shown?"


def frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n, 56, 56, 3)).astype(np.uint8)


def streamed(adapter, name: str, video: np.ndarray, chunk: int = 2, **params) -> StreamingSession:
    session = StreamingSession(
        adapter, build(name, **params), BUDGET, C_RATIO, lambda: FullPrecisionStore(torch.float32)
    )
    session.start("v")
    for i in range(0, len(video), chunk):
        session.feed(video[i : i + chunk], fps=2.0)
    return session


def snapshot(session: StreamingSession) -> list[torch.Tensor]:
    v = session.video
    out = [t.clone() for store in v.cache.stores for t in (*store.read(), store.token_ids())]
    return out + [t.clone() for host in v.host for t in host.all().tensors()]


@pytest.mark.parametrize(("family", "name"), [("llava_ov", "rekv"), ("qwen2vl", "livevlm")])  # 1-D RoPE, M-RoPE
def test_memory_is_bounded_and_a_question_leaves_it_unchanged(family, name):
    adapter = tiny_adapter(family)
    session = streamed(adapter, name, frames(24 if family == "llava_ov" else 72))  # 16 and 4 tokens per frame
    window = compressed_size(BUDGET, C_RATIO)
    assert all(s.video_tokens <= window + 12 for s in session.trace)  # |C| plus at most one chunk's tokens
    assert session.trace[-1].host_bytes > 0 and session.trace[-1].video_tokens == window
    before = snapshot(session)
    first = session.ask(PROMPT, max_new_tokens=3)
    after = snapshot(session)
    assert len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after))
    again = session.ask(PROMPT, max_new_tokens=3)
    assert again.tokens == first.tokens and torch.equal(again.first_logprobs, first.first_logprobs)
    stores = sum(sum(s.nbytes().values()) for s in session.video.cache.stores)
    assert (
        stores
        < first.accelerator_bytes
        <= stores + 2 * (BUDGET - window) * adapter.n_layers * adapter.n_kv_heads * adapter.head_dim * 4 + stores
    )


def test_retrieved_blocks_answer_as_a_fresh_prefill_at_their_new_positions(monkeypatch):
    """One decoder layer: a token's key depends on its embedding and position only, so re-rotated retrieved blocks
    must give the first-token logits of a cache prefilled afresh with [prefix | those frames | question] at
    contiguous positions (fp32 tolerance)."""
    config = tiny_config("llava_ov")
    config = replace(config, options={**config.options, "num_layers": 1})
    adapter = ADAPTERS["llava_ov"].load(config)
    video = frames(20, seed=3)
    session = streamed(adapter, "rekv", video)
    picked: list[torch.Tensor] = []
    take = HostStore.take
    monkeypatch.setattr(HostStore, "take", lambda self, index: picked.append(index) or take(self, index))
    answer = session.ask(PROMPT, max_new_tokens=1)
    per_frame = session.video.grid[0] * session.video.grid[1]
    chosen = sorted({int(i) // per_frame for i in picked[0]})
    assert 0 < len(chosen) * per_frame <= BUDGET - compressed_size(BUDGET, C_RATIO)

    expected = fresh_prefill_logprobs(adapter, video, chosen, session.video.video_start, PROMPT)
    torch.testing.assert_close(answer.first_logprobs, expected, atol=1e-4, rtol=1e-4)


def test_a_videos_short_last_chunk_is_offloaded_and_answered():
    """An offline video whose frame count is not a whole number of blocks ends in a short chunk: it streams, its
    partial block is offloaded but never a candidate, and the question is answered (it used to fail every question
    of the video). A chunk after a short one would misalign the blocks, and is refused."""
    adapter = tiny_adapter("llava_ov")  # 16 tokens a frame: blocks of 2 frames are 32 tokens, the buffer 48
    session = streamed(adapter, "rekv", frames(23), block_frames=2)
    host = session.video.host[0]
    assert len(host) == 23 * 16 and len(host.block_keys()) == 12  # 11 whole blocks and the last frame's half block
    queries = torch.randn(adapter.text_config.num_attention_heads, 3, adapter.head_dim)
    rows, n_select = session.method._candidates(session.video, session.video.cache.stores[0], host, 32)
    assert len(rows) == 11
    picked = session.method._picked(host, queries, rows, n_select, 32)
    assert len(picked) and int(picked.max()) < 22 * 16  # whole blocks only
    assert session.ask(PROMPT, max_new_tokens=2).tokens is not None
    short = streamed(adapter, "rekv", frames(3), block_frames=2)
    with pytest.raises(ValueError, match="only a video's last chunk may be short"):
        short.feed(frames(2, seed=1), fps=2.0)
