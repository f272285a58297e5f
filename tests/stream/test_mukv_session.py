"""MuKV through the real session on the tiny models (shared/spec/field2.md 2.3-2.7): the cache holds the prefix
alone while the video streams and a question leaves everything as it found it; each block is prefilled alone over
the prefix where the video starts (its keys are a fresh session's that saw only that frame); the side prefill's
attention weights are the forward's own (they rebuild the last layer's attention output, SDPA on); the view reads
[prefix | patch | frame | segment blocks] in score order at the positions they were prefilled at (T4), or re-rotated
to follow the prefix; a segment gathers its frames across chunks and the frames of an unfinished one are not a
segment block (T3); an answer holds at most |M| retrieved tokens on the accelerator, chosen on the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.compress import build
from infinipotv.compress.mukv import GRAINS, pick
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.host import HostStore
from infinipotv.stream.method import Asked
from infinipotv.stream.mukv import MEMORY
from infinipotv.stream.reference import tiny_adapter
from infinipotv.stream.session import StreamingSession
from infinipotv.stream.side_prefill import side_prefill

BUDGET = 96
PROMPT = "What is shown?"


def frames(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n, 56, 56, 3)).astype(np.uint8)


def streamed(adapter, video: np.ndarray, chunk: int = 2, **knobs) -> StreamingSession:
    session = StreamingSession(adapter, build("mukv", **knobs), BUDGET, 0.5, lambda: FullPrecisionStore(torch.float32))
    session.start("v")
    for i in range(0, len(video), chunk):
        session.feed(video[i : i + chunk], fps=2.0)
    return session


def snapshot(session: StreamingSession) -> list[torch.Tensor]:
    v, memory = session.video, session.video.state[MEMORY]
    out = [t.clone() for store in v.cache.stores for t in (*store.read(), store.token_ids())]
    out += [t.clone() for host in v.host for t in host.all().tensors()]
    return out + [r.clone() for g in GRAINS for r in memory.rows[g]] + [e.clone() for e in memory.open_embeds]


@pytest.mark.parametrize("family", ["llava_ov", "qwen2vl"])  # 1-D RoPE, M-RoPE
def test_the_cache_holds_the_prefix_and_a_question_leaves_the_memory_unchanged(family):
    adapter = tiny_adapter(family)
    session = streamed(adapter, frames(8 if family == "llava_ov" else 16))
    v = session.video
    prefix_bytes = sum(sum(s.nbytes().values()) for s in v.cache.stores)
    assert all(s.video_tokens == 0 and s.accelerator_bytes == prefix_bytes for s in session.trace)
    hosts = [s.host_bytes for s in session.trace]
    assert hosts == sorted(hosts) and hosts[0] > 0
    before = snapshot(session)
    first = session.ask(PROMPT, max_new_tokens=3)
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(session)))
    again = session.ask(PROMPT, max_new_tokens=3)
    assert again.tokens == first.tokens and torch.equal(again.first_logprobs, first.first_logprobs)
    token_bytes = adapter.n_layers * adapter.n_kv_heads * adapter.head_dim * 4 * 2  # keys and values, fp32
    per_frame = v.grid[0] * v.grid[1]
    policy = session.method.rule
    stored = {g: len(v.state[MEMORY].rows[g]) for g in GRAINS}  # fewer stored than |M| retrieves: all of them
    counts = {g: min(n, stored[g]) for g, n in policy.retrieved(per_frame, BUDGET).items()}
    retrieved = sum(n * policy.kept(per_frame)[g] for g, n in counts.items())
    assert first.accelerator_bytes == prefix_bytes + retrieved * token_bytes <= prefix_bytes + BUDGET * token_bytes


@pytest.mark.parametrize("family", ["llava_ov", "qwen2vl"])
def test_a_frame_block_is_what_a_fresh_session_of_that_frame_alone_stores(family):
    """The frame block of frame f was prefilled over the prefix only, where the video's first frame sits: its kept
    keys and values are those of a session (no method) fed only frame f."""
    adapter = tiny_adapter(family)
    video, step = frames(8 if family == "llava_ov" else 16), adapter.frames_per_step
    session = streamed(adapter, video)
    memory = session.video.state[MEMORY]
    per_frame = session.video.grid[0] * session.video.grid[1]
    kept = session.method.rule.kept(per_frame)["frame"]
    f = 3
    fresh = StreamingSession(adapter, None, None, 0.5, lambda: FullPrecisionStore(torch.float32))
    fresh.start("alone")
    fresh.feed(video[f * step : (f + 1) * step], fps=2.0)
    p = fresh.video.prefix_len
    for layer, store in enumerate(fresh.video.cache.stores):
        keys, values = store.read()
        got = memory.stores["frame"][layer].read("keys", f * kept, (f + 1) * kept)
        ids = memory.stores["frame"][layer].read("ids", f * kept, (f + 1) * kept).long() - f * per_frame
        torch.testing.assert_close(got, keys[:, p:][:, ids], atol=1e-5, rtol=1e-5)
        stored_values = memory.stores["frame"][layer].read("values", f * kept, (f + 1) * kept)
        torch.testing.assert_close(stored_values, values[:, p:][:, ids], atol=1e-5, rtol=1e-5)


def test_the_side_prefills_attention_rebuilds_the_layers_output():
    """The last layer's weights the side prefill computes, times its values (GQA-expanded), are the input of its
    o_proj in the forward (SDPA on): the weights are the forward's own."""
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(2))
    v = session.video
    chunk = adapter.encode_frames(frames(1, seed=5), 0, 2.0, v.video_start)
    seen: list[torch.Tensor] = []
    o_proj = adapter.attention_layers()[-1].o_proj
    handle = o_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0]))
    try:
        out = side_prefill(adapter, v.cache, v.prefix_len, chunk.embeds, chunk.positions)
    finally:
        handle.remove()
    values = torch.cat([v.cache.stores[-1].read()[1][:, : v.prefix_len], out.values[-1]], dim=1)
    group = out.attention.shape[0] // values.shape[0]
    heads = out.attention @ values.float().repeat_interleave(group, dim=0)  # [H_q, N, D]
    rebuilt = heads.transpose(0, 1).reshape(heads.shape[1], -1)
    torch.testing.assert_close(rebuilt, seen[-1].float(), atol=1e-5, rtol=1e-4)
    assert len(v.cache.stores[0]) == v.prefix_len  # the side prefill stored nothing


