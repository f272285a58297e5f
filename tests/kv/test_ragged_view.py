"""A transient view whose layers read different lengths (StreamKV's layer-adaptive retrieval): each layer attends
exactly its own tokens. The reference is the same prompt fed one token at a time, where a single query attends every
key its layer holds and no mask is needed; a prompt prefilled at once must match it, which takes the longest-layer
length the cache reports and the mask cut to each layer (kv.cache.right_align_mask), on every family."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.cache import StreamCache
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.stream.reference import FAMILIES, LOGPROB_ATOL, tiny_adapter


def ragged_view(adapter, lengths: list[int], seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer random keys and values of ``lengths[layer]`` tokens (scaled so attention is far from uniform)."""
    g = torch.Generator().manual_seed(seed)
    shape = (adapter.n_kv_heads, 0, adapter.head_dim)
    return [
        tuple(3 * torch.randn(shape[0], n, shape[2], generator=g).to(adapter.device, adapter.dtype) for _ in "kv")
        for n in lengths
    ]


def logits_of(adapter, view, ids: list[int], start: int, one_by_one: bool) -> torch.Tensor:
    cache = StreamCache(adapter.n_layers, lambda: FullPrecisionStore(adapter.dtype))
    embeds, positions = adapter.embed_text(ids), adapter.text_positions(start, len(ids))
    with cache.transient(view=view):
        if not one_by_one:
            return adapter.forward(embeds, positions, cache)
        for i in range(len(ids)):
            out = adapter.forward(embeds[i : i + 1], positions[:, i : i + 1], cache)
            assert cache.get_seq_length() == start + i + 1  # the longest layer's view plus what was fed
        return out


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layer_of_a_ragged_view_attends_exactly_its_own_tokens(family):
    adapter = tiny_adapter(family)
    ids = adapter.question_ids("Which colour is the ball, and where does it go?")
    lengths = [40, 17] if adapter.n_layers == 2 else [40 - 7 * (i % 3) for i in range(adapter.n_layers)]
    view = ragged_view(adapter, lengths)
    at_once = logits_of(adapter, view, ids, max(lengths), one_by_one=False)
    by_token = logits_of(adapter, view, ids, max(lengths), one_by_one=True)
    torch.testing.assert_close(at_once.log_softmax(-1), by_token.log_softmax(-1), atol=LOGPROB_ATOL, rtol=0)
    # The check can fail: the short layer reading the long layer's first tokens instead is another model.
    padded = [view[0], tuple(torch.cat([a[:, : lengths[0] - lengths[1]], b], 1) for a, b in zip(view[0], view[1]))]
    wrong = logits_of(adapter, padded + view[2:], ids, max(lengths), one_by_one=False)
    assert (wrong.log_softmax(-1) - by_token.log_softmax(-1)).abs().max() > 10 * LOGPROB_ATOL


def test_a_ragged_view_reports_the_longest_layer_and_is_gone_after_the_block():
    adapter = tiny_adapter("llava_ov")
    cache = StreamCache(adapter.n_layers, lambda: FullPrecisionStore(adapter.dtype))
    with cache.transient(view=ragged_view(adapter, [9, 4])):
        assert [layer.get_seq_length() for layer in cache.layers] == [9, 9]
        assert [layer.read_length() for layer in cache.layers] == [9, 4]
    assert [layer.shortfall for layer in cache.layers] == [0, 0] and cache.get_seq_length() == 0
