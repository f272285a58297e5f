"""The row bookkeeping of :class:`~infinipotv.kv.kivi.KiviStore` on the CPU in one call per layer
(``ragged_kernels.c``): which rows ``keep()`` moves and where ``read()`` puts them; and the row gather of every
store's ``keep()`` (:func:`select_rows`).

Why: the PyTorch path builds those rows (:mod:`infinipotv.kv.ragged`) out of a hundred small tensor operations per
layer (a range check, a binary search per key group, a stable sort of the live groups, runs of rows), each costing
microseconds of dispatch on tensors of a few thousand integers: at the paper's |M| that was a third of an INT4
compression pass on one CPU thread, more than the rows' data movement itself. The kernel computes the same rows
(integer arithmetic: nothing rounds; the tests compare the stores both paths leave, padding included).

The gather is ``index_select``'s copy with stores that bypass the caches (SSE2, any x86-64; a plain copy elsewhere):
a pass's kept rows are not read again before the next step's forward has pushed them out of the caches anyway, and
an ordinary store reads every destination line from memory first. On the paper's |M| that made the gather of a
full-precision ``keep()`` about a quarter faster inside a real stream (docs/performance.md).

Built like the other kernels (:func:`infinipotv.native.compiled`, plain C, no vector flags: any CPU with a C
compiler). Where none is available, or for tensors not on the CPU, the PyTorch path runs;
``INFINIPOTV_NATIVE_RAGGED=0`` always takes it.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from infinipotv import native as builder

SOURCE = Path(__file__).with_name("ragged_kernels.c")
FLAGS = ["-O2", "-shared", "-fPIC"]
ENV = "INFINIPOTV_NATIVE_RAGGED"
KEEP_ERRORS = {1: "outside", 2: "unsorted"}
# Narrower rows (KIVI's 32-byte codes) were gathered faster by index_select, whose stores keep them in the caches.
MIN_ROW_BYTES = 128

_p, _i64 = ctypes.c_void_p, ctypes.c_int64


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded build, or None where the PyTorch path must run (module docstring)."""
    lib = builder.load("KIVI store rows", SOURCE, FLAGS, ENV)
    if lib is None:
        return None
    lib.kivi_keep_plan.argtypes = [_p, _i64, _i64, _i64, _p, _p, _i64, _i64, _p, _p, _p, _p, _p, _p, _p]
    lib.kivi_keep_plan.restype = _i64
    lib.kivi_read_plan.argtypes = [_i64, _i64, _p, _p, _i64, _i64, _i64, _p, _p]
    lib.kivi_read_plan.restype = None
    lib.select_rows.argtypes, lib.select_rows.restype = [_p, _i64, _i64, _p, _i64, _p], _i64
    return lib


def torch_path() -> AbstractContextManager[None]:
    """Inside the block the store builds its rows with PyTorch, as where the kernel is unavailable."""
    return builder.switched_off(sys.modules[__name__])


def applies(device: torch.device) -> bool:
    return device.type == "cpu" and library() is not None


@dataclass(frozen=True)
class KeepPlan:
    """The rows one ``keep()`` moves. ``quantized`` ``[H]``: each head's kept quantized tokens; ``quantized_rows``
    ``[H * max kept]``: their rows in the flattened padded parts; ``groups``: the surviving key groups per head
    (host), ``counts`` ``[H, max groups]`` their survivors; ``group_rows``: their rows in the flat key scale/zero;
    ``residual_rows``: the kept residual tokens' rows in the flat window."""

    quantized: torch.Tensor
    quantized_rows: torch.Tensor
    groups: np.ndarray
    counts: torch.Tensor
    group_rows: torch.Tensor
    residual_rows: torch.Tensor


