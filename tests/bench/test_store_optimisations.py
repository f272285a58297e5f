"""Regression tests for the performance edits to the KIVI store (see docs/performance.md, "What was optimised")."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import infinipotv.kv.kivi as kivi
from infinipotv.compress import FrameLayout, build
from infinipotv.compress.layout import FrameCoords, frame_coords
from infinipotv.compress.pooling import KERNELS, pool
from infinipotv.compress.scores import KEY_EPS, tar_scores, unit_keys
from infinipotv.kv import native
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import BITS, pack_codes, unpack_codes
from infinipotv.kv.store import FullPrecisionStore, flat_rows, gather_rows, take_rows


def _stream(bits: int, seed: int, appends_per_pass: int, steps: int = 12) -> tuple[KiviStore, float]:
    """Random chunks into both stores, a random per-head eviction every ``appends_per_pass`` chunks (heads then hold
    different numbers of residual tokens, so the next flushes quantize different numbers of groups per head)."""
    gen = torch.Generator().manual_seed(seed)
    kivi, ref = KiviStore(bits, group_size=8, residual_length=4, dtype=torch.float32), FullPrecisionStore()
    worst, next_id = 0.0, 0
    for step in range(steps):
        n = int(torch.randint(1, 30, (1,), generator=gen))
        keys, values = torch.randn(3, n, 16, generator=gen), torch.randn(3, n, 16, generator=gen)
        for store in (kivi, ref):
            store.append(keys, values, torch.arange(next_id, next_id + n))
        next_id += n
        for got, want in zip(kivi.dequantized(), ref.dequantized()):
            worst = max(worst, float((got - want).abs().max()))
        if step % appends_per_pass == appends_per_pass - 1:
            t = len(kivi)
            keep = torch.rand(3, t, generator=gen).argsort(1)[:, : 2 * t // 3].sort(1).values
            for store in (kivi, ref):
                store.keep(keep)
    return kivi, worst


@pytest.mark.parametrize("appends_per_pass", [1, 3])
@pytest.mark.parametrize("seed", range(3))
def test_flushes_after_a_ragged_eviction_keep_each_token_in_its_own_group(appends_per_pass: int, seed: int) -> None:
    """At 8 bits every value is within a few hundredths of the full-precision store; a token dequantized with
    another group's scale/zero (a padding group counted as live, placing later groups one row off) is off by ~1."""
    _, worst = _stream(8, seed, appends_per_pass)
    assert worst < 0.05


@pytest.mark.parametrize("bits", BITS)
def test_live_key_groups_are_counted_without_padding(bits: int) -> None:
    """n_key_groups counts the groups that hold a survivor: nbytes' key scale/zero part is exactly that many rows.
    The stream ends with two ragged flushes after the last eviction."""
    kivi, _ = _stream(bits, 0, 3, steps=14)
    counts = kivi._k_count.long()
    live = (counts > 0).sum(1)
    assert torch.equal(kivi.n_key_groups, live)
    assert torch.equal(counts.sum(1), kivi.n_quantized)  # every quantized token is in exactly one live group
    assert kivi.nbytes()["key_scale_zero"] == int(live.sum()) * 16 * 2 * 4


# -- the compression pass's fast paths (docs/performance.md, "What was optimised"): each is checked bit for bit
# -- against the plain computation it replaces.


