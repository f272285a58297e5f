"""The two token scores of InfiniPot-V (per layer, per KV head; higher = keep), in fp32.

- TaR (temporal-axis redundancy): a past token that looks like the same patch in the r most recent frames is
  redundant, s_TaR(t, s) = -mean over recent t' of cos(K[t, s], K[t', s]). The recent frames are always kept; their
  score is +inf so that any top-k keeps them.
- VaN (value norm): s_VaN = ||V||_2, no normalisation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .layout import FrameCoords

KEY_EPS = 1e-9  # L2 normalisation of keys before the cosine


def recent_frames(r_ratio: float, n_frames: int) -> int:
    """r = max(1, floor(r_ratio * f)); the 1e-9 absorbs float error such as 0.29 * 100 = 28.999999999999996."""
    return max(1, math.floor(r_ratio * n_frames + 1e-9))


def tar_share(n_keep: int, alpha: float) -> int:
    """n_tar = |C| - round((1 - alpha) * |C|): the tokens TaR picks; the rest of |C| goes to VaN."""
    return n_keep - round((1 - alpha) * n_keep)


def check_tar_share(n_tar: int, r: int, p: int, alpha: float, r_ratio: float) -> None:
    """TaR must have room for its r recent frames (always kept) inside its share n_tar."""
    if r * p > n_tar:
        raise ValueError(
            f"alpha={alpha} leaves n_tar={n_tar} tokens for TaR but r_ratio={r_ratio} keeps r={r} recent frames "
            f"of p={p} tokens ({r * p}); raise alpha (or budget, c_ratio) or lower r_ratio"
        )


def van_scores(values: torch.Tensor) -> torch.Tensor:
    """``[H, T, D]`` -> ``[H, T]`` value norms."""
    return values.float().norm(dim=-1)


def tar_scores(keys: torch.Tensor, coords: FrameCoords, r: int, reverse: bool = False) -> torch.Tensor:
    """``[H, T]`` s_TaR under ``coords``; the r recent frames get +inf (always kept), also when ``reverse``
    (which ranks the past tokens the other way round: most redundant first).

    The mean cosine over recent frames is one dot product: Khat[t, s] . sum_t' Khat[t', s] / count(s), so no
    [T, r] similarity matrix is ever built. The recent keys are placed in a dense [r, p] grid by a plain scatter
    (cells are unique; deterministic on GPU, unlike scatter-add) and summed over frames. A slot with no recent
    token (possible in the grid-aware view after evictions) counts as cosine 0.
    """
    heads, _, dim = keys.shape
    p = coords.tokens_per_frame
    unit = F.normalize(keys.float(), dim=-1, eps=KEY_EPS)
    recent = coords.recent(r)
    oldest_recent = coords.n_grid_frames - r
    target = torch.where(recent, (coords.frame - oldest_recent) * p + coords.slot, r * p)  # others: dump row r*p
    dense = unit.new_zeros(heads, r * p + 1, dim).scatter_(1, target[..., None].expand(-1, -1, dim), unit)
    present = unit.new_zeros(heads, r * p + 1).scatter_(1, target, 1.0)
    sums = dense[:, : r * p].view(heads, r, p, dim).sum(1)
    counts = present[:, : r * p].view(heads, r, p).sum(1)
    slot = coords.slot
    similarity = (unit * sums.gather(1, slot[..., None].expand(-1, -1, dim))).sum(-1)
    mean_cos = similarity / counts.gather(1, slot).clamp(min=1)
    score = mean_cos if reverse else -mean_cos
    return score.masked_fill(recent, math.inf)
