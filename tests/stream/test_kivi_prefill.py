"""KIVI as KIVI computes it (``spec/kivi.md``): a forward that commits tokens attends the tokens stored before it
dequantized and its own tokens at full precision; they are quantized for storage after the forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.config import ModelConfig
from infinipotv.kv.cache import StreamCache
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.models import glyphs
from infinipotv.stream.session import StreamingSession

R, G = 16, 32  # a short window: the first chunk already pushes tokens past it, the system prefix stays inside


def _twins(bits: int, dtype: torch.dtype) -> tuple[KiviStore, KiviStore]:
    return KiviStore(bits, G, R, dtype), KiviStore(bits, G, R, dtype)


@pytest.mark.parametrize("bits", (2, 4, 8))
@pytest.mark.parametrize("dtype", (torch.float32, torch.float16), ids=str)
def test_commit_reads_the_stored_tokens_then_its_own_and_stores_what_append_stores(bits, dtype) -> None:
    """On a ragged store (heads kept different tokens, some groups thinned), commit() returns read() of the tokens
    stored before followed by the new ones as they are, and leaves the store bit-identical to a twin that only
    appended them."""
    gen = torch.Generator().manual_seed(bits)
    heads, dim = 3, 64
    store, twin = _twins(bits, dtype)
    next_id = 0
    for n_new, keep in ((70, 50), (45, 60), (33, None), (1, None)):
        keys, values = torch.randn(heads, n_new, dim, generator=gen), torch.randn(heads, n_new, dim, generator=gen)
        ids = torch.arange(next_id, next_id + n_new)
        before_k, before_v = store.read() if len(store) else (keys[:, :0].to(dtype), values[:, :0].to(dtype))
        got_k, got_v = store.commit(keys, values, ids)
        twin.append(keys, values, ids)
        assert torch.equal(got_k, torch.cat([before_k, keys.to(dtype)], 1))
        assert torch.equal(got_v, torch.cat([before_v, values.to(dtype)], 1))
        for a, b in zip(store.read(), twin.read()):
            assert torch.equal(a, b)
        assert store.nbytes() == twin.nbytes() and torch.equal(store.token_ids(), twin.token_ids())
        next_id += n_new
        if keep is not None:
            idx = torch.rand(heads, len(store), generator=gen).argsort(1)[:, :keep].sort(1).values
            store.keep(idx)
            twin.keep(idx)


def test_full_precision_commit_is_the_stored_tensors() -> None:
    """A full-precision store reads back what it was given: commit() is append() then read(), no copy."""
    store = FullPrecisionStore(torch.float16)
    keys = torch.randn(2, 5, 8)
    store.commit(keys, keys, torch.arange(5))
    k, _ = store.commit(keys, keys, torch.arange(5, 10))
    assert k.data_ptr() == store.read()[0].data_ptr()


def _symbolic_frames(adapter, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.integers(100, 20000, size=(n, 3, 4))  # real SmolLM2 token ids, one 3x4 glyph frame each
    return glyphs.encode(ids)


def _pixel_frames(adapter, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 112, 112, 3), dtype=np.uint8)


MODELS = {
    "tiny_qwen2vl": (None, _pixel_frames),
    "symbolic": (dict(family="symbolic", max_pixels=3072, use_chat_template=False), _symbolic_frames),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tiny_qwen2vl):
    config, frames = MODELS[request.param]
    if config is None:
        return tiny_qwen2vl, frames
    from infinipotv.models.symbolic import SymbolicAdapter

    return SymbolicAdapter.load(ModelConfig(**config)), frames


class Hidden:
    """The decoder's last hidden states of every forward (its final norm's output), in order."""

    def __init__(self, adapter) -> None:
        self.seen: list[torch.Tensor] = []
        self.handle = adapter.language_model().norm.register_forward_hook(
            lambda _m, _i, out: self.seen.append(out[0].detach().clone())
        )


def _stream(adapter, make_store, chunks: list[np.ndarray]) -> tuple[StreamingSession, list[torch.Tensor]]:
    """Stream the chunks with no compression; the hidden states of each chunk's forward."""
    session = StreamingSession(adapter, None, None, 1.0, make_store)
    hidden = Hidden(adapter)
    try:
        session.start("v")
        hidden.seen.clear()
        for chunk in chunks:
            session.feed(chunk, fps=1.0)
    finally:
        hidden.handle.remove()
    return session, hidden.seen


def test_a_chunk_attends_its_own_tokens_at_full_precision(model) -> None:
    """The first chunk sees only the system prefix, which KIVI holds in its window: its hidden states under INT4
    equal those under fp16, though the chunk itself is pushed past the window and quantized. The second chunk's
    differ from fp16 only through the earlier tokens: they equal a forward over a full-precision cache holding the
    INT4 store's dequantized tokens."""
    adapter, make_frames = model
    step = adapter.frames_per_step
    chunks = [make_frames(adapter, 4 * step, seed) for seed in (0, 1)]
    dtype = torch.float16
    fp16, fp16_hidden = _stream(adapter, lambda: FullPrecisionStore(dtype), chunks)
    int4, int4_hidden = _stream(adapter, lambda: KiviStore(4, G, R, dtype), chunks)
    assert int(int4.video.cache.stores[0].n_quantized.min()) > 0, "the first chunk never left the window"
    assert torch.equal(int4_hidden[0], fp16_hidden[0])
    assert not torch.equal(int4_hidden[1], fp16_hidden[1])

    # the reference: the INT4 stream up to the first chunk, its stores' read() copied into full-precision stores
    before, _ = _stream(adapter, lambda: KiviStore(4, G, R, dtype), chunks[:1])
    ref = StreamCache(adapter.n_layers, lambda: FullPrecisionStore(dtype))
    for src, dst in zip(before.video.cache.stores, ref.stores):
        dst.append(*src.read(), torch.zeros(len(src), dtype=torch.long))
    v = before.video
    chunk = adapter.encode_frames(chunks[1], v.frames_encoded, 1.0, v.video_start)
    hidden = Hidden(adapter)
    try:
        ref.commit(torch.arange(chunk.embeds.shape[0]))
        adapter.forward(chunk.embeds, chunk.positions, ref, logits=False)
    finally:
        hidden.handle.remove()
    assert torch.equal(hidden.seen[0], int4_hidden[1])