def _ragged_kivi(bits: int, dtype: torch.dtype, seed: int) -> KiviStore:
    """A store whose heads hold different numbers of quantized tokens, key groups and residual tokens, with
    partially evicted groups (random per-head evictions between ragged appends)."""
    gen = torch.Generator().manual_seed(seed)
    store, next_id = KiviStore(bits, group_size=8, residual_length=4, dtype=dtype), 0
    for _ in range(7):
        n = int(torch.randint(5, 40, (1,), generator=gen))
        store.append(torch.randn(3, n, 16, generator=gen), torch.randn(3, n, 16, generator=gen),
                     torch.arange(next_id, next_id + n))
        next_id += n
        t = len(store)
        store.keep(torch.rand(3, t, generator=gen).argsort(1)[:, : 3 * t // 4].sort(1).values)
    return store


def _even_kivi(bits: int, dtype: torch.dtype, seed: int) -> KiviStore:
    """Heads holding the same number of quantized tokens (each keeps the same count of its own quantized tokens and
    every residual one, as InfiniPot-V's recent frames do) but different, partially evicted key groups."""
    gen = torch.Generator().manual_seed(seed)
    store, next_id = KiviStore(bits, group_size=8, residual_length=4, dtype=dtype), 0
    for _ in range(6):
        store.append(torch.randn(3, 24, 16, generator=gen), torch.randn(3, 24, 16, generator=gen),
                     torch.arange(next_id, next_id + 24))
        next_id += 24
        nq, t = int(store._nq_host[0]), len(store)
        quantized = torch.rand(3, nq, generator=gen).argsort(1)[:, : nq // 2].sort(1).values
        store.keep(torch.cat([quantized, torch.arange(nq, t).expand(3, -1)], dim=1))
    return store


def _plain_dequantized(store: KiviStore) -> tuple[torch.Tensor, torch.Tensor]:
    """Head by head: codes unpacked, each token's key group found by walking the counts (its row: the head's first
    in the flat key scale/zero rows, plus the group), then the residual (from the head's first in the flat window)."""
    heads, g = [], store.group_size
    for h in range(store._ids.shape[0]):
        nq, first = int(store._nq[h]), int(store.n_key_groups[:h].sum())
        group = first + torch.repeat_interleave(torch.arange(store._k_count.shape[1]), store._k_count[h].long())[:nq]
        qk = unpack_codes(store._k_codes[h, :nq], store.bits, store.dtype)
        keys = qk.mul_(store._k_scale[group]).add_(store._k_zero[group])
        qv = unpack_codes(store._v_codes[h, :nq], store.bits, store.dtype).view(nq, -1, g)
        values = qv.mul_(store._v_scale[h, :nq].unsqueeze(-1)).add_(store._v_zero[h, :nq].unsqueeze(-1)).view(nq, -1)
        nr, start = len(store) - nq, int(store.n_residual[:h].sum())
        window = slice(start, start + nr)
        heads.append((torch.cat([keys, store._res_k[window]]), torch.cat([values, store._res_v[window]])))
    return torch.stack([k for k, _ in heads]), torch.stack([v for _, v in heads])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "torch_path"])
def test_dequantized_in_place_equals_the_plain_computation(bits: int, dtype: torch.dtype, seed: int, kernels: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """dequantized() writes codes and residual straight into its outputs (with the compiled kernels; on the
    PyTorch path, key scales in blocks on the CPU)."""
    if not kernels:
        monkeypatch.setattr(native, "library", lambda: None)
    ragged, even = _ragged_kivi(bits, dtype, seed), _even_kivi(bits, dtype, seed)
    assert len(set(ragged._nq.tolist())) > 1  # the heads really are ragged (groups found by binary search)
    assert len(set(even._nq.tolist())) == 1 and bool((even._k_count.long() < 8).any())  # thinned groups, no padding
    for store in (ragged, even):
        want_k, want_v = _plain_dequantized(store)
        for block in (kivi.KEY_BLOCK_BYTES, 1, 3 * 16 * 4 * 5):  # whole, one token per block, 5 tokens per block
            old, kivi.KEY_BLOCK_BYTES = kivi.KEY_BLOCK_BYTES, block
            try:
                keys, values = store.dequantized()
            finally:
                kivi.KEY_BLOCK_BYTES = old
            assert keys.dtype == values.dtype == dtype
            assert torch.equal(keys, want_k) and torch.equal(values, want_v)


@pytest.mark.parametrize("bits", BITS)
def test_keep_gathers_rows_exactly(bits: int) -> None:
    """Eviction never re-quantizes: after keep(idx) the store dequantizes to the rows idx of what it held before,
    with the same token ids, and its bytes are those of the rows it still holds."""
    for store in (_ragged_kivi(bits, torch.float32, 7), _even_kivi(bits, torch.float32, 7)):
        _check_keep(store)


def _check_keep(store: KiviStore) -> None:
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        keys, values = store.dequantized()
        ids = store.token_ids().clone()
        t = len(store)
        idx = torch.rand(3, t, generator=gen).argsort(1)[:, : 2 * t // 3].sort(1).values
        store.keep(idx)
        got_k, got_v = store.dequantized()
        assert torch.equal(got_k, keys.gather(1, idx.unsqueeze(-1).expand(-1, -1, 16)))
        assert torch.equal(got_v, values.gather(1, idx.unsqueeze(-1).expand(-1, -1, 16)))
        assert torch.equal(store.token_ids(), ids.gather(1, idx))
        assert torch.equal(store._k_count.long().sum(1), store.n_quantized)


# -- the flat parts (key scale/zero rows, full-precision window: issue "int4 cache bytes within 2% of the analytic
# -- formula"): each head's rows laid one head after another instead of padded to the longest head.


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("residual_length", [0, 13])
def test_flat_parts_equal_one_store_per_head(bits: int, dtype: torch.dtype, residual_length: int) -> None:
    """A store of 3 heads that evict differently holds, head by head, what a one-head store fed the same tokens and
    kept indices holds (a one-head store has nothing to pad): the same codes, value scale/zero, key scale/zero rows,
    survivor counts, window, dequantized keys/values and ids, bit for bit, after every append and keep."""
    gen, heads, next_id, ragged = torch.Generator().manual_seed(bits * 31 + residual_length), 3, 0, [False, False]
    store = KiviStore(bits, group_size=8, residual_length=residual_length, dtype=dtype)
    alone = [KiviStore(bits, group_size=8, residual_length=residual_length, dtype=dtype) for _ in range(heads)]

    def check() -> None:
        keys, values = store.dequantized()
        nq, ng, nr = store.n_quantized, store.n_key_groups, store.n_residual
        for h, one in enumerate(alone):
            k1, v1 = one.dequantized()
            assert torch.equal(keys[h], k1[0]) and torch.equal(values[h], v1[0])
            assert torch.equal(store.token_ids()[h], one.token_ids()[0])
            q, g, first_g, first_r = int(nq[h]), int(ng[h]), int(ng[:h].sum()), int(nr[:h].sum())
            for part in ("_k_codes", "_v_codes", "_v_scale", "_v_zero"):
                assert torch.equal(getattr(store, part)[h, :q], getattr(one, part)[0])
            assert torch.equal(store._k_count[h, :g], one._k_count[0])
            assert torch.equal(store._k_scale[first_g:first_g + g], one._k_scale)
            assert torch.equal(store._k_zero[first_g:first_g + g], one._k_zero)
            assert torch.equal(store._res_k[first_r:first_r + int(nr[h])], one._res_k)
            assert torch.equal(store._res_v[first_r:first_r + int(nr[h])], one._res_v)

    for step in range(10):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        keys, values = torch.randn(heads, n, 16, generator=gen), torch.randn(heads, n, 16, generator=gen)
        ids = torch.arange(next_id, next_id + n)
        next_id += n
        store.append(keys, values, ids)
        for h, one in enumerate(alone):
            one.append(keys[h:h + 1], values[h:h + 1], ids)
        check()
        t = len(store)
        idx = torch.rand(heads, t, generator=gen).argsort(1)[:, : max(1, 3 * t // 4)].sort(1).values
        store.keep(idx)
        for h, one in enumerate(alone):
            one.keep(idx[h:h + 1])
        check()
        ragged = [ragged[0] or len(set(store.n_residual.tolist())) > 1,
                  ragged[1] or len(set(store.n_key_groups.tolist())) > 1]
    assert ragged == [True, True]  # heads held different numbers of window tokens and of key groups


def test_flat_indices_equal_the_loops_they_replace() -> None:
    """flat_append_index / flat_take_index against the plain per-head loops over lists of rows."""
    la, lb, w = torch.tensor([3, 0, 5]), torch.tensor([2, 4, 0]), 4
    a_rows = [[f"a{h}{j}" for j in range(int(la[h]))] for h in range(3)]
    b_rows = [[f"b{h}{j}" for j in range(w)] for h in range(3)]
    flat_a, flat_b = sum(a_rows, []), sum(b_rows, [])
    index = kivi.flat_append_index(la, lb, len(flat_a), w, int((la + lb).sum()))
    want = sum((a_rows[h] + b_rows[h][: int(lb[h])] for h in range(3)), [])
    assert [(flat_a + flat_b)[i] for i in index.tolist()] == want
    rows, first, kept = torch.arange(12).view(3, 4) * 10, torch.tensor([1, 0, 2]), torch.tensor([2, 0, 2])
    got = kivi.flat_take_index(rows, kept, 4, first=first).tolist()
    assert got == [r for h in range(3) for r in rows[h, int(first[h]):int(first[h] + kept[h])].tolist()]
    assert kivi.flat_take_index(rows, kept, 4).tolist() == [0, 10, 80, 90]


@pytest.mark.parametrize("shape", [(3, 50, 2), (3, 50, 4), (2, 40, 1), (3, 50, 16), (2, 30, 3, 2), (4, 0, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8], ids=str)
def test_take_rows_equals_advanced_indexing(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """gather_rows copies narrow rows as one integer word each: the same bits as x[heads, idx]."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=gen) * 50).to(dtype)
    h, length = shape[:2]
    idx = torch.randint(0, max(length, 1), (h, 7), generator=gen) if length else torch.zeros(h, 0, dtype=torch.long)
    want = x[torch.arange(h).unsqueeze(1), idx]
    for got in (gather_rows(x, idx), take_rows(x, flat_rows(idx, length))):
        assert got.dtype == dtype and got.shape == want.shape
        assert torch.equal(got.view(torch.uint8) if dtype != torch.uint8 else got,
                           want.view(torch.uint8) if dtype != torch.uint8 else want)


@pytest.mark.parametrize("bits", BITS)
def test_unpack_into_rows_of_a_larger_tensor(bits: int) -> None:
    codes = torch.randint(0, 1 << bits, (3, 20, 16), generator=torch.Generator().manual_seed(bits), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    big = torch.full((3, 31, 16), -1.0)
    out = unpack_codes(packed, bits, torch.float32, big[:, :20])
    assert torch.equal(out, codes.float()) and torch.equal(big[:, :20], codes.float())
    assert bool((big[:, 20:] == -1).all())
    assert torch.equal(unpack_codes(packed, bits), codes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_unit_keys_equal_normalize(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    full = (torch.randn(3, 130, 64, generator=gen) * 3).to(dtype)
    full[1, 40] = 0  # a zero key: eps in the denominator
    keys = full[:, 10:]  # a slice along tokens, as the session passes the region after the prefix
    got = unit_keys(keys)
    assert got.dtype == torch.float32 and torch.equal(got, F.normalize(keys.float(), dim=-1, eps=KEY_EPS))
    assert torch.equal(keys, full[:, 10:]) and got.data_ptr() != keys.data_ptr()  # the input is left as it was


@pytest.mark.parametrize(("n_tokens", "grid"), [(600, (3, 4)), (605, (3, 4)), (7, (3, 4)), (12, (2, 6)), (61, (5, 5))])
def test_periodic_tar_path_equals_the_general_path(n_tokens: int, grid: tuple[int, int]) -> None:
    """The pseudo-frames view's coordinates (no integer division) and its broadcast dot product (in place) give
    exactly the coordinates and scores of the general per-token path."""
    p = grid[0] * grid[1]
    layout = FrameLayout.fresh(3, n_tokens, grid)
    coords = frame_coords(layout, "pseudo_frames", n_tokens)
    n_frames = math.ceil(n_tokens / p)
    cell = (torch.arange(n_tokens) + n_frames * p - n_tokens).expand(3, n_tokens)
    assert torch.equal(coords.frame, cell // p) and torch.equal(coords.slot, cell % p)
    general = FrameCoords(coords.frame.contiguous(), coords.slot.contiguous(), coords.n_grid_frames, coords.n_frames,
                          grid, offset=None)
    keys = torch.randn(3, n_tokens, 32, generator=torch.Generator().manual_seed(n_tokens))
    for r in (1, max(1, n_frames // 4)):
        assert torch.equal(coords.recent(r), general.recent(r))
        for reverse in (False, True):
            assert torch.equal(tar_scores(keys, coords, r, reverse), tar_scores(keys, general, r, reverse))
    scores = torch.rand(3, n_tokens, generator=torch.Generator().manual_seed(1))
    for mode, size in KERNELS:  # pooling reads the pseudo-frames grid as a shifted copy instead of a scatter/gather
        assert torch.equal(pool(scores, coords, mode, size), pool(scores, general, mode, size))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["tar_van_pool", "tar_van", "tar", "van", "van_pool", "tar_reversed"])
def test_policies_read_half_precision_as_fp32(dtype: torch.dtype, name: str) -> None:
    """A reads_any_float policy given a half-precision cache keeps exactly what it keeps on the fp32 copy."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.randn(3, 620, 64, generator=gen).to(dtype)[:, 20:]
    values = (torch.randn(3, 620, 64, generator=gen) * torch.rand(3, 620, 1, generator=gen)).to(dtype)[:, 20:]
    layout = FrameLayout.fresh(3, 600, (3, 4))
    for pooling in ("layer_quartile", "cv"):
        kw = {"pooling": pooling} if name in ("tar_van_pool", "van_pool") else {}
        policy = build(name, **kw)
        for layer in (0, 9, 17, 29):
            got = policy(keys, values, layout, 450, layer, 30)
            assert torch.equal(got, policy(keys.float(), values.float(), layout, 450, layer, 30))
