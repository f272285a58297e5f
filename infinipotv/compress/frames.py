"""Whole-frame policies: the paper's "Uniform Select" and the frame-level TaR ablation.

Both rank frames, then keep tokens frame by frame in rank order until |C| is reached: when |C| is not a multiple of
p, the last frame taken is truncated to its first slots (raster order). A frame is a frame of the policy's
``frame_view`` (pseudo-frames by default, see :mod:`.layout`); a frame with fewer tokens than p (the oldest partial
pseudo-frame, or a frame thinned by earlier passes in the grid-aware view) leaves room that the next ranked frame
fills.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .base import Policy, check_choice, check_range, register, top_indices
from .layout import FRAME_VIEWS, FrameCoords, FrameLayout, frame_coords
from .scores import check_tar_share, recent_frames, tar_scores


def frame_rank_scores(coords: FrameCoords, frame_rank: torch.Tensor) -> torch.Tensor:
    """Token scores ``[H, T]`` that order tokens by (rank of their frame, slot): ``frame_rank`` ``[H, F]``, 0 =
    kept first. float64 keeps rank * p + slot exact for any stream length."""
    rank = frame_rank.gather(1, coords.frame)
    return -(rank * coords.tokens_per_frame + coords.slot).double()


@dataclass(frozen=True)
class FramePolicy(Policy):
    """A policy that works on whole frames of a frame view."""

    frame_view: str = "pseudo_frames"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("frame_view", self.frame_view, FRAME_VIEWS)


@register("uniform_frames")
@dataclass(frozen=True)
class UniformFrames(FramePolicy):
    """Whole frames evenly spaced over the region: ceil(|C| / p) of them, oldest and newest included, newest ranked
    first (the paper's "Uniform Select"). Paper: InfiniPot-V (NeurIPS 2025, arXiv:2506.15745), budget and ablation
    tables.

    Parameters:
        frame_view: ``pseudo_frames`` or ``grid_aware`` (see :mod:`.layout`).
    """

    head_shared = True

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        coords = frame_coords(layout, self.frame_view, keys.shape[1])
        n_grid = coords.n_grid_frames
        n_frames = math.ceil(n_keep / coords.tokens_per_frame)
        picked = torch.zeros(n_grid, dtype=torch.bool, device=keys.device)
        if n_frames == 1:
            picked[-1] = True
        else:
            picked[torch.arange(n_frames, device=keys.device) * (n_grid - 1) // (n_frames - 1)] = True
        newest_first = torch.arange(n_grid - 1, -1, -1, device=keys.device)
        frame_rank = (~picked).long() * n_grid + newest_first  # picked frames first, then the rest, newest first
        return top_indices(frame_rank_scores(coords, frame_rank.expand(keys.shape[0], -1)), n_keep)


@register("tar_frame")
@dataclass(frozen=True)
class TarFrame(FramePolicy):
    """TaR at frame level: the r recent frames, then whole past frames by their mean TaR score. Paper: InfiniPot-V
    (NeurIPS 2025, arXiv:2506.15745), ablation table ("TaR frame-level").

    Parameters:
        r_ratio: recent frames r = max(1, floor(r_ratio * frames)), always kept.
        frame_view: ``pseudo_frames`` or ``grid_aware``.
    """

    r_ratio: float = 0.125

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("r_ratio", self.r_ratio, 0.0, 1.0, low_open=True)

    def validate(self, n_keep: int, tokens_per_frame: int, n_tokens: int) -> None:
        super().validate(n_keep, tokens_per_frame, n_tokens)
        r = recent_frames(self.r_ratio, math.ceil(n_tokens / tokens_per_frame))
        check_tar_share(n_keep, r, tokens_per_frame, 1.0, self.r_ratio)

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        coords = frame_coords(layout, self.frame_view, keys.shape[1])
        r = recent_frames(self.r_ratio, coords.n_frames)
        check_tar_share(n_keep, r, coords.tokens_per_frame, 1.0, self.r_ratio)
        token_score = tar_scores(keys, coords, r)  # recent frames: +inf, so their mean is +inf too
        sums = coords.to_grid(token_score).sum(-1)
        counts = coords.to_grid(torch.ones_like(token_score)).sum(-1)
        frame_score = (sums / counts).masked_fill(counts == 0, -math.inf)
        order = frame_score.argsort(dim=1, descending=True, stable=True)
        positions = torch.arange(coords.n_grid_frames, device=keys.device).expand_as(order)
        frame_rank = torch.empty_like(order).scatter_(1, order, positions)  # inverse permutation of the ranking
        return top_indices(frame_rank_scores(coords, frame_rank), n_keep)
