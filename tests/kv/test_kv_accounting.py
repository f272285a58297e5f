"""The analytic byte accounting: per-token figures, byte budgets -> |M| tokens, config -> storage, the table."""

from __future__ import annotations

import pytest
import torch

from infinipotv.config import QuantConfig
from infinipotv.kv.accounting import (
    Layout,
    Storage,
    bytes_per_token,
    cache_bytes,
    full_groups,
    full_precision_bytes_per_token,
    layout_bytes,
    rates,
    sum_parts,
    tokens_for_bytes,
)
from infinipotv.kv.bytes_table import main as bytes_table_main

QWEN2VL_7B = dict(n_layers=28, n_kv_heads=4, head_dim=128)


@pytest.mark.parametrize(
    ("bits", "position_bytes", "expected"),
    [(16, 0, 512), (16, 4, 516), (32, 0, 1024), (8, 0, 288), (4, 0, 160), (4, 4, 164), (2, 0, 96), (2, 4, 100)],
)
def test_bytes_per_token_per_head_at_d128_g32(bits: int, position_bytes: int, expected: int) -> None:
    assert bytes_per_token(128, Storage(bits, 32, position_bytes=position_bytes)).total == expected


def test_int4_parts_are_the_published_breakdown() -> None:
    b = bytes_per_token(128, Storage(4, 32))
    assert (b.codes, b.value_scale_zero, b.key_scale_zero, b.positions) == (128, 16, 16, 4)


def test_equal_bytes_buy_about_three_times_the_tokens_in_int4() -> None:
    budget = cache_bytes(6000, storage=Storage(16), **QWEN2VL_7B)
    assert tokens_for_bytes(budget, storage=Storage(16), **QWEN2VL_7B) == 6000
    ratio = tokens_for_bytes(budget, storage=Storage(4), **QWEN2VL_7B) / 6000
    assert 3.0 < ratio < 516 / 164


@pytest.mark.parametrize("bookkeeping", [{}, {"group_count_bytes": 2, "length_bytes": 8}], ids=["published", "store"])
@pytest.mark.parametrize("bits", [16, 8, 4, 2])
@pytest.mark.parametrize("budget", [1_000, 50_000, 3_000_000, 123_456_789])
def test_tokens_for_bytes_is_the_most_that_fits(bits: int, budget: int, bookkeeping: dict[str, int]) -> None:
    storage, shape = Storage(bits, **bookkeeping), dict(n_layers=2, n_kv_heads=2, head_dim=128)
    m = tokens_for_bytes(budget, storage=storage, **shape)
    assert cache_bytes(m, storage=storage, **shape) <= budget < cache_bytes(m + 1, storage=storage, **shape)


def test_the_residual_window_is_counted_at_full_precision() -> None:
    int4, shape = Storage(4, 32, residual_length=128), dict(n_layers=1, n_kv_heads=1, head_dim=128)
    assert cache_bytes(100, storage=int4, **shape) == 100 * 516
    assert cache_bytes(1159, storage=int4, **shape) == 159 * 516 + 1000 * 164


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_the_per_token_figures_are_the_part_rates(bits: int) -> None:
    """One source of the rates: a full group's key scale/zero row and survivor count shared by its G tokens, a
    window token's keys and values at the scale/zero width."""
    storage = Storage(bits, 32, scale_bytes=2, group_count_bytes=2, length_bytes=8)
    r, b = rates(128, storage), bytes_per_token(128, storage)
    assert (r.key_scale_zero, r.group_count, r.residual, r.length) == (512, 2, 512, 8)
    assert (b.codes, b.value_scale_zero, b.key_scale_zero, b.key_groups, b.positions) == (
        r.codes,
        r.value_scale_zero,
        r.key_scale_zero / 32,
        r.group_count / 32,
        r.position,
    )
    assert full_precision_bytes_per_token(128, storage) == r.residual + r.position


