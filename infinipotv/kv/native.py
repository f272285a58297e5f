"""The KIVI codec's fused CPU kernels (``kivi_codec.c``): compiled on first use, loaded with ctypes.

Why: PyTorch runs the quantizer as a dozen full passes over the tensor, each with its own temporaries, and its
half-precision kernels convert every element to float32 and back at each one; on one CPU thread that made a
quantize of a 7B-shaped layer 45-110x a plain copy of it. The C kernels read a group once for its min/max and once
for its codes, in float32 registers, and round after every operation exactly as PyTorch's kernels do: codes,
scales, zeros and dequantized values are the same bits as the PyTorch path of :mod:`infinipotv.kv.quant` (the tests
compare both, and both against optimum-quanto).

The source is built with the system C compiler (``$CC``, else ``cc``) into the harness's cache folder, keyed by the
source and the flags, so it is compiled once per machine: 16 float32 lanes where the CPU has AVX-512F, and 8 with
AVX2 + F16C (x86-64 only); a shape takes the widest build whose lanes divide its head_dim (and its value group).
Where none applies (no compiler, another CPU, a GPU tensor, a head_dim or value group not a multiple of 8, a
head_dim over 4096 or a value group over 256), the PyTorch path runs instead, with one warning line when a build
fails. ``INFINIPOTV_NATIVE_CODEC=0`` always takes the PyTorch path.
"""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import sys
import warnings
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable

import torch

from infinipotv import native as builder

SOURCE = Path(__file__).with_name("kivi_codec.c")
FLAGS = ("-O3", "-funroll-loops", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC")
# lanes -> (the CPU flags the build needs, its compiler flags); widest first
BUILDS = {
    16: (("avx512f", "avx2", "f16c"), ("-mavx512f", "-mavx2", "-mf16c")),
    8: (("avx2", "f16c"), ("-mavx2", "-mf16c")),
}
ENV = "INFINIPOTV_NATIVE_CODEC"
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}

_p, _i64, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
SIGNATURES = {
    "kivi_quantize_key": [_p, _i64, _i64, _i64, _i64, _i64, _int, _p, _p, _p],
    "kivi_quantize_value": [_p, _i64, _i64, _i64, _i64, _i64, _int, _p, _p, _p],
    "kivi_dequantize_key": [_p, _i64, _i64, _i64, _i64, _int, _p, _p, _p, _p, _i64],
    "kivi_dequantize_value": [_p, _i64, _i64, _i64, _i64, _int, _p, _p, _p, _i64],
}


def _load(compiler: str, lanes: int, machine_flags: tuple[str, ...]) -> ctypes.CDLL:
    lib = builder.compiled(compiler, SOURCE, [*FLAGS, *machine_flags, f"-DLANES={lanes}"])
    for name, args in SIGNATURES.items():
        for dtype in DTYPES.values():
            fn = getattr(lib, f"{name}_{dtype}")
            fn.argtypes, fn.restype = args, None
    for name in ("kivi_lanes", "kivi_max_head_dim", "kivi_max_value_group"):
        getattr(lib, name).restype = ctypes.c_int64
    return lib


def torch_path() -> AbstractContextManager[None]:
    """Inside the block the codec takes its PyTorch path, as where the kernels are unavailable (the benches and tests
    compare both paths; ``INFINIPOTV_NATIVE_CODEC=0`` does the same for a whole process)."""
    return builder.switched_off(sys.modules[__name__])


@functools.cache
def library() -> dict[int, ctypes.CDLL] | None:
    """The loaded builds by lanes, widest first, or None where the PyTorch path must run (module docstring)."""
    cpu = builder.cpu_flags()
    wanted = {lanes: flags for lanes, (needs, flags) in BUILDS.items() if set(needs) <= cpu}
    if os.environ.get(ENV, "1") == "0" or not wanted:
        return None
    cc = builder.compiler()
    if cc is None:
        warnings.warn(
            f"KIVI codec: no C compiler (cc, gcc or $CC) to build {SOURCE.name}: the PyTorch path runs "
            f"(slower on CPU; {ENV}=0 silences this)",
            stacklevel=3,
        )
        return None
    try:
        return {lanes: _load(cc, lanes, flags) for lanes, flags in wanted.items()}
    except (OSError, subprocess.SubprocessError) as err:
        builder.warn_build_failed("KIVI codec", SOURCE, cc, err, ENV)
        return None


def kernels(device: torch.device, dtype: torch.dtype, head_dim: int, group_size: int, axis: str) -> ctypes.CDLL | None:
    """The widest build that takes tensors of ``head_dim`` channels in ``dtype`` (the dtype of the values, scales
    and zeros) on ``device``, once the layout checks of :mod:`~infinipotv.kv.quant` passed; None: the PyTorch
    path."""
    builds = library() if device.type == "cpu" and dtype in DTYPES else None
    for lanes, lib in (builds or {}).items():
        if (
            head_dim % lanes == 0
            and head_dim <= lib.kivi_max_head_dim()
            and (axis == "key" or (group_size % lanes == 0 and group_size <= lib.kivi_max_value_group()))
        ):
            return lib
    return None


