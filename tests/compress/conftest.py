"""Hand-made regions for the compression tests: fresh (ids 0..T-1) and after a pass (ids differ per head)."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from infinipotv.compress import FrameLayout

Region = tuple[torch.Tensor, torch.Tensor, FrameLayout]


def _region(
    heads: int = 3,
    grid: tuple[int, int] = (3, 4),
    frames: int = 8,
    old_frames: int = 0,
    keep_old: int = 0,
    dim: int = 8,
    seed: int = 0,
) -> Region:
    """``frames`` whole newest frames, after ``keep_old`` tokens kept per head (a sorted random subset per head)
    out of ``old_frames`` older frames. Keys/values are random normals."""
    p = grid[0] * grid[1]
    generator = torch.Generator().manual_seed(seed)
    old = [torch.randperm(old_frames * p, generator=generator)[:keep_old].sort().values for _ in range(heads)]
    new = torch.arange(old_frames * p, (old_frames + frames) * p).expand(heads, -1)
    ids = torch.cat([torch.stack(old), new], dim=1) if keep_old else new.clone()
    n_tokens = ids.shape[1]
    keys = torch.randn(heads, n_tokens, dim, generator=generator)
    values = torch.randn(heads, n_tokens, dim, generator=generator)
    return keys, values, FrameLayout(ids, grid)


@pytest.fixture
def region() -> Callable[..., Region]:
    return _region