def test_the_view_reads_the_picked_blocks_in_score_order_at_their_positions(monkeypatch):
    """T4: picks fine [3, 1], medium [2], coarse [0] give per layer [prefix | patch 3 | patch 1 | frame 2 |
    segment 0] as the host stores hold them (original positions: no re-rotation)."""
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(8))
    picks = {"patch": torch.tensor([3, 1]), "frame": torch.tensor([2]), "segment": torch.tensor([0])}
    monkeypatch.setattr("infinipotv.stream.mukv.pick", lambda *args: picks)
    v = session.video
    view = session.method.view(v, Asked.of_text(adapter, PROMPT))
    kept = session.method.rule.kept(v.grid[0] * v.grid[1])
    memory = v.state[MEMORY]
    for layer, ((prefix_k, keys), (prefix_v, values)) in enumerate(view.layers):
        assert torch.equal(prefix_k, v.cache.stores[layer].read()[0][:, : v.prefix_len])
        expected = [
            memory.stores[g][layer].read(name, b * kept[g], (b + 1) * kept[g])
            for g in GRAINS
            for b in picks[g].tolist()
            for name in ("keys",)
        ]
        torch.testing.assert_close(keys, torch.cat(expected, dim=1))
    ends = [int(memory.stores[g][0].read("positions", 0, len(memory.stores[g][0])).max()) for g in GRAINS]
    assert view.start == max(v.video_start + keys.shape[1], max(ends) + 1)


def test_contiguous_positions_rerotate_the_blocks_after_the_prefix(monkeypatch):
    adapter = tiny_adapter("llava_ov")
    original = streamed(adapter, frames(8))
    contiguous = streamed(adapter, frames(8), positions="contiguous")
    picks = {"patch": torch.tensor([3, 1]), "frame": torch.tensor([2]), "segment": torch.tensor([0])}
    monkeypatch.setattr("infinipotv.stream.mukv.pick", lambda *args: picks)
    ids = Asked.of_text(adapter, PROMPT)
    a, b = original.method.view(original.video, ids), contiguous.method.view(contiguous.video, ids)
    v = original.video
    for layer in range(adapter.n_layers):
        keys = a.layers[layer][0][1]
        memory = v.state[MEMORY]
        kept = original.method.rule.kept(v.grid[0] * v.grid[1])
        old = torch.cat(
            [
                memory.stores[g][layer].read("positions", i * kept[g], (i + 1) * kept[g])
                for g in GRAINS
                for i in picks[g].tolist()
            ],
            dim=1,
        ).long()
        new = adapter.text_positions(v.video_start, keys.shape[1])
        torch.testing.assert_close(b.layers[layer][0][1], adapter.rerotate(keys, old, new))
    assert b.start == v.video_start + a.layers[0][0][1].shape[1]


