"""Where each token of the compressible region sits in (frame, h, w): the two frame views.

A policy sees the region as ``[H, T]`` tokens whose provenance is :class:`FrameLayout.token_ids`. TaR, the pooling
of VaN and the whole-frame baselines need frames, and after a first pass the kept tokens are no longer a grid (and
differ per head). Two ways to put them back into frames:

- ``pseudo_frames`` (default, faithful to the public code): ignore provenance and cut the region into frames of
  ``p`` tokens. We count from the END: the newest chunk is always whole frames at the end, so the newest (recent)
  frames are real frames and the one partial frame, holding ``T % p`` tokens, is the oldest. Its tokens take the
  last ``T % p`` slots of a frame, as if the frame were front-padded with zeros.
- ``grid_aware`` (ours): each token goes back to its true frame ``id // p`` and slot ``id % p``, so TaR compares
  only the same (h, w) patch across time and pooling sees true spatial/temporal neighbours (zeros where a token was
  evicted).

Both produce a :class:`FrameCoords`: a dense frame index and a slot per token, so every frame-based computation
(TaR, pooling, frame ranking) is written once, vectorised, for both views. Before any compression (ids 0..T-1, T a
multiple of p) the two views are identical.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from .params.tar_van import FRAME_VIEWS


@dataclass(frozen=True, eq=False)
class FrameLayout:
    """Provenance of the region's tokens: ``token_ids`` ``[H, T]`` (each token's global index among the video's
    vision tokens, in stream order) and ``grid`` = (h, w) tokens per frame."""

    token_ids: torch.Tensor
    grid: tuple[int, int]

    def __post_init__(self) -> None:
        if self.token_ids.dim() != 2 or self.token_ids.dtype.is_floating_point:
            raise ValueError(
                f"FrameLayout.token_ids must be an integer tensor [H, T], got {self.token_ids.dtype} "
                f"of shape {tuple(self.token_ids.shape)}"
            )
        if len(self.grid) != 2 or min(self.grid) < 1:
            raise ValueError(f"FrameLayout.grid must be (h, w) with h, w >= 1 tokens, got {self.grid}")

    @property
    def tokens_per_frame(self) -> int:
        """p = h * w."""
        return self.grid[0] * self.grid[1]

    @classmethod
    def fresh(
        cls, n_heads: int, n_tokens: int, grid: tuple[int, int], device: torch.device | str | None = None
    ) -> "FrameLayout":
        """The layout before any compression: ids 0..T-1 in every head."""
        ids = torch.arange(n_tokens, device=device).expand(n_heads, n_tokens)
        return cls(ids, (int(grid[0]), int(grid[1])))


@dataclass(frozen=True, eq=False)
class FrameCoords:
    """Frame coordinates of the region under one frame view.

    ``frame`` ``[H, T]``: dense frame index in ``0..n_grid_frames-1`` (oldest first); ``slot`` ``[H, T]``: position
    inside the frame (row, col = divmod(slot, w)); ``n_frames``: f, the frames the region is worth, ceil(T / p), the
    quantity r is derived from (the same for both views, so r * p never exceeds what the memory can hold).
    ``offset``: in the pseudo-frames view token t of every head sits in cell ``t + offset`` (a regular layout that
    computations may use instead of the per-token indices); None in the grid-aware view.
    """

    frame: torch.Tensor
    slot: torch.Tensor
    n_grid_frames: int
    n_frames: int
    grid: tuple[int, int]
    offset: int | None = None

    @property
    def tokens_per_frame(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def cell(self) -> torch.Tensor:
        """``[H, T]`` flat index of each token in the dense ``[n_grid_frames, h, w]`` grid."""
        return self.frame * self.tokens_per_frame + self.slot

    def recent(self, r: int) -> torch.Tensor:
        """``[H, T]`` bool: the token belongs to one of the r newest frames (the newest chunk is whole at the end
        of every head, so the newest frames are the last ones of the dense grid)."""
        if self.offset is not None:  # the same frames in every head: compare one row, expand it
            return (self.frame[0] >= self.n_grid_frames - r).expand_as(self.frame)
        return self.frame >= self.n_grid_frames - r

    def to_grid(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token ``values`` ``[H, T]`` placed in the dense grid ``[H, n_grid_frames, p]``, zeros where no token.

        A plain scatter: cells are unique per head, so unlike scatter-add it is deterministic on GPU too."""
        heads = values.shape[0]
        dense = values.new_zeros(heads, self.n_grid_frames * self.tokens_per_frame)
        return dense.scatter_(1, self.cell, values).view(heads, self.n_grid_frames, self.tokens_per_frame)


@functools.lru_cache(maxsize=16)
def _pseudo_frames(n_tokens: int, grid: tuple[int, int], heads: int, device: torch.device) -> FrameCoords:
    """The pseudo-frames view depends on the region's length alone: made once for every layer of a pass (cached;
    the coordinates are read, never written). Token t sits in cell t + pad: frame (t + pad) // p, slot (t + pad) %
    p, the same in every head, built for [T] by repeating aranges (no integer division) and expanded over the heads
    as a view."""
    p = grid[0] * grid[1]
    n_frames = math.ceil(n_tokens / p)
    pad = n_frames * p - n_tokens
    frame = torch.arange(n_frames, device=device).repeat_interleave(p)[pad:]
    slot = torch.arange(p, device=device).repeat(n_frames)[pad:]
    return FrameCoords(
        frame.expand(heads, n_tokens), slot.expand(heads, n_tokens), n_frames, n_frames, grid, offset=pad
    )


def frame_coords(layout: FrameLayout, frame_view: str, n_tokens: int) -> FrameCoords:
    """Place the region's ``n_tokens`` tokens in frames under ``frame_view`` (see the module docstring)."""
    if frame_view == "pseudo_frames":
        return _pseudo_frames(n_tokens, tuple(layout.grid), layout.token_ids.shape[0], layout.token_ids.device)
    if frame_view == "grid_aware":
        p = layout.tokens_per_frame
        ids = layout.token_ids.long()
        true_frame = ids // p
        frame = true_frame - int(true_frame.min())
        return FrameCoords(frame, ids % p, int(frame.max()) + 1, math.ceil(n_tokens / p), layout.grid)
    raise ValueError(f"frame_view={frame_view!r} is unknown; use one of {', '.join(FRAME_VIEWS)}")