@pytest.mark.parametrize(
    "storage",
    [Storage(4), Storage(2, group_count_bytes=2, length_bytes=8), Storage(16), Storage(32, scale_bytes=4)],
    ids=["int4", "int2-store", "fp16", "fp32"],
)
@pytest.mark.parametrize("tokens", [0, 100, 159, 160, 1159, 6000])
def test_cache_bytes_is_the_layout_figure_of_full_groups(storage: Storage, tokens: int) -> None:
    """The published figure is the layout figure's special case: the window at its largest and every other token
    in a full key group (fractional groups: a group's row amortised over its G tokens)."""
    layout = full_groups(tokens, 2 * 3, storage)
    if storage.quantized:
        fp = min(tokens, storage.window)
        assert (layout.residual, layout.key_groups) == (6 * fp, 6 * (tokens - fp) / 32)
    assert cache_bytes(tokens, 2, 3, 128, storage) == sum(layout_bytes(layout, 128, storage).values())


def test_layout_figure_by_part_prices_each_count_at_its_rate() -> None:
    storage = Storage(4, 32, scale_bytes=2, group_count_bytes=2, length_bytes=8)
    parts = layout_bytes(Layout(tokens=1000, residual=300, key_groups=40, heads=4), 128, storage)
    assert parts == {
        "key_codes": 700 * 64,
        "value_codes": 700 * 64,
        "key_scale_zero": 40 * 512,
        "value_scale_zero": 700 * 16,
        "bookkeeping": 40 * 2 + 4 * 8,
        "residual": 300 * 512,
        "positions": 1000 * 4,
    }
    # full precision: tokens x rate
    assert layout_bytes(Layout(1000, heads=4), 128, Storage(16)) == {
        "keys": 1000 * 256,
        "values": 1000 * 256,
        "positions": 1000 * 4,
    }


def test_layouts_add_over_stores() -> None:
    assert Layout(10, 3, 2, 1) + Layout(20, 5, 4, 2) == Layout(30, 8, 6, 3)
    assert sum([Layout(10, 3, 2, 1), Layout(20, 5, 4, 2)], Layout(0)) == Layout(30, 8, 6, 3)


@pytest.mark.parametrize(
    ("bits", "dtype", "model_dtype", "expected_bits", "scale_bytes"),
    [
        (4, "auto", torch.bfloat16, 4, 2),
        (4, "auto", torch.float32, 4, 2),  # KIVI keeps 2-byte scale/zero on a float32 (CPU) model
        (4, "float32", torch.float32, 4, 4),
        (16, "float16", torch.float32, 16, 2),
        (16, "auto", torch.float32, 32, 4),
    ],
)
def test_storage_from_quant_config(bits, dtype, model_dtype, expected_bits: int, scale_bytes: int) -> None:
    storage = Storage.from_config(QuantConfig(bits=bits, dtype=dtype), model_dtype)
    assert (storage.bits, storage.scale_bytes, storage.group_size, storage.residual_length) == (
        expected_bits,
        scale_bytes,
        32,
        128,
    )


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Storage(3), "bits=3"),
        (lambda: Storage(4, group_size=0), "group_size"),
        (lambda: Storage.from_config(QuantConfig(bits=4, dtype="half"), torch.float16), "quant.dtype"),
        (lambda: bytes_per_token(48, Storage(4, 32)), "multiple of group_size"),
        (lambda: tokens_for_bytes(0, 1, 1, 128, Storage(4)), "budget_bytes"),
    ],
)
def test_bad_storage_names_the_problem(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_sum_parts_over_layers() -> None:
    total = sum_parts([{"key_codes": 3, "positions": 1}, {"key_codes": 4, "residual": 2}])
    assert total == {"key_codes": 7, "positions": 1, "residual": 2, "total": 10}


def test_bytes_table_prints_the_published_rows(capsys: pytest.CaptureFixture[str]) -> None:
    bytes_table_main(["--head-dim", "128", "--group-size", "32"])
    out = capsys.readouterr().out
    assert "| FP16 / BF16 | 512 | 0 | 0 | 512 B | 4 | 516 B |" in out
    assert "| INT4 KIVI | 128 | 16 | 16 | 160 B | 4 | 164 B |" in out
    assert "| INT2 KIVI | 64 | 16 | 16 | 96 B | 4 | 100 B |" in out
    assert "| INT8 KIVI | 256 | 16 | 16 | 288 B | 4 | 292 B |" in out
    assert "2-byte" in out and "residual window" in out
