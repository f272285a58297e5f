"""StreamingVLM's parameters (its tensor code: :mod:`infinipotv.compress.streamingvlm`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import PolicyParams, check_choice, register

POS_MODES = ("shrink", "original")


@register("streamingvlm", "infinipotv.compress.streamingvlm:StreamingVLM")
@dataclass(frozen=True)
class StreamingVLM(PolicyParams):
    """StreamingVLM's inference cache (Xu et al., "StreamingVLM: Real-Time Understanding for Infinite Video
    Streams", 2025; code github.com/mit-han-lab/streaming-vlm at a940d8c).

    **A baseline, not StreamingVLM.** Its results come from its own fine-tuned checkpoint
    (``mit-han-lab/StreamingVLM``, trained for this cache); without that checkpoint, as here on every model, this is
    the inference policy only: an attention sink (the system prefix), the most recent ``|M| // p`` whole frames of
    vision, evicted before every chunk as upstream does (the chunk's forward reads the window, itself included: the
    video memory never holds more than |M|), and contiguous positions (``pos_mode="shrink"``,
    upstream's default): after each eviction the survivors move to the positions the model's rule gives
    a video made of them alone, right after the prefix (1-D RoPE: contiguous; M-RoPE: the (t, h, w) of a video
    that began at the oldest survivor), and the next chunk and the question continue from there (the question by
    the model's rule for text after a video). Query-agnostic; no attention weights.

    Departures (docs/peers.md): the sink is the system prefix and there is no text window, because the harness
    commits no other text (questions and answers are transient; upstream's 20-token commentary per chunk is not
    generated); the vision window is counted in frames of the memory budget |M| (upstream: 16 one-second chunks),
    so every method holds the same accelerator tokens; the held frames are numbered as one video that began at the
    oldest survivor (upstream numbers each one-second chunk as its own video block, between text); upstream caches
    keys before RoPE and rotates the whole cache at every forward, here keys stay as their forward rotated them and
    are rotated on read by each token's shift since, per (t, h, w) section on Qwen2-VL and Qwen2.5-VL (the same keys
    up to two roundings whatever the evictions, measured in docs/peers.md; exact in fp32); under KIVI
    (``quant=int*``) the window is KIVI-coded as the forward rotated it, dequantized then rotated on read.

    Parameters:
        pos_mode: ``shrink`` (contiguous positions, upstream's default) or ``original`` (positions as streamed).
    """

    streaming: ClassVar[str] = "streamingvlm"
    head_shared = True  # the newest whole frames
    pos_mode: str = "shrink"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("pos_mode", self.pos_mode, POS_MODES)
