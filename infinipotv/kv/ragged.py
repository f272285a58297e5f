"""Per-head ragged rows: the index arithmetic of the KV stores, and per-head lengths mirrored on the host.

After eviction each KV head of a layer holds its own set of tokens, so the parts of a store have a different number
of rows per head. Two layouts hold them (see :mod:`infinipotv.kv.kivi`):

- padded, ``[H, max over heads, ...]``: head h's rows are its first ``length[h]``; the rest is padding whose content
  is never read;
- flat, ``[rows of all heads, ...]``: head after head, head h's rows starting at the sum of the lengths before it
  (:func:`flat_starts`).

Every function here builds the row index of one gather or copy over all heads at once (no per-head loop). Sizes of
the results are passed in from the host (``total``, ``length``): reading them from the device would make every
call wait for it. :class:`HeadLengths` keeps a length per head on the device, for the index arithmetic, together
with its copy on the host, for the shapes, and changes both in the same call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

LENGTH_DTYPE = torch.long  # per-head lengths on the device


@dataclass
class HeadLengths:
    """A length per head, ``[H]``: ``device`` (LENGTH_DTYPE, where the index arithmetic runs) and ``host`` (int64
    numpy, what tensor shapes are taken from), always equal: they change only together, through :meth:`set`."""

    device: torch.Tensor
    host: np.ndarray

    @classmethod
    def zeros(cls, heads: int, device: torch.device | str | None = None) -> "HeadLengths":
        return cls(torch.zeros(heads, dtype=LENGTH_DTYPE, device=device), np.zeros(heads, dtype=np.int64))

    def set(self, device: torch.Tensor, host: np.ndarray) -> None:
        """Both copies at once; ``host`` is ``device``'s value, computed on the host or read back once."""
        self.device, self.host = device.to(LENGTH_DTYPE), np.asarray(host, dtype=np.int64)

    @classmethod
    def from_device(cls, lengths: torch.Tensor) -> "HeadLengths":
        """Lengths computed on the device that the host does not know yet: one read back from it."""
        return cls(lengths.to(LENGTH_DTYPE), lengths.cpu().numpy().astype(np.int64))

    def total(self) -> int:
        return int(self.host.sum())

    def most(self) -> int:
        return int(self.host.max()) if len(self.host) else 0

    def uniform(self) -> bool:
        """Every head holds the same number."""
        return bool((self.host == self.host[0]).all()) if len(self.host) else True


# -- rows of padded parts ----------------------------------------------------------------------------------------


def flat_rows(idx: torch.Tensor, length: int) -> torch.Tensor:
    """``[H * n]`` rows of the flattened (head, row) axis of an ``[H, length, ...]`` tensor that :func:`gather_rows`
    reads for ``idx`` ``[H, n]``: computed once, it serves every tensor with the same heads and length."""
    return (idx + torch.arange(idx.shape[0], device=idx.device).unsqueeze(1) * length).reshape(-1)


