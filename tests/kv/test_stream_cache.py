"""StreamCache.after_attention: each layer handed over once, in order, as soon as the forward is done with it."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv import FullPrecisionStore, KiviStore
from infinipotv.kv.cache import StreamCache

LAYERS, HEADS, DIM = 3, 2, 32


def chunk(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, HEADS, n, DIM, generator=g), torch.randn(1, HEADS, n, DIM, generator=g)


def forward(cache: StreamCache, n: int, seed: int, layers: range = range(LAYERS)) -> list[tuple[torch.Tensor, ...]]:
    """What a model's layers do to the cache: one update per layer, in order; returns what attention read."""
    cache.commit(torch.arange(n))
    return [tuple(t[0] for t in cache.update(*chunk(n, seed + i), i)) for i in layers]


@pytest.mark.parametrize(
    "make_store",
    [lambda: FullPrecisionStore(torch.float32), lambda: KiviStore(4, 32, 8, torch.float16)],
    ids=["fp32", "int4-fp16"],
)
def test_each_layer_is_handed_over_once_with_what_its_attention_read(make_store):
    cache = StreamCache(LAYERS, make_store)
    forward(cache, 40, seed=0)
    seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    layers_done_at_update: list[int] = []
    update = cache.update

    def spying_update(k, v, layer_idx, *args, **kwargs):
        out = update(k, v, layer_idx, *args, **kwargs)
        layers_done_at_update.append(len(seen))
        return out

    cache.update = spying_update
    with cache.after_attention(lambda layer, keys, values: seen.append((layer, keys, values))):
        read = forward(cache, 40, seed=10)
    assert [s[0] for s in seen] == list(range(LAYERS))
    assert layers_done_at_update == list(range(LAYERS))  # layer i-1 handed over when layer i updates, not later
    for (_, keys, values), (k_read, v_read) in zip(seen, read):
        assert keys.dtype == torch.float32 and torch.equal(keys, k_read) and torch.equal(values, v_read)
    assert cache._held is None
    cache.update = update
    forward(cache, 4, seed=20)  # outside the block: nothing handed over any more
    assert len(seen) == LAYERS


def test_a_forward_that_breaks_the_layer_order_is_refused():
    cache = StreamCache(LAYERS, lambda: FullPrecisionStore(torch.float32))
    with pytest.raises(RuntimeError, match="updated after layer 0"):
        with cache.after_attention(lambda *a: None):
            forward(cache, 8, seed=0, layers=range(0, LAYERS, 2))
    with pytest.raises(RuntimeError, match="stopped after layer 1"):
        with cache.after_attention(lambda *a: None):
            forward(cache, 8, seed=0, layers=range(2))
    with pytest.raises(RuntimeError, match="do not nest"):
        with cache.after_attention(lambda *a: None), cache.after_attention(lambda *a: None):
            pass
    assert cache._held is None and cache._after is None
