"""StreamKV through the real session on every family's tiny model: segments close at a scene cut and each layer's
host store keeps its top frames of the segment and the summary frame after them (the spec's T3); the accelerator
holds ReKV's bounded memory; a question leaves the memory, the host store and the open segment as it found them;
the strict budget mode keeps exactly int(L * F * rho) frames of a segment over the layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.compress import build, compressed_size
from infinipotv.compress.retrieval import block_means
from infinipotv.compress.streamkv import StreamKV
from infinipotv.kv import FullPrecisionStore
from infinipotv.stream.method import Asked
from infinipotv.stream.reference import FAMILIES, tiny_adapter
from infinipotv.stream.session import StreamingSession
from infinipotv.stream.streamkv import SEGMENT

BUDGET, C_RATIO = 96, 0.5
PROMPT = "What is shown?"
CUT = dict(segment_theta=0.9999, min_segment_size=2)  # identical frames (cos 1) stay together, a new scene cuts


def scenes(adapter, lengths: list[int], seed: int = 0) -> np.ndarray:
    """Model frames of one random image per scene, ``lengths[i]`` identical model frames in scene i."""
    rng = np.random.default_rng(seed)
    step = adapter.frames_per_step
    parts = [np.repeat(rng.integers(0, 255, size=(1, 56, 56, 3)), n * step, axis=0) for n in lengths]
    return np.concatenate(parts).astype(np.uint8)


def streamed(adapter, video: np.ndarray, **params) -> StreamingSession:
    session = StreamingSession(
        adapter, build("streamkv", **params), BUDGET, C_RATIO, lambda: FullPrecisionStore(torch.float32)
    )
    session.start("v")
    chunk = 2 * adapter.frames_per_step
    for i in range(0, len(video), chunk):
        session.feed(video[i : i + chunk], fps=2.0)
    return session


def frame_ids(session: StreamingSession, layer: int) -> list[int]:
    """The model frame of each block in one layer's host store (a summary carries its segment's last frame)."""
    per_frame = session.video.grid[0] * session.video.grid[1]
    return (session.video.host[layer].stored("ids")[::per_frame] // per_frame).tolist()


def snapshot(session: StreamingSession) -> list[torch.Tensor]:
    v = session.video
    out = [t.clone() for store in v.cache.stores for t in (*store.read(), store.token_ids())]
    seg = v.state[SEGMENT]
    return out + [t.clone() for host in v.host for t in host.all().tensors()] + [e.clone() for e in seg.embeds]


@pytest.mark.parametrize("family", FAMILIES)
def test_t3_each_layer_keeps_its_top_frames_and_the_summary(family, monkeypatch):
    """Upstream's compress_kv on the spec's T3 scores [0.1, 0.9, 0.5, 0.3] with 2 frames reserved: frames 1 and 2
    stay, then the summary; the frames after the cut follow, untouched."""
    adapter = tiny_adapter(family)
    seen: list[tuple[int, int]] = []  # (guidance query tokens, frame rows) of each layer's scoring
    scores = torch.tensor([0.1, 0.9, 0.5, 0.3])
    monkeypatch.setattr(
        StreamKV, "guidance_scores", lambda self, q, rows: seen.append((q.shape[1], len(rows))) or scores
    )
    monkeypatch.setattr(StreamKV, "reserved", lambda self, scores: [2] * len(scores))
    session = streamed(adapter, scenes(adapter, [4, 2]), **CUT)
    for layer in range(adapter.n_layers):
        assert frame_ids(session, layer) == [1, 2, 3, 4, 5]
    assert seen == [(len(session.method.guidance_ids), 4)] * adapter.n_layers  # the prompt's queries, not the summary's
    # The summary is the mean of the segment's (identical) frames prefilled at its last frame's positions: in the
    # first layer, whose keys and values depend on the token and its position only, it is frame 1 moved there.
    host, per_frame = session.video.host[0], session.video.grid[0] * session.video.grid[1]
    frame1, summary = slice(0, per_frame), slice(2 * per_frame, 3 * per_frame)
    keys, values, positions = host.stored("keys"), host.stored("values"), host.stored("positions")
    torch.testing.assert_close(values[:, summary], values[:, frame1])
    moved = adapter.rerotate(keys[:, frame1], positions[:, frame1], positions[:, summary])
    torch.testing.assert_close(keys[:, summary], moved, atol=1e-5, rtol=1e-5)
    assert not torch.equal(positions[:, summary], positions[:, frame1])


@pytest.mark.parametrize("family", FAMILIES)
def test_memory_is_bounded_and_a_question_leaves_it_unchanged(family):
    adapter = tiny_adapter(family)
    session = streamed(adapter, scenes(adapter, [5, 3, 6, 4]), **CUT, max_segment_size=4)
    window = compressed_size(BUDGET, C_RATIO)
    chunk_tokens = 2 * session.video.grid[0] * session.video.grid[1]
    assert all(s.video_tokens <= window + chunk_tokens for s in session.trace)
    assert session.trace[-1].host_bytes > 0
    assert len(session.video.state[SEGMENT].ids) == 4  # the open scene of 4 frames, never more than max_segment_size
    before = snapshot(session)
    first = session.ask(PROMPT, max_new_tokens=3)
    after = snapshot(session)
    assert len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after))
    again = session.ask(PROMPT, max_new_tokens=3)
    assert again.tokens == first.tokens and torch.equal(again.first_logprobs, first.first_logprobs)
    stores = sum(sum(s.nbytes().values()) for s in session.video.cache.stores)
    buffer = (BUDGET - window) * adapter.n_layers * adapter.n_kv_heads * adapter.head_dim * 4 * 2  # keys + values
    assert stores < first.accelerator_bytes <= stores + buffer


def test_a_segment_past_its_maximum_merges_its_most_similar_frames_in_every_layer():
    """Six identical frames with max_segment_size 3: the open segment stays at 3 frames in every layer (equal
    cosines: the first pair merges, upstream's argmax), so frames 0, 1, 2 merged into the first, then 3 and 4."""
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, scenes(adapter, [6]), **CUT, max_segment_size=3)
    for layer in range(adapter.n_layers):
        assert frame_ids(session, layer) == [0, 4, 5]
    assert len(session.video.state[SEGMENT].embeds) == 3


