"""KiviStore inside an evicting cache: flush schedule, eviction without re-quantization, key-group freeing, honest
bytes, and a property test against the full-precision store holding the same tokens."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.accounting import (
    Storage,
    bytes_per_token,
    cache_bytes,
    full_precision_bytes_per_token,
    layout_bytes,
)
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import BITS, dequantize, levels, quantize
from infinipotv.kv.ragged import HeadLengths
from infinipotv.kv.store import FullPrecisionStore

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


def _random_keep(gen: torch.Generator, heads: int, tokens: int, n: int) -> torch.Tensor:
    """A different sorted random subset of ``n`` of ``tokens`` positions per head, as a policy would keep."""
    return torch.rand(heads, tokens, generator=gen).argsort(dim=1)[:, :n].sort(dim=1).values


def _rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def test_window_quantizes_its_oldest_group_at_r_plus_g() -> None:
    r, g, gen = 8, 4, torch.Generator().manual_seed(0)
    keys, values = _randn(gen, 2, 32, 8), _randn(gen, 2, 32, 8)
    store = KiviStore(4, group_size=g, residual_length=r)
    store.append(keys[:, :11], values[:, :11], torch.arange(11))
    assert store.n_quantized.tolist() == [0, 0] and store.n_residual.tolist() == [11, 11]
    store.append(keys[:, 11:12], values[:, 11:12], torch.arange(11, 12))
    assert store.n_quantized.tolist() == [4, 4] and store.n_residual.tolist() == [8, 8]
    store.append(keys[:, 12:], values[:, 12:], torch.arange(12, 32))  # 28 in the window: 5 whole groups leave
    assert store.n_quantized.tolist() == [24, 24] and store.n_residual.tolist() == [8, 8]
    k, v = store.read()
    assert torch.equal(k[:, :24], dequantize(quantize(keys[:, :24], 4, g, "key")))
    assert torch.equal(v[:, :24], dequantize(quantize(values[:, :24], 4, g, "value")))
    assert torch.equal(k[:, 24:], keys[:, 24:]) and torch.equal(v[:, 24:], values[:, 24:])
    assert torch.equal(store.token_ids(), torch.arange(32, dtype=torch.int32).expand(2, -1))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_evict_then_dequantize_equals_dequantize_then_evict(bits: int, dtype: torch.dtype) -> None:
    """Over rounds of appends and per-head evictions, survivors are gathered, never re-quantized: the store after
    keep() dequantizes to exactly the rows it dequantized to before, and quantized tokens never change later."""
    gen = torch.Generator().manual_seed(bits)
    heads, dim, next_id, ragged = 3, 32, 0, False
    store = KiviStore(bits, group_size=8, residual_length=16, dtype=dtype)
    for _ in range(6):
        n = int(torch.randint(20, 70, (1,), generator=gen))
        before = store.read() if len(store) else None
        quantized_before = store.n_quantized
        store.append(_randn(gen, heads, n, dim), _randn(gen, heads, n, dim), torch.arange(next_id, next_id + n))
        next_id += n
        k, v = store.read()
        if before is not None:
            t = before[0].shape[1]
            frozen = torch.arange(t).unsqueeze(0) < quantized_before.unsqueeze(1)
            assert torch.equal(k[:, :t][frozen], before[0][frozen])
            assert torch.equal(v[:, :t][frozen], before[1][frozen])
        ids = store.token_ids()
        idx = _random_keep(gen, heads, len(store), len(store) * 2 // 3)
        store.keep(idx)
        k2, v2 = store.read()
        assert k2.dtype == dtype and torch.equal(k2, _rows(k, idx)) and torch.equal(v2, _rows(v, idx))
        assert torch.equal(store.token_ids(), ids.gather(1, idx))
        ragged |= len(set(store.n_quantized.tolist())) > 1
    assert ragged, "the test never produced heads with different numbers of quantized tokens"


def test_a_key_group_is_freed_only_when_none_of_its_tokens_survive() -> None:
    gen, dim = torch.Generator().manual_seed(0), 16
    store = KiviStore(4, group_size=4, residual_length=0, dtype=torch.float16)
    store.append(_randn(gen, 2, 16, dim), _randn(gen, 2, 16, dim), torch.arange(16))
    assert store.n_key_groups.tolist() == [4, 4]
    k, v = store.read()
    drop = [{0, 4, 5, 6, 7}, {0, 5, 9, 13, 14}]  # head 0 loses group 1 whole; head 1 a token or two of each group
    idx = torch.tensor([[t for t in range(16) if t not in d] for d in drop])
    store.keep(idx)
    assert store.n_key_groups.tolist() == [3, 4]
    parts = store.nbytes()
    assert parts["key_scale_zero"] == 7 * dim * 2 * 2
    assert parts["bookkeeping"] == 7 * 2 + 2 * 8  # group counts + the [H] int64 lengths
    assert torch.equal(store.read()[0], _rows(k, idx)) and torch.equal(store.read()[1], _rows(v, idx))


@pytest.mark.parametrize("bits", BITS)
def test_measured_bytes_equal_the_formula_for_full_groups(bits: int) -> None:
    heads, dim, n = 2, 128, 128 + 4 * 32 + 5  # R = 128: 4 whole groups quantized, 133 tokens in the window
    gen = torch.Generator().manual_seed(0)
    store = KiviStore(bits, group_size=32, residual_length=128, dtype=torch.float16)
    store.append(_randn(gen, heads, n, dim), _randn(gen, heads, n, dim), torch.arange(n))
    assert store.n_quantized.tolist() == [128, 128]
    parts = store.nbytes()
    kv = sum(parts[p] for p in ("key_codes", "value_codes", "key_scale_zero", "value_scale_zero"))
    assert kv == bytes_per_token(dim, Storage(bits, position_bytes=0)).total * 128 * heads
    if bits == 4:
        assert kv == 160 * 128 * heads
    assert parts["residual"] == full_precision_bytes_per_token(dim, Storage(bits, position_bytes=0)) * 133 * heads
    assert parts["positions"] == 4 * n * heads
    counts = bytes_per_token(dim, Storage(bits, group_count_bytes=2)).key_groups * 128 * heads
    assert parts["bookkeeping"] == counts + 8 * heads  # survivors per key group + the per-head lengths
    assert parts["padding"] == 0


def test_nbytes_accounts_for_every_byte_the_store_holds() -> None:
    gen = torch.Generator().manual_seed(0)
    store = KiviStore(4, group_size=8, residual_length=8, dtype=torch.bfloat16)
    store.append(_randn(gen, 4, 100, 32), _randn(gen, 4, 100, 32), torch.arange(100))
    store.keep(_random_keep(gen, 4, 100, 50))
    tensors = [t for t in vars(store).values() if isinstance(t, torch.Tensor)]
    tensors += [t.device for t in vars(store).values() if isinstance(t, HeadLengths)]  # lengths: device and host
    held = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    parts = store.nbytes()
    assert sum(parts.values()) == sum(held.values())
    assert parts["padding"] > 0  # heads kept different numbers of quantized tokens


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layout_figure_is_the_measured_bytes_less_padding(bits: int, dtype: torch.dtype) -> None:
    """After several keep() passes that thin key groups and leave heads ragged, the spec's rates times the counts
    the store holds give every part of nbytes() but the padding; the flat parts (key scale/zero rows, the window)
    hold none, so the padding is the few padded rows of codes, value scale/zero and survivor counts."""
    gen, heads, dim, next_id = torch.Generator().manual_seed(bits), 3, 32, 0
    store = KiviStore(bits, group_size=8, residual_length=12, dtype=dtype)
    for _ in range(6):
        n = int(torch.randint(20, 60, (1,), generator=gen))
        store.append(_randn(gen, heads, n, dim), _randn(gen, heads, n, dim), torch.arange(next_id, next_id + n))
        next_id += n
        store.keep(_random_keep(gen, heads, len(store), len(store) * 2 // 3))
        parts = store.nbytes()
        padding = parts.pop("padding")
        assert parts == layout_bytes(store.layout(), dim, store.storage())
        lq, lg = store.padded_lengths
        padded_tokens = heads * lq - int(store.n_quantized.sum())
        padded_groups = heads * lg - int(store.n_key_groups.sum())
        row = 2 * dim * bits // 8 + 2 * (dim // 8) * dtype.itemsize  # codes of keys and values, value scale/zero
        assert padding == padded_tokens * row + padded_groups * store.storage().group_count_bytes
    layout = store.layout()
    assert layout.key_groups * 8 > layout.tokens - layout.residual  # thinned groups: fewer than G survivors each
    assert len(set(store.n_quantized.tolist())) > 1 or len(set(store.n_key_groups.tolist())) > 1  # ragged heads


def test_layout_figure_of_a_full_precision_store_is_tokens_times_the_rate() -> None:
    gen, store = torch.Generator().manual_seed(0), FullPrecisionStore(torch.float16)
    store.append(_randn(gen, 2, 40, 32), _randn(gen, 2, 40, 32), torch.arange(40))
    store.keep(_random_keep(gen, 2, 40, 25))
    assert store.layout().tokens == 2 * 25
    assert store.nbytes() == layout_bytes(store.layout(), 32, store.storage())


@pytest.mark.parametrize("bits", BITS)
def test_layout_figure_reduces_to_cache_bytes_for_full_groups(bits: int) -> None:
    """No eviction and the window at its largest (R + G - 1 tokens): the store holds exactly the published layout,
    so its measured bytes, its layout figure and cache_bytes at its own widths are one number."""
    heads, dim, n = 2, 128, 128 + 31 + 4 * 32
    gen = torch.Generator().manual_seed(0)
    store = KiviStore(bits, group_size=32, residual_length=128, dtype=torch.float16)
    store.append(_randn(gen, heads, n, dim), _randn(gen, heads, n, dim), torch.arange(n))
    assert store.n_residual.tolist() == [159, 159] and store.n_key_groups.tolist() == [4, 4]
    figure = sum(layout_bytes(store.layout(), dim, store.storage()).values())
    assert figure == cache_bytes(n, 1, heads, dim, store.storage()) == sum(store.nbytes().values())


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_full_precision_store_within_the_quantization_error(seed: int) -> None:
    """Random appends (some text tokens with id -1) and random per-head evictions, applied to both stores."""
    gen = torch.Generator().manual_seed(seed)
    bits, heads, dim = BITS[seed % len(BITS)], 2, 32
    kivi, ref = KiviStore(bits, group_size=8, residual_length=12), FullPrecisionStore()
    kmin, kmax, next_id = torch.full((heads, 1, dim), torch.inf), torch.full((heads, 1, dim), -torch.inf), 0
    for _ in range(8):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        keys = _randn(gen, heads, n, dim) * torch.linspace(0.1, 5, dim)  # channels of different ranges, as keys have
        values = _randn(gen, heads, n, dim)
        ids = torch.arange(next_id, next_id + n)
        ids[torch.rand(n, generator=gen) < 0.2] = -1
        next_id += n
        for store in (kivi, ref):
            store.append(keys, values, ids)
        kmin, kmax = torch.minimum(kmin, keys.amin(1, keepdim=True)), torch.maximum(kmax, keys.amax(1, keepdim=True))
        if bool(torch.rand(1, generator=gen) < 0.6):
            idx = _random_keep(gen, heads, len(ref), int(torch.randint(1, len(ref) + 1, (1,), generator=gen)))
            for store in (kivi, ref):
                store.keep(idx)
        assert len(kivi) == len(ref) and torch.equal(kivi.token_ids(), ref.token_ids())
        (k, v), (kr, vr) = kivi.read(), ref.read()
        # a group's range is at most the channel's range over every key appended / the token's range over channels
        key_bound = 0.5 * (kmax - kmin) / levels(bits) + 1e-5
        value_bound = 0.5 * (vr.amax(-1, keepdim=True) - vr.amin(-1, keepdim=True)) / levels(bits) + 1e-5
        assert bool(((k - kr).abs() <= key_bound).all()) and bool(((v - vr).abs() <= value_bound).all())
        window = torch.arange(len(ref)).unsqueeze(0) >= kivi.n_quantized.unsqueeze(1)
        assert torch.equal(k[window], kr[window]) and torch.equal(v[window], vr[window])


def test_dtype_sets_the_residual_and_scale_dtype() -> None:
    store = KiviStore(4, group_size=8, residual_length=0, dtype=torch.float16)
    store.append(torch.randn(1, 16, 16), torch.randn(1, 16, 16), torch.arange(16))
    k, v = store.read()
    assert k.dtype == v.dtype == torch.float16
    assert store.nbytes()["value_scale_zero"] == 16 * 2 * 2 * 2  # 2 groups per token, 2-byte scale and zero


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KiviStore(3), "bits=3"),
        (lambda: KiviStore(4, group_size=0), "group_size"),
        (lambda: KiviStore(4, residual_length=-1), "residual_length"),
        (
            lambda: KiviStore(4, group_size=32).append(torch.randn(2, 4, 48), torch.randn(2, 4, 48), torch.arange(4)),
            "multiple of group_size",
        ),
        (
            lambda: KiviStore(4, group_size=8).append(torch.randn(2, 4, 16), torch.randn(2, 5, 16), torch.arange(4)),
            "heads, tokens, head_dim",
        ),
        (
            lambda: KiviStore(4, group_size=8).append(torch.randn(2, 4, 16), torch.randn(2, 4, 16), torch.arange(3)),
            "token_ids",
        ),
    ],
)
def test_bad_configuration_or_input_names_the_problem(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    ("indices", "match"),
    [([[2, 1], [0, 1]], "strictly increasing"), ([[0, 9], [0, 1]], r"\[0, 4\)"), ([[0, 1]], "heads=2")],
)
def test_bad_keep_indices_are_rejected(indices: list[list[int]], match: str) -> None:
    store = KiviStore(4, group_size=8)
    store.append(torch.randn(2, 4, 16), torch.randn(2, 4, 16), torch.arange(4))
    with pytest.raises(ValueError, match=match):
        store.keep(torch.tensor(indices))
