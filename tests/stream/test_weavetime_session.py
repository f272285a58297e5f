"""WeaveTime through the real session on the tiny models (shared/spec/field2.md 3.7, T3 and T4): the memory is
bounded and a question leaves it as it found it in either branch; the confident branch decodes from the prompt's
pass over [prefix | window]; the uncertain one reads [prefix | retrieved blocks in time order] re-rotated to
contiguous positions (a one-layer model's first-token logits equal a fresh prefill of those frames there); the
fine scoring never copies more than a retrieval buffer of keys to the accelerator at a time."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from infinipotv.compress import build, compressed_size
from infinipotv.compress.weavetime import coarse_to_fine, kv_queries
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.host import HostStore
from infinipotv.models import ADAPTERS
from infinipotv.stream.reference import tiny_adapter, tiny_config
from infinipotv.stream.session import StreamingSession
from infinipotv.stream.weavetime import WeaveTimeRetrieval
from tests.stream.fresh_prefill import fresh_prefill_logprobs

BUDGET, C_RATIO = 96, 0.5
PROMPT = "What is shown?"
ALWAYS, NEVER = 0.0, 1.0  # thresholds: every question retrieves / none does (a flat top ten is needed for 1.0)


def frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n, 56, 56, 3)).astype(np.uint8)


def streamed(adapter, video: np.ndarray, threshold: float, chunk: int = 2) -> StreamingSession:
    policy = build("weavetime", threshold=threshold)
    session = StreamingSession(adapter, policy, BUDGET, C_RATIO, lambda: FullPrecisionStore(torch.float32))
    session.start("v")
    for i in range(0, len(video), chunk):
        session.feed(video[i : i + chunk], fps=2.0)
    return session


def snapshot(session: StreamingSession) -> list[torch.Tensor]:
    v = session.video
    out = [t.clone() for store in v.cache.stores for t in (*store.read(), store.token_ids())]
    return out + [t.clone() for host in v.host for t in host.all().tensors()]


def stores_bytes(session: StreamingSession) -> int:
    return sum(sum(s.nbytes().values()) for s in session.video.cache.stores)


@pytest.mark.parametrize("family", ["llava_ov", "qwen2vl"])  # 1-D RoPE, M-RoPE
@pytest.mark.parametrize("threshold", [ALWAYS, NEVER])
def test_memory_is_bounded_and_a_question_leaves_it_unchanged(family, threshold):
    adapter = tiny_adapter(family)
    session = streamed(adapter, frames(24 if family == "llava_ov" else 48), threshold)
    window = compressed_size(BUDGET, C_RATIO)
    assert all(s.video_tokens <= window + 16 for s in session.trace)  # |C| plus at most one chunk's tokens
    assert session.trace[-1].host_bytes > 0 and session.trace[-1].video_tokens == window
    before = snapshot(session)
    first = session.ask(PROMPT, max_new_tokens=3)
    after = snapshot(session)
    assert len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after))
    again = session.ask(PROMPT, max_new_tokens=3)
    assert again.tokens == first.tokens and again.gate == first.gate
    assert torch.equal(again.first_logprobs, first.first_logprobs)
    assert first.gate["branch"] == ("retrieval" if threshold == ALWAYS else "cache_only")
    assert 0.0 <= first.gate["entropy"] < 1.0
    stores = stores_bytes(session)
    buffer = (BUDGET - window) * adapter.n_layers * adapter.n_kv_heads * adapter.head_dim * 4 * 2  # keys and values
    if threshold == NEVER:  # the window alone: nothing copied back
        assert first.accelerator_bytes == stores
    else:
        assert stores < first.accelerator_bytes <= stores + buffer


def test_the_confident_branch_decodes_from_the_prompt_over_the_window():
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(24), NEVER)
    answer = session.ask(PROMPT, max_new_tokens=1)
    v, q = session.video, adapter.question_ids(PROMPT)
    with v.cache.transient():  # [prefix | window | prompt], the window at its own positions
        logits = adapter.forward(adapter.embed_text(q), adapter.text_positions(v.next_position, len(q)), v.cache)
    torch.testing.assert_close(answer.first_logprobs, torch.log_softmax(logits[-1], dim=-1), atol=1e-5, rtol=1e-5)


def test_the_fine_scoring_copies_at_most_a_retrieval_buffer_at_a_time(monkeypatch):
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(40), ALWAYS)
    sizes: list[int] = []
    take = HostStore.take
    monkeypatch.setattr(HostStore, "take", lambda self, index: sizes.append(len(index)) or take(self, index))
    session.ask(PROMPT, max_new_tokens=1)
    buffer = BUDGET - compressed_size(BUDGET, C_RATIO)
    per_layer = len(sizes) // adapter.n_layers
    assert per_layer >= 3 and len(sizes) == per_layer * adapter.n_layers  # 3k candidates: three fetches, then the view
    assert max(sizes) <= buffer


def test_retrieved_blocks_answer_as_a_fresh_prefill_at_their_new_positions(monkeypatch):
    """T3 on one decoder layer (a key depends on its embedding and position only): the uncertain branch's
    first-token logits equal a cache prefilled afresh with [prefix | the picked frames in time order | question]
    at contiguous positions; no window."""
    config = tiny_config("llava_ov")
    config = replace(config, options={**config.options, "num_layers": 1})
    adapter = ADAPTERS["llava_ov"].load(config)
    video = frames(20, seed=3)
    session = streamed(adapter, video, ALWAYS)
    picked: list[torch.Tensor] = []
    take = HostStore.take
    monkeypatch.setattr(HostStore, "take", lambda self, index: picked.append(index) or take(self, index))
    answer = session.ask(PROMPT, max_new_tokens=1)
    assert answer.gate["branch"] == "retrieval"
    per_frame = session.video.grid[0] * session.video.grid[1]
    chosen = sorted({int(i) // per_frame for i in picked[-1]})  # the view's take comes after the fine scoring's
    assert len(chosen) * per_frame == BUDGET - compressed_size(BUDGET, C_RATIO)

    expected = fresh_prefill_logprobs(adapter, video, chosen, session.video.video_start, PROMPT)
    torch.testing.assert_close(answer.first_logprobs, expected, atol=1e-4, rtol=1e-4)


def test_a_streaming_question_gates_and_retrieves_with_the_prompts_queries(monkeypatch):
    """Frames since the last boundary are prefilled with the question: the gate's queries are the prompt's own
    tokens (the last forward), not the frames'."""
    adapter = tiny_adapter("llava_ov")
    video = frames(25)
    session = streamed(adapter, video[:24], ALWAYS)
    seen: list[int] = []
    reconsider = WeaveTimeRetrieval.reconsider
    monkeypatch.setattr(
        WeaveTimeRetrieval,
        "reconsider",
        lambda self, v, logits, queries: seen.append(queries[0].shape[1]) or reconsider(self, v, logits, queries),
    )
    before = snapshot(session)
    answer = session.ask(PROMPT, max_new_tokens=2, frames=video[24:], fps=2.0)
    assert seen == [len(adapter.question_ids(PROMPT))] and answer.gate["branch"] == "retrieval"
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(session)))