def applies(device: torch.device, dtype: torch.dtype, head_dim: int, group_size: int, axis: str) -> bool:
    """Whether some build of the kernels takes these tensors (see :func:`kernels`)."""
    return kernels(device, dtype, head_dim, group_size, axis) is not None


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``x`` as ``[N, T, D]`` whose rows of D are contiguous, and its stride over N (a view where possible)."""
    x = x.reshape(-1, *x.shape[-2:])
    if x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        x = x.contiguous()
    return x, x.stride(0)


def _fn(name: str, dtype: torch.dtype, head_dim: int, group_size: int, axis: str) -> Callable[..., None]:
    """The kernel, named in torch.profiler's tables (a ctypes call is no PyTorch operator)."""
    kernel = getattr(kernels(torch.device("cpu"), dtype, head_dim, group_size, axis), f"{name}_{DTYPES[dtype]}")

    def run(*args: Any) -> None:
        with torch.profiler.record_function(name):
            kernel(*args)

    return run


def quantize(x: torch.Tensor, bits: int, group_size: int, axis: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Packed codes ``[..., T, D * bits / 8]``, scale and zero (shapes as :class:`~infinipotv.kv.quant.
    QuantizedTensor`) of ``x`` ``[..., T, D]``."""
    *lead, t, d = x.shape
    rows, stride = _rows(x)
    codes = torch.empty(*lead, t, d * bits // 8, dtype=torch.uint8)
    params = (*lead, t // group_size, d) if axis == "key" else (*lead, t, d // group_size)
    scale, zero = torch.empty(params, dtype=x.dtype), torch.empty(params, dtype=x.dtype)
    run = _fn(f"kivi_quantize_{axis}", x.dtype, d, group_size, axis)
    run(
        rows.data_ptr(),
        rows.shape[0],
        stride,
        t,
        d,
        group_size,
        bits,
        codes.data_ptr(),
        scale.data_ptr(),
        zero.data_ptr(),
    )
    return codes, scale, zero


def _out(out: torch.Tensor | None, shape: torch.Size, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The caller's ``out`` (rows of D contiguous, any stride over the leading dim, e.g. rows of a larger tensor)
    or a new tensor; the ``[N, T, D]`` view written and its stride over N."""
    if out is None:
        out = torch.empty(shape, dtype=dtype)
    view = out.view(-1, *shape[-2:]) if out.dim() != 3 else out
    if view.stride(2) != 1 or view.stride(1) != shape[-1]:
        raise ValueError(f"out {tuple(out.shape)} must hold rows of head_dim={shape[-1]} contiguously")
    return out, view, view.stride(0)


def dequantize_key(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    bits: int,
    group_size: int,
    groups: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Keys ``[..., T, D]`` from ``codes``; token t of row n reads scale/zero row ``groups[n, t]`` of the flattened
    ``[rows, D]`` scale/zero (None: its own group, ``n * T / G + t / G``, as :func:`quantize` lays them)."""
    *lead, t, row = codes.shape
    shape = torch.Size((*lead, t, row * 8 // bits))
    out, view, stride = _out(out, shape, scale.dtype)
    codes, scale, zero = codes.contiguous(), scale.contiguous(), zero.contiguous()
    index = None if groups is None else groups.to(torch.int64).contiguous()
    run = _fn("kivi_dequantize_key", scale.dtype, shape[-1], group_size, "key")
    run(
        codes.data_ptr(),
        view.shape[0],
        t,
        shape[-1],
        group_size,
        bits,
        None if index is None else index.data_ptr(),
        scale.data_ptr(),
        zero.data_ptr(),
        view.data_ptr(),
        stride,
    )
    return out


def dequantize_value(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    bits: int,
    group_size: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Values ``[..., T, D]`` from ``codes`` and their per-token scale/zero ``[..., T, D / G]``."""
    *lead, t, row = codes.shape
    shape = torch.Size((*lead, t, row * 8 // bits))
    out, view, stride = _out(out, shape, scale.dtype)
    codes, scale, zero = codes.contiguous(), scale.contiguous(), zero.contiguous()
    run = _fn("kivi_dequantize_value", scale.dtype, shape[-1], group_size, "value")
    run(
        codes.data_ptr(),
        view.shape[0],
        t,
        shape[-1],
        group_size,
        bits,
        scale.data_ptr(),
        zero.data_ptr(),
        view.data_ptr(),
        stride,
    )
    return out
