"""The codec and the KIVI store on the tensors a stream hands them: a quantize of a strided view and a dequantize into
rows of a larger tensor are the contiguous ones, bit for bit; a row gather gives ``index_select``'s bytes; bad
eviction indices are refused with the store left as it was."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import QuantizedTensor, dequantize, dequantize_grouped, quantize
from infinipotv.kv.ragged import select_rows


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (signed zeros and NaN payloads compared too)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _same_quantized(a: QuantizedTensor, b: QuantizedTensor) -> bool:
    return _same(a.codes, b.codes) and _same(a.scale, b.scale) and _same(a.zero, b.zero)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("axis", ["key", "value"])
def test_a_strided_view_quantizes_and_dequantizes_into_rows_of_a_larger_tensor(dtype: torch.dtype, axis: str) -> None:
    """The store quantizes the oldest tokens of its window (a view, rows of heads apart) and dequantizes into the
    first rows of its [H, T, D] outputs, leaving the rows after them alone."""
    gen = torch.Generator().manual_seed(5)
    window = (torch.randn(3, 80, 64, generator=gen) * torch.rand(3, 80, 1, generator=gen) * 8 + 0.5).to(dtype)
    window[:, :32, :8] = 0.375  # constant key groups and value groups (scale 0)
    x = window[:, :64]
    ours = quantize(x, 4, 32, axis)
    big = torch.full((3, 100, 64), -7.0, dtype=dtype)
    dequantize_grouped(ours.codes, ours.scale, ours.zero, 4, 32, axis, out=big[:, :64])
    ref = quantize(x.contiguous(), 4, 32, axis)
    assert _same_quantized(ours, ref)
    assert _same(big[:, :64].contiguous(), dequantize(ref)) and bool((big[:, 64:] == -7).all())


@pytest.mark.parametrize(
    ("dtype", "width"),
    [
        (torch.uint8, 1),
        (torch.float16, 2),
        (torch.bfloat16, 4),
        (torch.float32, 2),
        (torch.float16, 3),
        (torch.uint8, 144),
    ],
    ids=str,
)
def test_select_rows_is_index_select(dtype: torch.dtype, width: int) -> None:
    """The row gather of every store's keep() gives index_select's bytes (NaN payloads and signed zeros included),
    rows of 1-8 bytes gathered as one integer each; an index outside the rows gets index_select's own error."""
    gen = torch.Generator().manual_seed(width)
    rows = torch.randint(0, 256, (301, width * dtype.itemsize), dtype=torch.uint8, generator=gen).view(dtype)
    for index in (
        torch.randperm(301, generator=gen)[:200].sort().values,
        torch.tensor([300, 0, 0, 7]),
        torch.zeros(0, dtype=torch.long),
    ):
        got = select_rows(rows, index)
        assert got.dtype == dtype and _same(got, rows.index_select(0, index))
    with pytest.raises(IndexError):
        select_rows(rows, torch.tensor([0, 301]))


@pytest.mark.parametrize(
    ("indices", "match"),
    [
        ([[2, 1], [0, 1]], "strictly increasing"),
        ([[0, 9], [0, 1]], r"\[0, 4\)"),
        ([[-1, 1], [0, 1]], r"\[0, 4\)"),
        ([[1, 1], [0, 1]], "strictly increasing"),
    ],
)
def test_bad_indices_are_refused_and_change_nothing(indices: list[list[int]], match: str) -> None:
    store = KiviStore(4, group_size=8)
    store.append(torch.randn(2, 4, 16), torch.randn(2, 4, 16), torch.arange(4))
    before = {name: value.clone() for name, value in vars(store).items() if isinstance(value, torch.Tensor)}
    with pytest.raises(ValueError, match=match):
        store.keep(torch.tensor(indices))
    assert all(_same(before[name], getattr(store, name)) for name in before)
    assert before  # the store holds tensors to compare