def test_a_segment_gathers_frames_across_chunks_and_an_open_one_is_not_a_block():
    """T3 in frames: 6 frames in chunks of 2 with segments of 4 are one segment block (frames 0-3); frames 4-5 wait
    on the host (counted in its bytes) and are patch and frame blocks already."""
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(6))
    memory = session.video.state[MEMORY]
    assert [len(memory.rows[g]) for g in GRAINS] == [24, 6, 1]
    segment_ids = memory.stores["segment"][0].read("ids", 0, len(memory.stores["segment"][0]))
    assert int(segment_ids.max()) < 4 * 16 and len(memory.open_ids) == 2
    stores = sum(sum(s.nbytes().values()) for s in session.video.host)
    assert session.trace[-1].host_bytes == stores + memory.host_bytes() > stores


def test_only_the_picked_blocks_cross_to_the_accelerator(monkeypatch):
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(8))
    sizes: list[int] = []
    take = HostStore.take
    monkeypatch.setattr(HostStore, "take", lambda self, index: sizes.append(len(index)) or take(self, index))
    session.ask(PROMPT, max_new_tokens=1)
    v = session.video
    per_frame = v.grid[0] * v.grid[1]
    policy = session.method.rule
    counts = {g: min(n, len(v.state[MEMORY].rows[g])) for g, n in policy.retrieved(per_frame, BUDGET).items()}
    retrieved = sum(n * policy.kept(per_frame)[g] for g, n in counts.items())
    assert sum(sizes) == retrieved * adapter.n_layers and retrieved <= BUDGET


def test_the_query_is_the_last_question_tokens_last_layer_key_over_the_prefix(monkeypatch):
    """Step 8: the question's own text after the prefix alone (no video, no template around it, no cue), its last
    token's last-layer key after RoPE."""
    adapter = tiny_adapter("llava_ov")
    session = streamed(adapter, frames(4))
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(
        "infinipotv.stream.mukv.pick", lambda query, rows, *rest: seen.append(query) or pick(query, rows, *rest)
    )
    session.ask(f"{PROMPT}\nAnswer: it", max_new_tokens=1, question=PROMPT)
    fresh = StreamingSession(adapter, None, None, 0.5, lambda: FullPrecisionStore(torch.float32))
    fresh.start("prefix only")
    q, v = adapter.text_ids(PROMPT), fresh.video
    with v.cache.transient():
        adapter.forward(adapter.embed_text(q), adapter.text_positions(v.video_start, len(q)), v.cache, logits=False)
        expected = v.cache.layers[-1].tail[0][:, -1].reshape(-1)
    torch.testing.assert_close(seen[0], expected, atol=1e-5, rtol=1e-5)


def test_blocks_are_stored_in_the_caches_storage_dtype():
    """A model computing in fp32 over an fp16 storage (quant=fp16) offloads fp16 blocks, as every method's host
    store does: the host bytes are the storage's, not the forward's."""
    adapter = tiny_adapter("llava_ov")
    session = StreamingSession(adapter, build("mukv"), BUDGET, 0.5, lambda: FullPrecisionStore(torch.float16))
    session.start("v")
    session.feed(frames(4), fps=2.0)
    memory = session.video.state[MEMORY]
    assert {t.dtype for g in GRAINS for host in memory.stores[g] for t in host.all().tensors()[:2]} == {torch.float16}
    assert session.ask(PROMPT, max_new_tokens=1).accelerator_bytes > 0


def test_a_frame_smaller_than_its_patch_split_streams_without_patch_blocks():
    """The config checks the largest frame; a smaller one at run time (4 tokens, split in 8) makes no patch block
    instead of failing the video."""
    adapter = tiny_adapter("qwen2vl")  # 4 tokens a frame at 56 x 56
    session = streamed(adapter, frames(8), patch_split=8)
    memory = session.video.state[MEMORY]
    assert [len(memory.rows[g]) for g in GRAINS] == [0, 4, 1]
    assert session.ask(PROMPT, max_new_tokens=1).accelerator_bytes > 0
