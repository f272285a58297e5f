"""Whole-frame policies: the paper's "Uniform Select" and the frame-level TaR ablation.

Both rank frames, then keep tokens frame by frame in rank order until |C| is reached: when |C| is not a multiple of
p, the last frame taken is truncated to its first slots (raster order). A frame is a frame of the policy's
``frame_view`` (pseudo-frames by default, see :mod:`.layout`); a frame with fewer tokens than p (the oldest partial
pseudo-frame, or a frame thinned by earlier passes in the grid-aware view) leaves room that the next ranked frame
fills.
"""

from __future__ import annotations

import math

import torch

from .base import Policy, top_indices
from .layout import FrameCoords, FrameLayout, frame_coords
from .params import frames as params
from .params.tar_van import check_tar_share, recent_frames
from .scores import tar_scores


def frame_rank_scores(coords: FrameCoords, frame_rank: torch.Tensor) -> torch.Tensor:
    """Token scores ``[H, T]`` that order tokens by (rank of their frame, slot): ``frame_rank`` ``[H, F]``, 0 =
    kept first. float64 keeps rank * p + slot exact for any stream length."""
    rank = frame_rank.gather(1, coords.frame)
    return -(rank * coords.tokens_per_frame + coords.slot).double()


class UniformFrames(params.UniformFrames, Policy):
    """The tensor code of :class:`.params.frames.UniformFrames`."""

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


class TarFrame(params.TarFrame, Policy):
    """The tensor code of :class:`.params.frames.TarFrame`."""

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
