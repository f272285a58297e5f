"""StreamingVLM's inference cache (mit-han-lab/streaming-vlm@a940d8c), as tensor functions its streaming method
calls: an attention sink, the most recent vision, and contiguous positions.

Upstream (``inference.py:L141-169``) keeps the system/previous-text sink, a text window and the last W one-second
video chunks, evicting at every chunk; with ``pos_mode="shrink"`` (``streaming_args.py:L5-7``) it caches keys
before RoPE and rotates the whole pruned cache at positions ``0..len-1`` at every step
(``qwen2_5/model_forward.py:L101-110``), so the survivors sit at contiguous positions. Here the sink is the system
prefix (the harness commits no other text: questions and answers are transient, and no commentary is generated),
the window is counted in frames, and the stored keys, rotated at their old positions, are rotated again by the
difference (exact for 1-D RoPE), which is what rotating pre-RoPE keys at the new positions gives.
"""

from __future__ import annotations

import torch


def window_keep(frame: torch.Tensor, window: int) -> torch.Tensor:
    """Indices ``[n]`` of the tokens whose frame (``frame`` ``[T]``, non-decreasing in stream order) is among the
    last ``window`` distinct frames present."""
    if window < 1:
        raise ValueError(f"window={window} must be >= 1 frame")
    distinct = torch.unique_consecutive(frame)
    if len(distinct) <= window:
        return torch.arange(frame.shape[0], device=frame.device)
    first_kept = distinct[-window]
    return torch.nonzero(frame >= first_kept).flatten()


def shrink_positions(start: int, n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``pos_mode="shrink"``: the survivors' positions, ``start .. start + n - 1`` in stream order."""
    return torch.arange(start, start + n, device=device)