def keep_plan(
    indices: torch.Tensor, tokens: int, quantized: torch.Tensor, counts: torch.Tensor, padded: int
) -> KeepPlan | str:
    """The plan of keeping ``indices`` ``[H, n]`` (int64) in a store of ``tokens`` per head whose heads hold
    ``quantized`` ``[H]`` quantized tokens in ``padded`` rows, with survivor counts ``counts`` ``[H, Lg]``; or what
    is wrong with the indices (``outside`` [0, tokens), ``unsorted``)."""
    heads, n = indices.shape
    indices, quantized, counts = indices.contiguous(), quantized.contiguous(), counts.contiguous()
    lg = counts.shape[1]
    nq_new, ng_new = torch.empty(heads, dtype=torch.int64), torch.empty(heads, dtype=torch.int64)
    new_counts = torch.empty(heads, lg, dtype=counts.dtype)
    q_rows = torch.empty(heads * n, dtype=torch.int64)
    g_rows = torch.empty(max(heads * lg, 1), dtype=torch.int64)
    r_rows = torch.empty(heads * n, dtype=torch.int64)
    sizes = torch.empty(4, dtype=torch.int64)
    status = library().kivi_keep_plan(
        *(indices.data_ptr(), heads, n, tokens, quantized.data_ptr(), counts.data_ptr(), lg, padded),
        *(nq_new.data_ptr(), ng_new.data_ptr(), new_counts.data_ptr()),
        *(q_rows.data_ptr(), g_rows.data_ptr(), r_rows.data_ptr(), sizes.data_ptr()),
    )
    if status:
        return KEEP_ERRORS[status]
    lq_new, lg_new, n_groups, n_residual = sizes.tolist()
    return KeepPlan(
        nq_new,
        q_rows[: heads * lq_new],
        ng_new.numpy(),
        new_counts if lg_new == lg else new_counts[:, :lg_new].clone(),  # a store's tensors own their storage
        g_rows[:n_groups],
        r_rows[:n_residual],
    )


def read_plan(
    tokens: int, quantized: torch.Tensor, counts: torch.Tensor, padded: int, groups_total: int, residual_total: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[H, padded]`` each quantized token's row in the flat key scale/zero (``groups_total`` rows), and
    ``[residual_total]`` each residual token's row in the flattened ``[H * tokens]`` output of ``read()``."""
    heads, lg = counts.shape
    quantized, counts = quantized.contiguous(), counts.contiguous()
    rows = torch.empty(heads, padded, dtype=torch.int64)
    dest = torch.empty(residual_total, dtype=torch.int64)
    library().kivi_read_plan(
        heads,
        tokens,
        quantized.data_ptr(),
        counts.data_ptr(),
        lg,
        padded,
        groups_total,
        rows.data_ptr(),
        dest.data_ptr(),
    )
    return rows, dest


def takes_rows(rows: torch.Tensor, index: torch.Tensor) -> bool:
    """Whether :func:`select_rows` takes ``rows`` (``[N, ...]``, contiguous, on the CPU, rows a multiple of 16 bytes
    and at least ``MIN_ROW_BYTES``) and ``index`` (``[n]`` int64 or int32, on the CPU)."""
    row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
    return (
        rows.device.type == "cpu"
        and rows.dim() > 1
        and rows.is_contiguous()
        and row_bytes % 16 == 0
        and row_bytes >= MIN_ROW_BYTES
        and index.device.type == "cpu"
        and index.dim() == 1
        and index.dtype in (torch.int64, torch.int32)
        and library() is not None
    )


def select_rows(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor | None:
    """``rows.index_select(0, index)`` (:func:`takes_rows`), the same bytes; None where an index lies outside the
    rows (``index_select`` then says which)."""
    index = index.to(torch.int64).contiguous()
    out = torch.empty(index.numel(), *rows.shape[1:], dtype=rows.dtype)
    row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
    status = library().select_rows(
        rows.data_ptr(), rows.shape[0], row_bytes, index.data_ptr(), index.numel(), out.data_ptr()
    )
    return None if status else out
