"""The two token scores of InfiniPot-V (per layer, per KV head; higher = keep), in fp32.

- TaR (temporal-axis redundancy): a past token that looks like the same patch in the r most recent frames is
  redundant, s_TaR(t, s) = -mean over recent t' of cos(K[t, s], K[t', s]). The recent frames are always kept; their
  score is +inf so that any top-k keeps them.
- VaN (value norm): s_VaN = ||V||_2, no normalisation.
"""

from __future__ import annotations

import math

import torch

from .layout import FrameCoords

KEY_EPS = 1e-9  # L2 normalisation of keys before the cosine


def van_scores(values: torch.Tensor) -> torch.Tensor:
    """``[H, T, D]`` -> ``[H, T]`` value norms, in fp32 whatever the input's float dtype."""
    return values.float().norm(dim=-1)


def unit_keys(keys: torch.Tensor) -> torch.Tensor:
    """``F.normalize(keys.float(), dim=-1, eps=KEY_EPS)``, computed as it does (``x / max(||x||, eps)``), in fp32.
    Half-precision keys are converted once into a copy that is then divided in place (no second [H, T, D] tensor);
    fp32 keys (the caller's own tensor) get a fresh result."""
    k = keys.float()
    denom = k.norm(dim=-1, keepdim=True).clamp_min_(KEY_EPS)
    return k.div_(denom) if k.data_ptr() != keys.data_ptr() else k / denom


def tar_scores(keys: torch.Tensor, coords: FrameCoords, r: int, reverse: bool = False) -> torch.Tensor:
    """``[H, T]`` s_TaR under ``coords``; the r recent frames get +inf (always kept), also when ``reverse``
    (which ranks the past tokens the other way round: most redundant first).

    The mean cosine over recent frames is one dot product: Khat[t, s] . sum_t' Khat[t', s] / count(s), so no
    [T, r] similarity matrix is ever built. In the pseudo-frames view the recent frames are the last r * p tokens,
    whole frames (:func:`_tar_whole_frames`); in the grid-aware view they are found per token
    (:func:`_tar_any_frames`).
    """
    if coords.offset is not None:
        return _tar_whole_frames(keys, coords, r, reverse)
    return _tar_any_frames(keys, coords, r, reverse)


def _tar_whole_frames(keys: torch.Tensor, coords: FrameCoords, r: int, reverse: bool) -> torch.Tensor:
    """The pseudo-frames view: the newest frames are whole at the end of every head, so the r recent frames are the
    last r * p tokens (or every token, when r is all the frames), each slot counts r of them, and their sums are
    one reduction of a view: no per-token coordinates are read, and the same sums and quotients as
    :func:`_tar_any_frames`, bit for bit (the tests compare the two)."""
    heads, n_tokens, dim = keys.shape
    p = coords.tokens_per_frame
    past = n_tokens - r * p
    if past <= 0:
        return keys.new_full((heads, n_tokens), math.inf, dtype=torch.float32)
    unit = unit_keys(keys)
    sums = unit[:, past:].view(heads, r, p, dim).sum(1)
    similarity = _periodic_dot(unit, sums, coords.offset)
    # a one-element tensor, not a Python number: on a GPU a scalar divisor becomes a product by its reciprocal
    score = similarity.div_(similarity.new_full((1,), r))
    if not reverse:
        score.neg_()
    score[:, past:] = math.inf
    return score


def _tar_any_frames(keys: torch.Tensor, coords: FrameCoords, r: int, reverse: bool) -> torch.Tensor:
    """The grid-aware view: frames grow along each head's stream order, so the recent tokens are a suffix of at
    most r * p tokens; only that suffix is placed in a dense [r, p] grid, by a plain row copy (cells are unique;
    deterministic on GPU, unlike scatter-add; suffix tokens that are not recent go to a dump row), and summed over
    frames. A slot with no recent token (possible after evictions) counts as cosine 0. Rows are moved with
    ``index_copy_``/``index_select`` on flattened (head, row) indices: one index per row of D values, where
    ``scatter``/``gather`` would read an expanded index per value."""
    heads, n_tokens, dim = keys.shape
    p, cells = coords.tokens_per_frame, r * coords.tokens_per_frame
    suffix = slice(n_tokens - min(n_tokens, cells), n_tokens)
    unit = unit_keys(keys)
    unit_suffix = unit[:, suffix]
    recent = coords.recent(r)
    cell = (coords.frame[:, suffix] - (coords.n_grid_frames - r)) * p + coords.slot[:, suffix]
    target = torch.where(recent[:, suffix], cell, cells)  # others: dump row r*p
    head_rows = torch.arange(heads, device=keys.device).unsqueeze(1)
    flat = (target + head_rows * (cells + 1)).reshape(-1)
    dense = unit.new_zeros(heads * (cells + 1), dim).index_copy_(0, flat, unit_suffix.reshape(-1, dim))
    present = unit.new_zeros(heads * (cells + 1)).index_fill_(0, flat, 1.0)
    sums = dense.view(heads, cells + 1, dim)[:, :cells].reshape(heads, r, p, dim).sum(1)
    counts = present.view(heads, cells + 1)[:, :cells].reshape(heads, r, p).sum(1)
    slot = coords.slot
    flat_slot = (slot + head_rows * p).reshape(-1)
    picked = sums.reshape(heads * p, dim).index_select(0, flat_slot).view(heads, n_tokens, dim)
    similarity = picked.mul_(unit).sum(-1)  # in place: picked is a fresh copy
    mean_cos = similarity / counts.gather(1, slot).clamp(min=1)
    score = mean_cos if reverse else -mean_cos
    return score.masked_fill(recent, math.inf)


def _periodic_dot(unit: torch.Tensor, sums: torch.Tensor, offset: int) -> torch.Tensor:
    """``unit[h, t] . sums[h, (t + offset) % p]`` for the pseudo-frames view, where tokens sit in consecutive cells:
    after the first (partial) frame the region is whole frames, so the slot sums broadcast over them and no
    per-token copy of ``sums`` is made. The same products and sums as the general path, element for element.
    ``unit`` (a fresh contiguous tensor of the caller's) is overwritten by the products: no [H, T, D] temporary."""
    heads, n_tokens, dim = unit.shape
    p = sums.shape[1]
    first = min(n_tokens, p - offset)  # the oldest frame holds slots offset .. p-1
    unit[:, :first].mul_(sums[:, offset : offset + first])
    unit[:, first:].view(heads, (n_tokens - first) // p, p, dim).mul_(sums.unsqueeze(1))
    return unit.sum(-1)