# Rows this narrow are copied as one integer each (a 1-D gather), several times faster than rows of 2-4 elements.
_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def select_rows(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``rows.index_select(0, index)``, bit for bit: rows of 1-8 bytes as one integer each."""
    row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
    if rows.dim() > 1 and row_bytes in _WORDS and rows.is_contiguous():
        words = rows.view(_WORDS[row_bytes]).reshape(-1).index_select(0, index)
        return words.view(rows.dtype).view(-1, *rows.shape[1:])
    return rows.index_select(0, index)


def take_rows(x: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """:func:`gather_rows` with the flat index of :func:`flat_rows` (``[H * n]``): ``[H, n, ...]``, bit for bit."""
    h, length = x.shape[:2]
    return select_rows(x.reshape(h * length, *x.shape[2:]), flat).view(h, -1, *x.shape[2:])


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``out[h, t] = x[h, idx[h, t]]`` for ``x`` ``[H, L, ...]`` and ``idx`` ``[H, n]``.

    One ``index_select`` of whole rows over the flattened (head, row) axis: advanced indexing ``x[heads, idx]``
    computes the same thing several times slower on CPU."""
    return take_rows(x, flat_rows(idx, x.shape[1]))


def ragged_index(la: torch.Tensor, lb: torch.Tensor, rows_a: int, rows_b: int, length: int) -> torch.Tensor:
    """The rows of ``cat([a, b], 1)`` that :func:`ragged_cat` gathers (``a``, ``b`` with ``rows_a``, ``rows_b``
    rows): computed once, it serves every pair of tensors with the same per-head lengths (keys and values).
    ``length`` = max over heads of ``la + lb``, known on the host."""
    t = torch.arange(length, device=la.device).unsqueeze(0)
    idx = torch.where(t < la.unsqueeze(1), t, rows_a + t - la.unsqueeze(1))
    return idx.clamp(max=max(rows_a + rows_b - 1, 0))


def ragged_cat(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per head, the first ``la[h]`` rows of ``a`` then the first ``lb[h]`` rows of ``b``, padded to the longest head,
    where ``index`` is :func:`ragged_index` of those lengths and shapes.

    Padding rows (past ``la[h] + lb[h]``) repeat some valid or padding row: their content is never read (a caller
    whose padding must hold something, such as zero counts, overwrites it)."""
    if index.shape[1] == 0:
        return a.new_empty((a.shape[0], 0, *a.shape[2:]))
    return gather_rows(torch.cat([a, b], dim=1), index)


def padding_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``[H, width]`` True at the padding rows of a padded part whose heads hold ``lengths`` rows."""
    return torch.arange(width, device=lengths.device) >= lengths.unsqueeze(1)


# -- rows of flat parts ------------------------------------------------------------------------------------------


def flat_starts(lengths: torch.Tensor) -> torch.Tensor:
    """``[K]`` first row of each of K runs of ``lengths[k]`` rows laid one after another (head after head, in a
    flat part)."""
    return lengths.cumsum(0) - lengths


def flat_runs(starts: torch.Tensor, lengths: torch.Tensor, total: int) -> torch.Tensor:
    """``[total]`` rows ``starts[k] .. starts[k] + lengths[k] - 1`` of each run k, one run after another: the index
    of every gather and copy of a flat part (one shift per run, repeated; no per-row search). ``total`` =
    ``lengths.sum()``, known on the host."""
    shift = (starts - flat_starts(lengths)).repeat_interleave(lengths, output_size=total)
    return torch.arange(total, device=starts.device).add_(shift)


def flat_append_index(la: torch.Tensor, lb: torch.Tensor, rows_a: int, rows_b: int, total: int) -> torch.Tensor:
    """The rows of ``cat([a, b.reshape(H * rows_b, ...)])`` that hold, head after head, a head's ``la[h]`` rows of
    the flat ``a`` (``rows_a`` rows in all) then the first ``lb[h]`` of its rows of ``b`` ``[H, rows_b, ...]``:
    computed once, it serves every pair of tensors with the same lengths (:func:`flat_cat`). ``total`` =
    ``(la + lb).sum()``, known on the host."""
    b_starts = torch.arange(rows_a, rows_a + rows_b * la.shape[0], rows_b, device=la.device)
    starts = torch.stack([flat_starts(la), b_starts], dim=1).reshape(-1)
    return flat_runs(starts, torch.stack([la, lb], dim=1).reshape(-1), total)


def flat_cat(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The flat rows :func:`flat_append_index` names (``index``) of the flat ``a`` and the padded ``b``."""
    return torch.cat([a, b.reshape(-1, *b.shape[2:])]).index_select(0, index)


def flat_take_index(
    rows: torch.Tensor, kept: torch.Tensor, total: int, first: torch.Tensor | None = None
) -> torch.Tensor:
    """``rows[h, first[h] : first[h] + kept[h]]`` of each head, head after head (``rows`` ``[H, W]``; ``first``
    None = 0): rows of a flat part to keep, when ``rows`` names them. ``total`` = ``kept.sum()``, known on the
    host."""
    h, width = rows.shape
    starts = torch.arange(h, device=rows.device) * width  # width may be 0 (nothing kept)
    return rows.reshape(-1).index_select(0, flat_runs(starts if first is None else starts + first, kept, total))


def flat_head_rows(lengths: torch.Tensor, width: int, total_rows: int) -> torch.Tensor:
    """``[H * width]`` rows of a flat part holding ``lengths[h]`` rows per head: each head's first ``width`` rows,
    clamped into the part (a head holding fewer repeats rows that are then never read)."""
    rows = (flat_starts(lengths).unsqueeze(1) + torch.arange(width, device=lengths.device)).reshape(-1)
    return rows.clamp_(max=max(total_rows - 1, 0))


def run_index(counts: torch.Tensor, n: int) -> torch.Tensor:
    """``[H, n]`` index of the run that each of a head's first ``n`` rows belongs to, where ``counts`` ``[H, Lg]``
    holds the rows of each run in order (0 for padding runs): a row's run is the first whose running total exceeds
    the row's rank."""
    ends = counts.cumsum(dim=1)
    rank = torch.arange(n, device=counts.device).expand(counts.shape[0], n).contiguous()
    return torch.searchsorted(ends, rank, right=True).clamp(max=max(counts.shape[1] - 1, 0))
