"""The glyph code: token ids drawn as black-and-white patches, and read back from decoded video frames.

A frame is an ``h x w`` grid of square patches of ``patch`` pixels; each patch carries one token id. The patch is cut
into a 4 x 4 grid of cells, one bit per cell: white (255) = 1, black (0) = 0, the most significant bit first, row by
row. 16 bits cover SmolLM2's 49,152 ids. Reading takes the mean of each cell over its pixels and channels and
thresholds it at mid-grey, so the code survives what a video codec does to flat black and white blocks (lossless
H.264 exactly; even lossy settings keep every bit at the default patch size). A cell pattern whose id is not in the
vocabulary is not a glyph: reading fails with an error that says so, instead of feeding garbage to the model.
"""

from __future__ import annotations

import numpy as np

CELLS = 4  # cells per patch side
BITS = CELLS * CELLS  # bits per token id
MAX_ID = 2**BITS - 1
DEFAULT_PATCH = 16  # pixels per patch side (4 x 4 pixels per cell)
_WEIGHTS = 1 << np.arange(BITS - 1, -1, -1, dtype=np.int64)  # MSB first, row-major over the cells


class GlyphError(ValueError):
    """Frames that are not glyph frames (wrong size, or a patch that is no token id)."""


def _check_patch(patch: int) -> None:
    if patch < CELLS or patch % CELLS:
        raise GlyphError(f"patch={patch} must be a positive multiple of {CELLS} pixels (e.g. {DEFAULT_PATCH})")


def frame_size(grid: tuple[int, int], patch: int = DEFAULT_PATCH) -> tuple[int, int]:
    """Pixel (height, width) of a frame of ``grid`` = (h, w) glyphs."""
    _check_patch(patch)
    return grid[0] * patch, grid[1] * patch


def encode(ids: np.ndarray, patch: int = DEFAULT_PATCH) -> np.ndarray:
    """Token ids ``[F, h, w]`` -> uint8 RGB frames ``[F, h * patch, w * patch, 3]``."""
    _check_patch(patch)
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 3:
        raise GlyphError(f"ids must be [frames, h, w], got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() > MAX_ID):
        raise GlyphError(f"token ids must lie in [0, {MAX_ID}] to fit {BITS} bits, got [{ids.min()}, {ids.max()}]")
    n, h, w = ids.shape
    bits = (ids[..., None] & _WEIGHTS) > 0  # [F, h, w, 16]
    cells = bits.reshape(n, h, w, CELLS, CELLS).transpose(0, 1, 3, 2, 4)  # [F, h, CELLS, w, CELLS]
    side = patch // CELLS
    pixels = np.repeat(np.repeat(cells.reshape(n, h * CELLS, w * CELLS), side, axis=1), side, axis=2)
    return np.repeat((pixels * 255).astype(np.uint8)[..., None], 3, axis=3)


def decode(frames: np.ndarray, patch: int = DEFAULT_PATCH, vocab_size: int = MAX_ID + 1) -> np.ndarray:
    """uint8 RGB frames ``[F, H, W, 3]`` -> token ids ``[F, H / patch, W / patch]``."""
    _check_patch(patch)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise GlyphError(f"frames must be [F, H, W, 3] RGB, got shape {frames.shape}")
    n, height, width, _ = frames.shape
    if height % patch or width % patch:
        raise GlyphError(
            f"a {height}x{width} frame is not a grid of {patch}-pixel glyphs: not a symbolic video "
            f"(write one with infinipotv.models.glyphs.encode, or set the model's patch size)"
        )
    side = patch // CELLS
    h, w = height // patch, width // patch
    cells = frames.reshape(n, h, CELLS, side, w, CELLS, side, 3).mean(axis=(3, 6, 7), dtype=np.float32)
    bits = cells.transpose(0, 1, 3, 2, 4).reshape(n, h, w, BITS) > 127.5
    ids = bits.astype(np.int64) @ _WEIGHTS
    bad = ids >= vocab_size
    if bad.any():
        f, i, j = (int(x[0]) for x in np.nonzero(bad))
        raise GlyphError(
            f"frame {f}, glyph ({i}, {j}) reads as id {int(ids[f, i, j])}, outside the vocabulary of "
            f"{vocab_size}: these frames do not carry the glyph code"
        )
    return ids
