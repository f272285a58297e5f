"""Regression tests for the performance edits to the KIVI store (see docs/performance.md, "What was optimised")."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import BITS
from infinipotv.kv.store import FullPrecisionStore


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
