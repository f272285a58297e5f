"""TaR's similarity and VaN's norm on the CPU in one read of each row (``scores_kernels.c``), the same bits as
PyTorch's kernels; and the rest of a pass's per-layer work: the pooling of the VaN map (avg_pool's sums in its order),
the top-k where only one set is the top k (else ``torch.topk`` picks among the ties), and the sorting of the kept
indices.

Why: on one CPU thread PyTorch runs ``tar_scores`` and ``van_scores`` as seven full passes over ``[H, T, D]``
float32 tensors (conversion, norm, division, product, sum), each at memory speed: most of a compression pass's time
at the paper's |M|; even the unit keys of TaR's recent frames alone, four small operations per layer, took 7% of a
pass. The kernels do the same operations in the same order (see the C source), so the kept indices
do not change.

Built like the KIVI codec (:func:`infinipotv.native.compiled`: the system C compiler, AVX2 + F16C, the harness's
cache folder), and checked on every load against PyTorch on random rows of each dtype and of the head_dims in the
check, and on random grids for the pooling: a build whose results differ in one bit (another PyTorch whose
reductions run in another order, another CPU) is not used, with one warning line. The calls are not wrapped in
``torch.profiler.record_function`` (three per layer would cost more than the kernels' own dispatch): a profile with
stacks shows them under their Python callers.
Where no build applies (GPU tensors, head_dim not a multiple of 8 or over the kernel's limit, no compiler, not
x86-64) the PyTorch path runs; ``INFINIPOTV_NATIVE_SCORES=0`` always takes it.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import warnings
from contextlib import AbstractContextManager
from pathlib import Path

import torch
import torch.nn.functional as F

from infinipotv import native as builder

SOURCE = Path(__file__).with_name("scores_kernels.c")
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC", "-mavx2", "-mf16c"]
NEEDS = ("avx2", "f16c")
ENV = "INFINIPOTV_NATIVE_SCORES"
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
CHECK_DIMS = (8, 24, 64, 128, 136)  # head_dims the load check covers (4 accumulators, leftovers, fewer than 4)

_p, _i64, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
SIGNATURES = {
    "row_norms": [_p, _i64, _i64, _i64, _i64, _p],
    "unit_dot": [
        _p,
        _i64,
        _i64,
        _i64,
        _i64,
        ctypes.c_float,
        _p,
        _i64,
        _p,
        _i64,
        _i64,
        ctypes.c_float,
        _int,
        ctypes.c_float,
        _p,
    ],
    "unit_rows": [_p, _i64, _i64, _i64, _i64, ctypes.c_float, _p],
}
ASCENDING_ERRORS = {1: "outside", 2: "repeated"}


def torch_path() -> AbstractContextManager[None]:
    """Inside the block the scores take their PyTorch path (the tests compare both paths)."""
    return builder.switched_off(sys.modules[__name__])


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded, checked build, or None where the PyTorch path must run (module docstring)."""
    lib = builder.load("compression scores", SOURCE, FLAGS, ENV) if set(NEEDS) <= builder.cpu_flags() else None
    if lib is None:
        return None
    for name, args in SIGNATURES.items():
        for dtype in DTYPES.values():
            fn = getattr(lib, f"{name}_{dtype}")
            fn.argtypes, fn.restype = args, None
    lib.scores_max_head_dim.restype = ctypes.c_int64
    lib.ascending_indices.argtypes, lib.ascending_indices.restype = [_p, _i64, _i64, _i64, _p, _p], ctypes.c_int64
    lib.top_set.argtypes, lib.top_set.restype = [_p, _i64, _i64, _i64, _p, _p], ctypes.c_int64
    lib.box_mean.argtypes, lib.box_mean.restype = [_p, *[_i64] * 7, _p, _p], None
    mismatch = _mismatch(lib)
    if mismatch:
        warnings.warn(
            f"compression scores: the kernels of {SOURCE.name} differ from PyTorch {torch.__version__} "
            f"({mismatch}): the PyTorch path runs ({ENV}=0 silences this)",
            stacklevel=3,
        )
        return None
    return lib


def applies(x: torch.Tensor) -> bool:
    """Whether the kernels take ``x`` ``[H, T, D]``: on the CPU, a float dtype, D a multiple of 8 within the
    kernel's limit, rows of D contiguous one after another along T."""
    if x.device.type != "cpu" or x.dtype not in DTYPES or x.dim() != 3:
        return False
    d = x.shape[2]
    if d % 8 or x.stride(2) != 1 or (x.shape[1] > 1 and x.stride(1) != d):
        return False
    lib = library()
    return lib is not None and d <= lib.scores_max_head_dim()


def row_norms(x: torch.Tensor) -> torch.Tensor:
    """``x.float().norm(dim=-1)`` of ``x`` ``[H, T, D]`` (:func:`applies`), bit for bit."""
    return _row_norms(library(), x)


