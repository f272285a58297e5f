"""The compiled CPU kernels of the KIVI codec give the same bits as its PyTorch path, and the PyTorch path takes over
cleanly wherever they do not apply."""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from dataclasses import astuple, fields

import pytest
import torch

from infinipotv.kv import native
from infinipotv.kv.kivi import KiviHead, KiviStore
from infinipotv.kv.quant import BITS, QuantizedTensor, dequantize, dequantize_grouped, quantize

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
pytestmark = pytest.mark.skipif(native.library() is None, reason="the KIVI kernels cannot be built on this machine")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN-free inputs; signed zeros compared too)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _same_quantized(a: QuantizedTensor, b: QuantizedTensor) -> bool:
    return _same(a.codes, b.codes) and _same(a.scale, b.scale) and _same(a.zero, b.zero)


def _input(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen) * torch.rand(*shape[:-1], 1, generator=gen) * 8 + 0.5
    x[..., :32, :8] = 0.375  # constant key groups and value groups (scale 0)
    x[..., 3, :] = 0.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("axis", ["key", "value"])
@pytest.mark.parametrize(
    ("shape", "group"),
    [
        ((3, 64, 128), 32),
        ((2, 48, 16), 8),
        ((2, 1, 32, 24), 8),
        ((4, 96, 64), 16),
        ((2, 64, 128), 64),
        ((1, 32, 256), 32),
    ],
)
def test_kernels_equal_the_torch_path(
    dtype: torch.dtype, bits: int, axis: str, shape: tuple[int, ...], group: int
) -> None:
    x = _input(shape, dtype, bits)
    if axis == "value" and shape[-1] % group:
        pytest.skip("values need head_dim % group == 0")
    assert native.applies(x.device, dtype, shape[-1], group, axis)
    ours = quantize(x, bits, group, axis)
    with native.torch_path():
        ref = quantize(x, bits, group, axis)
        ref_y = dequantize(ref)
    assert _same_quantized(ours, ref)
    assert _same(dequantize(ours), ref_y)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("axis", ["key", "value"])
def test_kernels_read_strided_rows_and_write_into_rows_of_a_larger_tensor(dtype: torch.dtype, axis: str) -> None:
    """The store quantizes the oldest tokens of its window (a view, rows of heads apart) and dequantizes into the
    first rows of its [H, T, D] outputs."""
    window = _input((3, 80, 64), dtype, 5)
    x = window[:, :64]
    ours = quantize(x, 4, 32, axis)
    big = torch.full((3, 100, 64), -7.0, dtype=dtype)
    dequantize_grouped(ours.codes, ours.scale, ours.zero, 4, 32, axis, out=big[:, :64])
    with native.torch_path():
        ref = quantize(x.contiguous(), 4, 32, axis)
        want = dequantize(ref)
    assert _same_quantized(ours, ref)
    assert _same(big[:, :64].contiguous(), want) and bool((big[:, 64:] == -7).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("bits", BITS)
def test_store_streams_equal_the_torch_path(dtype: torch.dtype, bits: int) -> None:
    """A KiviStore that appends and evicts per head (ragged groups, padding rows) holds and dequantizes the same
    bits with the kernels as without."""
    stores = {}
    for path in ("native", "torch"):
        gen = torch.Generator().manual_seed(bits)
        store = KiviStore(bits, group_size=8, residual_length=5, dtype=dtype)
        with native.torch_path() if path == "torch" else nullcontext():
            seen, next_id = [], 0
            for step in range(9):
                n = int(torch.randint(1, 40, (1,), generator=gen))
                keys, values = torch.randn(3, n, 16, generator=gen), torch.randn(3, n, 16, generator=gen)
                store.append(keys, values, torch.arange(next_id, next_id + n))
                next_id += n
                if step % 2:
                    t = len(store)
                    store.keep(torch.rand(3, t, generator=gen).argsort(1)[:, : 3 * t // 4].sort(1).values)
                seen.append(store.read())
        stores[path] = (store, seen)
    (ours, ours_seen), (ref, ref_seen) = stores["native"], stores["torch"]
    assert len(set(ours.n_quantized.tolist())) > 1  # heads really ragged
    for (k1, v1), (k2, v2) in zip(ours_seen, ref_seen):
        assert _same(k1, k2) and _same(v1, v2)
    for h in range(3):
        for part, got, want in zip(fields(KiviHead), astuple(ours.head(h)), astuple(ref.head(h))):
            assert _same(got, want), (h, part.name)


def test_shapes_the_kernels_do_not_take_go_the_torch_way() -> None:
    """A head_dim or a value group that is not a multiple of the kernels' 8 lanes, another device, another dtype:
    the PyTorch path (the same results as with the kernels off)."""
    for shape, group, axis in (((2, 32, 36), 4, "key"), ((2, 32, 36), 4, "value"), ((2, 16, 32), 4, "value")):
        assert not native.applies(torch.device("cpu"), torch.float16, shape[-1], group, axis)
        x = _input(shape, torch.float16, 1)
        got = quantize(x, 4, group, axis)
        with native.torch_path():
            assert _same_quantized(got, quantize(x, 4, group, axis))
    assert not native.applies(torch.device("meta"), torch.float16, 128, 32, "key")
    assert not native.applies(torch.device("cpu"), torch.float64, 128, 32, "key")


def test_a_failed_build_warns_once_and_the_torch_path_runs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("INFINIPOTV_CACHE", str(tmp_path))
    native.library.cache_clear()
    try:
        with pytest.warns(UserWarning, match="KIVI codec: building kivi_codec.c with .*no-such-compiler failed"):
            assert native.library() is None
        x = _input((2, 32, 64), torch.float16, 2)
        assert not native.applies(x.device, x.dtype, 64, 32, "key")
        got = quantize(x, 4, 32, "key")
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
    assert native.library() is not None
    assert _same_quantized(got, quantize(x, 4, 32, "key"))


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV, "0")
    native.library.cache_clear()
    try:
        assert native.library() is None
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
    assert native.library() is not None


def test_every_build_exports_every_kernel_and_shapes_take_the_widest_that_fits() -> None:
    builds = native.library()
    for lanes, lib in builds.items():
        assert lib.kivi_lanes() == lanes
        for name, dtype in itertools.product(native.SIGNATURES, native.DTYPES.values()):
            assert getattr(lib, f"{name}_{dtype}").argtypes == native.SIGNATURES[name]
    cpu = torch.device("cpu")
    widest = max(builds)
    assert native.kernels(cpu, torch.float16, 128, 32, "value") is builds[widest]
    assert native.kernels(cpu, torch.float16, 24, 8, "key") is builds[8]  # 24 channels: 8 lanes only
