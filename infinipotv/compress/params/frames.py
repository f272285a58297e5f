"""The whole-frame policies' parameters: the paper's "Uniform Select" and the frame-level TaR ablation."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import PolicyParams, check_choice, check_range, register
from .tar_van import FRAME_VIEWS, check_tar_share, recent_frames


@dataclass(frozen=True)
class FrameParams(PolicyParams):
    """A policy that works on whole frames of a frame view."""

    frame_view: str = "pseudo_frames"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("frame_view", self.frame_view, FRAME_VIEWS)


@register("uniform_frames", "infinipotv.compress.frames:UniformFrames")
@dataclass(frozen=True)
class UniformFrames(FrameParams):
    """Whole frames evenly spaced over the region: ceil(|C| / p) of them, oldest and newest included, newest ranked
    first (the paper's "Uniform Select"). Paper: InfiniPot-V (NeurIPS 2025, arXiv:2506.15745), budget and ablation
    tables.

    Parameters:
        frame_view: ``pseudo_frames`` or ``grid_aware`` (see :mod:`.layout`).
    """

    head_shared = True


@register("tar_frame", "infinipotv.compress.frames:TarFrame")
@dataclass(frozen=True)
class TarFrame(FrameParams):
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
