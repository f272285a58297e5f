"""Every registered policy through the real streaming session on the tiny Qwen2-VL, under a hard memory cap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.compress import POLICIES, POOLINGS, build, compressed_size
from infinipotv.kv import FullPrecisionStore, KiviStore
from infinipotv.stream.session import StreamingSession

BUDGET, C_RATIO, CHUNK = 48, 0.75, 2  # 6 tokens per model frame (56 x 84), chunks of 1 model frame
# StreamingTOM keeps every frame (OQM's 4-bit groups) and bounds what a forward reads instead: its own tests
# (tests/stream/test_peer_methods.py) hold that bound.
GROWING = {"streamingtom"}
# MuKV keeps no video in the cache (every block goes to the host): tests/stream/test_mukv_session.py holds its bounds.
NO_VIDEO_CACHE = {"mukv"}
VARIANTS = (
    [(name, {}) for name in POLICIES if name not in GROWING | NO_VIDEO_CACHE]
    + [("tar_van_pool", {"pooling": p}) for p in POOLINGS]
    + [("tar_van_pool", {"frame_view": "grid_aware"}), ("tar", {"frame_view": "grid_aware"})]
)


def video(n: int = 40, seed: int = 0) -> np.ndarray:
    """Scenes held for several frames with small noise, so that redundancy is real."""
    rng = np.random.default_rng(seed)
    scenes = rng.integers(0, 255, size=(n // 8 + 1, 56, 84, 3))
    noise = rng.integers(0, 4, size=(n, 56, 84, 3))
    return np.clip(scenes[np.arange(n) // 8] + noise, 0, 255).astype(np.uint8)


def stream(adapter, policy, budget, frames, questions=(), make_store=lambda: FullPrecisionStore(torch.float32)):
    session = StreamingSession(adapter, policy, budget, C_RATIO, make_store)
    session.start("v")
    answers = []
    for i in range(0, len(frames), CHUNK):
        session.feed(frames[i : i + CHUNK], fps=2.0)
        if questions and i == len(frames) // 2:
            answers += [session.ask(q, max_new_tokens=2).tokens for q in questions]
    session.finish()
    answers += [session.ask(q, max_new_tokens=2).tokens for q in questions]
    return session, answers


def variant_id(v: object) -> str:
    return v if isinstance(v, str) else "-".join(map(str, v.values()))


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=variant_id)
def test_policy_keeps_the_video_under_the_cap(tiny_qwen2vl, name, params):
    session, _ = stream(tiny_qwen2vl, build(name, **params), BUDGET, video())
    n_keep = compressed_size(BUDGET, C_RATIO)
    steps = session.trace
    assert steps, "no streaming step recorded"
    passes = [s.compress for s in steps if s.compress]
    if build(name, **params).evicts:
        assert passes, "the stream exceeded |M| but no compression pass ran"
    every_chunk = session.schedule is not None and session.schedule.every_chunk  # StreamMem, StreamingVLM
    due = BUDGET if POLICIES[name].streaming == "compression" else n_keep + 1  # a retrieval window: past |C|
    for s in steps:
        if s.compress and every_chunk:  # back to |M| at every chunk (StreamMem's pass also adds prototypes)
            assert s.compress.tokens_after == s.video_tokens <= BUDGET
        elif s.compress:
            assert s.compress.tokens_before >= due and s.compress.tokens_after == n_keep == s.video_tokens
        assert s.video_tokens < BUDGET + every_chunk or not build(name, **params).evicts
    ids = session.video.cache.stores[0].token_ids()
    assert ids.shape[1] == session.video.cache.committed_length()


@pytest.mark.parametrize(
    "make_store",
    [lambda: FullPrecisionStore(torch.float32), lambda: KiviStore(4, 32, 8, torch.float32)],
    ids=["fp32", "int4"],
)
def test_memory_is_query_agnostic(tiny_qwen2vl, make_store):
    policy = build("tar_van_pool")
    plain, _ = stream(tiny_qwen2vl, policy, BUDGET, video(), make_store=make_store)
    asked, _ = stream(
        tiny_qwen2vl, policy, BUDGET, video(), questions=("What is shown?", "Count the scenes."), make_store=make_store
    )
    reordered, _ = stream(
        tiny_qwen2vl, policy, BUDGET, video(), questions=("Count the scenes.", "What is shown?"), make_store=make_store
    )
    for a, b, c in zip(plain.video.cache.stores, asked.video.cache.stores, reordered.video.cache.stores):
        for x, y, z in zip(a.read(), b.read(), c.read()):
            assert torch.equal(x, y) and torch.equal(x, z)
        assert torch.equal(a.token_ids(), b.token_ids()) and torch.equal(a.token_ids(), c.token_ids())


def test_a_budget_larger_than_the_stream_equals_full(tiny_qwen2vl):
    frames = video(20)
    full, full_answers = stream(tiny_qwen2vl, build("full"), None, frames, questions=("What is shown?",))
    big, big_answers = stream(tiny_qwen2vl, build("tar_van_pool"), 10_000, frames, questions=("What is shown?",))
    assert not any(s.compress for s in big.trace)
    assert big_answers == full_answers
    for a, b in zip(full.video.cache.stores, big.video.cache.stores):
        assert torch.equal(a.read()[0], b.read()[0])


def test_a_chunk_too_large_for_the_budget_is_refused(tiny_qwen2vl):
    session = StreamingSession(tiny_qwen2vl, build("tar_van_pool"), BUDGET, C_RATIO, FullPrecisionStore)
    session.start("v")
    with pytest.raises(ValueError, match="chunk_frames"):
        session.feed(video(8), fps=2.0)


@pytest.mark.parametrize(
    "make_store",
    [lambda: FullPrecisionStore(torch.float32), lambda: KiviStore(4, 32, 8, torch.float32)],
    ids=["fp32", "int4"],
)
def test_a_pass_records_the_bytes_the_chunk_brought(tiny_qwen2vl, make_store, monkeypatch):
    """``compress.bytes_before`` is what every layer held just before it was compressed: here measured by reading
    each store as the pass reaches it."""
    seen: dict[int, int] = {}
    keep = {store: store.keep for store in (FullPrecisionStore, KiviStore)}

    def counted(self, indices):
        seen[len(seen)] = sum(self.nbytes().values())
        keep[type(self)](self, indices)

    for store in keep:
        monkeypatch.setattr(store, "keep", counted)
    session = StreamingSession(tiny_qwen2vl, build("tar_van_pool"), BUDGET, C_RATIO, make_store)
    session.start("v")
    frames = video()
    n_layers = tiny_qwen2vl.n_layers
    for i in range(0, len(frames), CHUNK):
        seen.clear()
        session.feed(frames[i : i + CHUNK], fps=2.0)
        step = session.trace[-1]
        if step.compress:
            assert len(seen) == n_layers * step.compress.passes
            assert step.compress.bytes_before == sum(seen[layer] for layer in range(n_layers))
            assert step.compress.bytes_before > step.cache_bytes
        else:
            assert not seen
    assert any(s.compress for s in session.trace)
