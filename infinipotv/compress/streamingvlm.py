"""StreamingVLM's inference cache (mit-han-lab/streaming-vlm@a940d8c), as tensor functions its streaming method
calls: an attention sink, the most recent vision, and contiguous positions.

Upstream (``inference.py:L141-169``) keeps the system/previous-text sink, a text window and the last W one-second
video chunks, evicting before every chunk; with ``pos_mode="shrink"`` (``streaming_args.py:L5-7``) it caches keys
before RoPE and rotates the whole pruned cache at the positions the model's rule gives the pruned sequence at every
step (``qwen2_5/model_forward.py:L101-110``, ``pos_emb.py:L44-158``), so the survivors sit at contiguous positions.
Here the sink is the system prefix (the harness commits no other text: questions and answers are transient, and no
commentary is generated), the window is counted in frames, and the stored keys stay as the forward rotated them,
each with its shift to its position now (per (t, h, w) section on M-RoPE), rotated by it as they are read
(:class:`~infinipotv.kv.rotary.RotaryStore`): what rotating pre-RoPE keys at the new positions gives, rounded twice
(stored, read) however many evictions a key survives.
"""

from __future__ import annotations

import torch

from .base import Policy
from .layout import FrameLayout
from .params import streamingvlm as params


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


class StreamingVLM(params.StreamingVLM, Policy):
    """The tensor code of :class:`.params.streamingvlm.StreamingVLM`."""

    def keep(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, n_keep: int, layer: int, n_layers: int
    ) -> torch.Tensor:
        """The most recent ``n_keep`` tokens, the same in every head: the window at token granularity (the
        streaming method keeps whole frames, :func:`window_keep`)."""
        n_tokens = keys.shape[1]
        return torch.arange(n_tokens - n_keep, n_tokens, device=keys.device).expand(keys.shape[0], n_keep)