def test_each_layer_reads_the_blocks_its_rule_picks_from_the_whole_host_store(monkeypatch):
    """The blocks a layer reads equal coarse_to_fine over every stored key at once (RoPE stripped), whatever the
    segments the host store holds them in and the batches the fine score fetches them by."""
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(40), ALWAYS)
    picked: list[torch.Tensor] = []
    take = HostStore.take
    monkeypatch.setattr(HostStore, "take", lambda self, index: picked.append(index) or take(self, index))
    queries: list[list[torch.Tensor]] = []
    reconsider = WeaveTimeRetrieval.reconsider
    monkeypatch.setattr(
        WeaveTimeRetrieval,
        "reconsider",
        lambda self, v, logits, q: queries.append(q) or reconsider(self, v, logits, q),
    )
    session.ask(PROMPT, max_new_tokens=1)
    v = session.video
    block = v.grid[0] * v.grid[1]
    n_select = (BUDGET - compressed_size(BUDGET, C_RATIO)) // block
    for layer, host in enumerate(v.host):
        everything = host.all()
        positions = everything.positions.long()
        keys = adapter.rerotate(everything.keys, positions, torch.zeros_like(positions))  # [H_kv, T, D]
        h, t, d = keys.shape
        per_block = keys.view(h, t // block, block, d).permute(1, 2, 0, 3).reshape(t // block, block, h * d)
        rows = everything.block_keys[: t // block]
        q = kv_queries(queries[0][layer], h)
        expected = coarse_to_fine(q, rows, n_select, lambda c: [per_block[c]], prefilter=3)
        got = picked[len(picked) - adapter.n_layers + layer]  # the view's takes, a layer each, after every pick
        assert sorted({int(i) // block for i in got}) == expected.tolist(), layer
