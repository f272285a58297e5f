"""The KIVI quantizer alone: round trip, constant groups, packing layout, bad input, and the optional quanto oracle."""

from __future__ import annotations

import sys

import pytest
import torch

from infinipotv.kv.quant import (
    BITS,
    dequantize,
    expand_key_params,
    expand_value_params,
    levels,
    pack_codes,
    quantize,
    unpack_codes,
)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
G = 32


def _per_element(q, p: torch.Tensor) -> torch.Tensor:
    return expand_key_params(p, q.group_size) if q.axis == "key" else expand_value_params(p, q.group_size)


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("axis", "tokens"), [("key", 64), ("value", 64), ("value", 50)])
def test_round_trip_within_half_a_step(bits: int, dtype: torch.dtype, axis: str, tokens: int) -> None:
    x = (torch.randn(3, tokens, 128, generator=torch.Generator().manual_seed(bits)) * 2 + 0.5).to(dtype)
    q = quantize(x, bits, G, axis)
    y = dequantize(q)
    assert y.shape == x.shape and y.dtype == dtype
    assert q.scale.dtype == dtype and q.zero.dtype == dtype
    scale, zero = _per_element(q, q.scale).double(), _per_element(q, q.zero).double()
    # half a step, plus the rounding of the arithmetic done in `dtype` (a few units in the last place)
    u = torch.finfo(dtype).eps / 2
    slack = 4 * u * (levels(bits) * scale + x.double().abs() + zero.abs())
    err = (y.double() - x.double()).abs()
    assert bool((err <= 0.5 * scale + slack).all()), f"max error {float((err / scale).max()):.3f} steps"


@pytest.mark.parametrize("axis", ["key", "value"])
def test_constant_group_dequantizes_exactly(axis: str) -> None:
    x = torch.randn(2, 64, 64, dtype=torch.float16)
    if axis == "key":
        x[1, 32:, 5] = 0.3  # one channel of one group of tokens
    else:
        x[1, 7, 32:] = 0.3  # one channel group of one token
    x[0] = -1.25  # a whole head
    q = quantize(x, 4, G, axis)
    y = dequantize(q)
    assert not bool(y.isnan().any())
    assert bool((y[0] == -1.25).all())
    const = (1, slice(32, None), 5) if axis == "key" else (1, 7, slice(32, None))
    assert torch.equal(y[const], x[const])
    rest = quantize(x[1:], 4, G, axis)  # neighbouring groups untouched by the guard
    assert torch.equal(dequantize(rest), y[1:])


@pytest.mark.parametrize("bits", BITS)
def test_packing_is_int32_words_least_significant_bits_first(bits: int) -> None:
    assert sys.byteorder == "little"
    codes = torch.randint(0, 1 << bits, (5, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    packed = pack_codes(codes, bits)
    assert packed.shape == (5, 64 * bits // 8) and packed.dtype == torch.uint8
    assert torch.equal(unpack_codes(packed, bits), codes)
    per_word = 32 // bits
    shifts = torch.arange(per_word, dtype=torch.int64) * bits
    words = (codes.reshape(5, -1, per_word).long() << shifts).sum(-1)
    assert torch.equal(packed.view(torch.int32).long() & 0xFFFFFFFF, words)


def test_shapes_and_nbytes() -> None:
    x = torch.randn(2, 64, 128, dtype=torch.float16)
    k, v = quantize(x, 4, G, "key"), quantize(x, 4, G, "value")
    assert k.codes.shape == v.codes.shape == (2, 64, 64)
    assert k.scale.shape == (2, 2, 128) and v.scale.shape == (2, 64, 4)
    # per token per head: 64 B codes + 16 B key scale/zero (amortised) or 16 B value scale/zero
    assert k.nbytes == v.nbytes == 2 * 64 * (64 + 16)
    assert k.shape == x.shape


@pytest.mark.parametrize(
    ("shape", "bits", "axis", "error", "match"),
    [
        ((2, 40, 64), 4, "key", ValueError, "whole groups"),
        ((2, 40, 48), 4, "value", ValueError, "multiple of group_size"),
        ((2, 64, 64), 3, "key", ValueError, "bits=3"),
        ((2, 64, 64), 4, "channel", ValueError, "axis="),
    ],
)
def test_bad_input_names_the_problem(shape, bits, axis, error, match) -> None:
    with pytest.raises(error, match=match):
        quantize(torch.randn(shape), bits, G, axis)


def test_integer_input_is_rejected() -> None:
    with pytest.raises(TypeError, match="floating-point"):
        quantize(torch.ones(1, 32, 32, dtype=torch.int32), 4, G, "key")


@pytest.mark.parametrize("bits", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("axis", ["key", "value"])
def test_matches_quanto_bit_for_bit(bits: int, dtype: torch.dtype, axis: str) -> None:
    """optimum-quanto as transformers' QuantoQuantizedCache calls it (axis_key=-1, axis_value=0, group 32)."""
    quanto = pytest.importorskip("optimum.quanto")
    h, t, d = 2, 64, 128
    x = torch.randn(1, h, t, d, generator=torch.Generator().manual_seed(bits)).to(dtype)
    qtype = quanto.qint4 if bits == 4 else quanto.qint2
    quanto_axis = -1 if axis == "key" else 0
    scale, shift = quanto.MaxOptimizer()(x, qtype, quanto_axis, G)
    theirs = quanto.quantize_weight(x, qtype, quanto_axis, scale, shift, G)
    data = theirs._data.unpack()
    if axis == "key":  # quanto groups keys as [G, D * groups]: column d * groups + g
        groups = h * t // G
        codes = data.reshape(G, d, groups).permute(2, 0, 1).reshape(1, h, t, d)
        scale, zero = scale.reshape(d, groups).T.reshape(1, h, t // G, d), (-shift).reshape(d, groups).T
        zero = zero.reshape(1, h, t // G, d)
    else:  # values as [tokens * D / G, G]
        codes = data.reshape(1, h, t, d)
        scale, zero = scale.reshape(1, h, t, d // G), (-shift).reshape(1, h, t, d // G)
    ours = quantize(x, bits, G, axis)
    assert torch.equal(unpack_codes(ours.codes, bits), codes)
    assert torch.equal(ours.scale, scale) and torch.equal(ours.zero, zero)
    assert torch.equal(dequantize(ours), theirs.dequantize())


@pytest.mark.parametrize("bits", BITS)
def test_unpack_into_rows_of_a_larger_tensor(bits: int) -> None:
    codes = torch.randint(0, 1 << bits, (3, 20, 16), generator=torch.Generator().manual_seed(bits), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    big = torch.full((3, 31, 16), -1.0)
    out = unpack_codes(packed, bits, torch.float32, big[:, :20])
    assert torch.equal(out, codes.float()) and torch.equal(big[:, :20], codes.float())
    assert bool((big[:, 20:] == -1).all())
    assert torch.equal(unpack_codes(packed, bits), codes)
