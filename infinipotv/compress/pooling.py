"""Spatio-temporal average pooling of the VaN map before top-k.

Pooling turns "keep the tokens with the largest value norm" into "keep the tokens in neighbourhoods of large value
norm", so kept tokens come in spatially/temporally coherent patches rather than isolated outliers. Conventions
(spec, "Scores"): average, stride 1, "same" zero padding with the zeros counted (tokens at the borders are damped),
kernel clipped to the grid dimension and made odd (so "same" stays symmetric). Pooling runs on the dense
``[frames, h, w]`` grid of a :class:`FrameCoords` (zeros where the view has no token), then reads back each
token's cell.

Which kernel a layer gets:
- ``layer_quartile`` (the public code, exactly): layer group = layer // max(1, n_layers // 4) (the public code
  indexes past its 4 kernels when n_layers % 4 != 0; those last layers get the last kernel, none): 3D kernel 7 over
  (frame, h, w); 2D kernel 5 inside each frame; 1D kernel 3 over the token sequence; no pooling. Its clipping: the 2D
  and 3D kernels are a cube (square) of side min(size, frames, h, w), the frame count counting for 2D too, made odd
  by subtracting 1, and no pooling when that side is below 2; 1D uses the plain kernel.
- ``layer_quartile_axes`` (ours): 4 equal groups, group = layer * 4 // n_layers, and each side of the kernel clipped
  to its own extent and made odd (a small grid is still pooled along its longer axes).
- ``cv`` (paper, with our per-axis clipping): CV = std / mean of the layer's raw VaN scores (all heads and tokens,
  population std). Our reading of the thresholds tau1 > tau2 > tau3: CV >= tau1 -> 3D 7, >= tau2 -> 2D 5,
  >= tau3 -> 1D 3, below -> none. A high CV means a few tokens dominate the value norms; a wider kernel then keeps
  their neighbourhoods too instead of a handful of isolated outliers. The paper does not publish the thresholds:
  the defaults (1.0, 0.6, 0.3) are config values with no claim of fidelity.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layout import FrameCoords
from .params.tar_van import POOLINGS

# (mode, kernel) from the widest to none; the layer_quartile variants walk it by layer group, cv by threshold.
KERNELS: tuple[tuple[str, int], ...] = (("3d", 7), ("2d", 5), ("1d", 3), ("none", 1))
CLIPS = ("cube", "axes")  # the public code's clipping of the 2D/3D kernels, and ours


def odd_kernel(size: int, extent: int) -> int:
    """``size`` clipped to ``extent`` and made odd (rounded down), at least 1."""
    k = min(size, extent)
    return max(1, k if k % 2 else k - 1)


def coefficient_of_variation(scores: torch.Tensor) -> float:
    """std / mean over every head and token; 0 for an all-zero map (nothing to smooth)."""
    mean = scores.mean()
    if mean <= 0:
        return 0.0
    return float(scores.std(correction=0) / mean)


def cube_side(size: int, n_frames: int, h: int, w: int) -> int:
    """The public code's kernel side for 2D and 3D pooling: min(size, frames, h, w), made odd by subtracting 1;
    0 (no pooling) when that is below 2."""
    side = min(size, n_frames, h, w)
    side -= 1 - side % 2
    return side if side >= 2 else 0


def pooling_kernel(
    pooling: str, layer: int, n_layers: int, van: torch.Tensor, cv_thresholds: tuple[float, float, float]
) -> tuple[str, int, str]:
    """The (mode, kernel size, clipping) this layer's VaN map is pooled with."""
    if pooling == "none":
        return (*KERNELS[-1], "axes")
    if pooling == "layer_quartile":
        return (*KERNELS[min(layer // max(1, n_layers // 4), len(KERNELS) - 1)], "cube")
    if pooling == "layer_quartile_axes":
        return (*KERNELS[layer * 4 // n_layers], "axes")
    if pooling == "cv":
        cv = coefficient_of_variation(van)
        passed = sum(cv >= tau for tau in cv_thresholds)
        return (*KERNELS[len(cv_thresholds) - passed], "axes")
    raise ValueError(f"pooling={pooling!r} is unknown; use one of {', '.join(POOLINGS)}")


def _kernel(mode: str, size: int, clip: str, n_grid: int, h: int, w: int) -> tuple[int, int, int]:
    """The 3D kernel (frames, h, w) of a 2D or 3D pooling; (1, 1, 1) means none."""
    if clip == "cube":
        side = cube_side(size, n_grid, h, w)
        if not side:
            return (1, 1, 1)
        return (side if mode == "3d" else 1, side, side)
    kf = odd_kernel(size, n_grid) if mode == "3d" else 1
    return (kf, odd_kernel(size, h), odd_kernel(size, w))


def pool(scores: torch.Tensor, coords: FrameCoords, mode: str, size: int, clip: str = "axes") -> torch.Tensor:
    """Average-pool ``scores`` ``[H, T]`` over the dense grid of ``coords``; returns ``[H, T]``."""
    if clip not in CLIPS:
        raise ValueError(f"clip={clip!r} is unknown; use one of {', '.join(CLIPS)}")
    if mode == "none":
        return scores
    heads = scores.shape[0]
    h, w = coords.grid
    n_grid = coords.n_grid_frames
    if coords.offset is not None:  # pseudo frames: token t sits in cell t + offset, a plain shifted copy
        dense = scores.new_zeros(heads, n_grid * coords.tokens_per_frame)
        dense[:, coords.offset :] = scores
    else:
        dense = coords.to_grid(scores).view(heads, -1)
    if mode == "1d":
        k = size if clip == "cube" else odd_kernel(size, dense.shape[1])
        pooled = F.avg_pool1d(dense[:, None], k, stride=1, padding=k // 2, count_include_pad=True)
    elif mode in ("2d", "3d"):
        kernel = _kernel(mode, size, clip, n_grid, h, w)
        if kernel == (1, 1, 1):
            return scores
        grid = dense.view(heads, n_grid, h, w)
        pooled = F.avg_pool3d(
            grid[:, None], kernel, stride=1, padding=tuple(k // 2 for k in kernel), count_include_pad=True
        )
    else:
        raise ValueError(f"pooling mode {mode!r} is unknown; use one of {', '.join(m for m, _ in KERNELS)}")
    pooled = pooled.reshape(heads, -1)
    return pooled[:, coords.offset :] if coords.offset is not None else pooled.gather(1, coords.cell)