def unit_rows(keys: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.normalize(keys.float(), dim=-1, eps=eps)`` computed as :func:`~infinipotv.compress.scores.unit_keys`
    does, ``[H, T, D]`` float32, bit for bit."""
    return _unit_rows(library(), keys, eps)


def unit_dot(
    keys: torch.Tensor,
    eps: float,
    slot: torch.Tensor,
    sums: torch.Tensor,
    tokens: int | None = None,
    divisor: float = 1.0,
    negate: bool = False,
    rest: float = 0.0,
) -> torch.Tensor:
    """``(unit * sums[h, slot]).sum(-1) / divisor``, negated where ``negate``, ``[H, T]``, where ``unit =
    F.normalize(keys.float(), dim=-1, eps=eps)`` computed as :func:`~infinipotv.compress.scores.unit_keys` does;
    ``slot`` ``[H, T]`` int64 (rows may be one row expanded over the heads), ``sums`` ``[H, P, D]`` float32. Bit for
    bit the products and sums of the PyTorch path, then its quotient by a float32 tensor holding ``divisor`` (exact
    for 1) and its negation. ``tokens``: only each head's first that many are computed, the others are ``rest``
    (TaR's recent frames: +inf)."""
    return _unit_dot(library(), keys, eps, slot, sums, tokens, divisor, negate, rest)


def takes_scores(score: torch.Tensor, k: int) -> bool:
    """Whether :func:`top_set` takes ``score`` (``[H, T]`` float32 on the CPU) and ``k`` (in ``[1, T]``)."""
    return (
        score.device.type == "cpu"
        and score.dtype == torch.float32
        and score.dim() == 2
        and 1 <= k <= score.shape[1]
        and library() is not None
    )


def top_set(score: torch.Tensor, k: int) -> torch.Tensor | None:
    """``[H, k]`` the indices of each head's k highest scores, ascending, where each head has only one such set
    (no tie across the k-th place, no NaN); else None, and the caller's top-k decides which of the tied scores
    it keeps. Where the set is unique every top-k returns it, in some order: this is ``torch.topk``'s set."""
    heads, tokens = score.shape
    score = score.contiguous()
    scratch = torch.empty(4 * tokens + 2, dtype=torch.int32)
    out = torch.empty(heads, k, dtype=torch.int64)
    status = library().top_set(score.data_ptr(), heads, tokens, k, scratch.data_ptr(), out.data_ptr())
    return None if status else out


def takes_grid(grid: torch.Tensor, kernel: tuple[int, int, int]) -> bool:
    """Whether :func:`box_mean` takes ``grid`` (``[planes, frames, h, w]`` float32 on the CPU) and ``kernel``
    (odd sides, none longer than its axis)."""
    return (
        grid.device.type == "cpu"
        and grid.dtype == torch.float32
        and grid.dim() == 4
        and all(k % 2 == 1 and k <= n for k, n in zip(kernel, grid.shape[1:]))
        and library() is not None
    )


def box_mean(grid: torch.Tensor, kernel: tuple[int, int, int]) -> torch.Tensor:
    """``F.avg_pool3d(grid[:, None], kernel, stride=1, padding=k // 2, count_include_pad=True)[:, 0]`` of ``grid``
    ``[planes, frames, h, w]`` (:func:`takes_grid`), bit for bit: the same sums in the same order, 8 frames at a
    time."""
    return _box_mean(library(), grid, kernel)


def takes_indices(kept: torch.Tensor) -> bool:
    """Whether :func:`ascending` takes ``kept`` (``[H, n]`` int64 on the CPU)."""
    return kept.device.type == "cpu" and kept.dtype == torch.int64 and kept.dim() == 2 and library() is not None


def ascending(kept: torch.Tensor, n_tokens: int) -> tuple[torch.Tensor, str]:
    """``kept`` sorted per head, and '' or what is wrong with it: ``outside`` (an index not in ``[0, n_tokens)``)
    or ``repeated`` (a head names a token twice)."""
    heads, n = kept.shape
    kept = kept.contiguous()
    out = torch.empty_like(kept)
    marks = torch.empty(n_tokens, dtype=torch.uint8)
    status = library().ascending_indices(kept.data_ptr(), heads, n, n_tokens, marks.data_ptr(), out.data_ptr())
    return out, ASCENDING_ERRORS.get(status, "")


def _unit_rows(lib: ctypes.CDLL, keys: torch.Tensor, eps: float) -> torch.Tensor:
    h, t, d = keys.shape
    out = torch.empty(h, t, d, dtype=torch.float32)
    getattr(lib, f"unit_rows_{DTYPES[keys.dtype]}")(
        keys.data_ptr(), h, t, d, keys.stride(0), ctypes.c_float(eps), out.data_ptr()
    )
    return out


def _row_norms(lib: ctypes.CDLL, x: torch.Tensor) -> torch.Tensor:
    h, t, d = x.shape
    out = torch.empty(h, t, dtype=torch.float32)
    getattr(lib, f"row_norms_{DTYPES[x.dtype]}")(x.data_ptr(), h, t, d, x.stride(0), out.data_ptr())
    return out


def _unit_dot(
    lib: ctypes.CDLL,
    keys: torch.Tensor,
    eps: float,
    slot: torch.Tensor,
    sums: torch.Tensor,
    tokens: int | None = None,
    divisor: float = 1.0,
    negate: bool = False,
    rest: float = 0.0,
) -> torch.Tensor:
    h, t, d = keys.shape
    slot = slot.to(torch.int64)
    if slot.stride(0) == 0:
        rows, ss = slot[0].contiguous(), 0
    else:
        rows, ss = slot.contiguous(), t
    sums = sums.to(torch.float32).contiguous()
    out = torch.empty(h, t, dtype=torch.float32)
    getattr(lib, f"unit_dot_{DTYPES[keys.dtype]}")(
        *(keys.data_ptr(), h, t if tokens is None else tokens, d, keys.stride(0), ctypes.c_float(eps)),
        *(rows.data_ptr(), ss, sums.data_ptr(), sums.shape[1], t),
        *(ctypes.c_float(divisor), int(negate), ctypes.c_float(rest), out.data_ptr()),
    )
    return out


def _box_mean(lib: ctypes.CDLL, grid: torch.Tensor, kernel: tuple[int, int, int]) -> torch.Tensor:
    grid = grid.contiguous()
    out, scratch = torch.empty_like(grid), torch.empty_like(grid)
    lib.box_mean(grid.data_ptr(), *grid.shape, *kernel, scratch.data_ptr(), out.data_ptr())
    return out


def _pool_mismatch(lib: ctypes.CDLL, gen: torch.Generator) -> str:
    """'' when the box means give avg_pool3d's and avg_pool1d's bits on random grids (zeros of both signs, values
    from 1e-30 to 1e30 in one window), else what differs."""
    grid = torch.randn(3, 29, 3, 5, generator=gen) * torch.logspace(-30, 30, 29 * 15).view(1, 29, 3, 5)
    grid[0, 4], grid[1, 7] = 0.0, -0.0
    for kernel in ((1, 1, 1), (3, 3, 3), (1, 3, 3), (7, 3, 5), (29, 1, 1)):
        want = F.avg_pool3d(grid[:, None], kernel, 1, tuple(k // 2 for k in kernel), count_include_pad=True)[:, 0]
        if not torch.equal(_box_mean(lib, grid, kernel), want):
            return f"box means, kernel {kernel}"
    line = grid.reshape(3, -1)
    want = F.avg_pool1d(line[:, None], 3, 1, 1, count_include_pad=True)[:, 0]
    if not torch.equal(_box_mean(lib, line.view(3, -1, 1, 1), (3, 1, 1)).view(3, -1), want):
        return "box means of a sequence"
    return ""


def _mismatch(lib: ctypes.CDLL) -> str:
    """'' when the kernels give PyTorch's bits on random rows (zeros, tiny and huge norms among them), else what
    differs."""
    gen = torch.Generator().manual_seed(0)
    for d in CHECK_DIMS:
        base = torch.randn(3, 97, d, generator=gen) * torch.rand(3, 97, 1, generator=gen).pow(4) * 50
        base[0, 3] = 0
        base[1, 5] *= 1e-12
        sums = torch.randn(3, 12, d, generator=gen)
        slot = torch.randint(0, 12, (3, 97), generator=gen)
        for dtype in DTYPES:
            x = base.to(dtype)
            if not torch.equal(_row_norms(lib, x), x.float().norm(dim=-1)):
                return f"row norms, {dtype}, head_dim {d}"
            k = x.float()
            unit = k / k.norm(dim=-1, keepdim=True).clamp_min_(1e-9)
            want = (unit * sums.gather(1, slot.unsqueeze(-1).expand(-1, -1, d))).sum(-1)
            if not torch.equal(_unit_rows(lib, x, 1e-9), unit):
                return f"unit keys, {dtype}, head_dim {d}"
            got = _unit_dot(lib, x, 1e-9, slot, sums)
            part = _unit_dot(lib, x, 1e-9, slot, sums, tokens=50)
            tar = _unit_dot(lib, x, 1e-9, slot, sums, tokens=50, divisor=3.0, negate=True, rest=math.inf)
            quotient = -(want / torch.full((1,), 3.0))
            if not (
                torch.equal(got, want)
                and torch.equal(part[:, :50], want[:, :50])
                and not part[:, 50:].any()
                and torch.equal(tar[:, :50], quotient[:, :50])
                and bool((tar[:, 50:] == math.inf).all())
            ):
                return f"unit dot products, {dtype}, head_dim {d}"
    return _pool_mismatch(lib, gen)