def test_strict_budget_keeps_exactly_the_segment_share_over_the_layers():
    adapter = tiny_adapter("llava_ov")
    layers = adapter.n_layers
    for mode, exact in (("strict", True), ("upstream", False)):
        session = streamed(adapter, scenes(adapter, [5, 2]), **CUT, budget_mode=mode, compression_ratio=0.6)
        kept = sum(len(frame_ids(session, layer)) - 1 - 2 for layer in range(layers))  # minus summary, open frames
        assert (kept == int(layers * 5 * 0.6)) is exact, (mode, kept)


@pytest.mark.parametrize("family", ["llava_ov", "qwen2vl"])  # 1-D RoPE, M-RoPE
def test_the_cached_block_rows_are_the_mean_pre_rope_keys_of_what_the_host_holds(family):
    """Merges, compressed segments and summaries splice the host store; each block's row (what a question scores,
    kept on the host so the accelerator never holds the stream) must stay the mean of its frame's pre-RoPE keys."""
    adapter = tiny_adapter(family)
    session = streamed(adapter, scenes(adapter, [5, 3, 6]), **CUT, max_segment_size=3)
    per_frame = session.video.grid[0] * session.video.grid[1]
    for host in session.video.host:
        keys, positions = host.stored("keys"), host.stored("positions")
        pre_rope = adapter.rerotate(keys, positions, torch.zeros_like(positions))
        torch.testing.assert_close(host.block_keys(), block_means(pre_rope, per_frame), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_layer_adaptive_counts_read_uneven_frames_at_the_same_bytes(family, monkeypatch):
    """retrieve_temp > 0: the layers read different numbers of frames, right-aligned before one shared question
    position, and the answer holds the bytes every layer reading the buffer holds; the memory is unchanged after it.
    Counts from the real scores keep the total too."""
    adapter = tiny_adapter(family)
    video = scenes(adapter, [5, 3, 6, 4])
    fixed = streamed(adapter, video, **CUT, compression_ratio=1)
    adaptive = streamed(adapter, video, **CUT, compression_ratio=1, retrieve_temp=0.5)
    ids = Asked.of_text(adapter, PROMPT)
    even = fixed.method.view(fixed.video, ids)
    per_frame = fixed.video.grid[0] * fixed.video.grid[1]
    frames = (BUDGET - compressed_size(BUDGET, C_RATIO)) // per_frame
    assert adapter.n_layers == 2 and frames >= 2
    real = adaptive.ask(PROMPT, max_new_tokens=3)
    assert real.accelerator_bytes == fixed.ask(PROMPT, max_new_tokens=3).accelerator_bytes
    uneven = [frames + 1, frames - 1]
    monkeypatch.setattr(StreamKV, "retrieval_counts", lambda self, scores, counts: uneven)
    view = adaptive.method.view(adaptive.video, ids)
    lengths = [sum(run.shape[1] for run in keys) for keys, _ in view.layers]
    prefix = adaptive.video.prefix_len
    assert lengths == [prefix + n * per_frame for n in uneven]
    assert view.nbytes == even.nbytes
    # Re-rotated (1-D RoPE): the question follows the longest layer's frames; kept positions (M-RoPE): unchanged.
    assert view.start == even.start + (per_frame if adapter.contiguous_positions else 0)
    before = snapshot(adaptive)
    first = adaptive.ask(PROMPT, max_new_tokens=3)
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(adaptive)))
    assert first.accelerator_bytes == real.accelerator_bytes
    assert adaptive.ask(PROMPT, max_new_tokens=3).tokens == first.tokens
