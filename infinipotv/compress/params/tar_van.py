"""InfiniPot-V's parameters (TaR + VaN + pooling) and every ablation that is a setting of them; the arithmetic of
TaR's share that the checks and the tensor code both read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .base import PolicyParams, check_choice, check_range, fixed, register

#: How a policy puts the region back into frames (:mod:`infinipotv.compress.layout`).
FRAME_VIEWS = ("pseudo_frames", "grid_aware")
#: How the VaN map is smoothed (:mod:`infinipotv.compress.pooling`).
POOLINGS = ("none", "layer_quartile", "layer_quartile_axes", "cv")


def recent_frames(r_ratio: float, n_frames: int) -> int:
    """r = max(1, floor(r_ratio * f)); the 1e-9 absorbs float error such as 0.29 * 100 = 28.999999999999996."""
    return max(1, math.floor(r_ratio * n_frames + 1e-9))


def tar_share(n_keep: int, alpha: float) -> int:
    """n_tar = |C| - round((1 - alpha) * |C|): the tokens TaR picks; the rest of |C| goes to VaN."""
    return n_keep - round((1 - alpha) * n_keep)


def check_tar_share(n_tar: int, r: int, p: int, alpha: float, r_ratio: float) -> None:
    """TaR must have room for its r recent frames (always kept) inside its share n_tar."""
    if r * p > n_tar:
        raise ValueError(
            f"alpha={alpha} leaves n_tar={n_tar} tokens for TaR but r_ratio={r_ratio} keeps r={r} recent frames "
            f"of p={p} tokens ({r * p}); raise alpha (or budget, c_ratio) or lower r_ratio"
        )


@register("tar_van_pool", "infinipotv.compress.tar_van:TarVanPool")
@dataclass(frozen=True)
class TarVanPool(PolicyParams):
    """InfiniPot-V: the r recent frames and the least temporally redundant keys (TaR), then the largest value norms
    (VaN) of the pooled VaN map, until |C| tokens per head.

    Paper: InfiniPot-V (NeurIPS 2025, arXiv:2506.15745), Sec. 3.

    Parameters:
        alpha: TaR's share of |C| (n_tar = |C| - round((1 - alpha) |C|)); 0 = VaN alone, 1 = TaR alone.
        r_ratio: recent frames r = max(1, floor(r_ratio * frames)), always kept (paper 0.125, public code 0.25).
        pooling: how the VaN map is smoothed: ``layer_quartile`` (the public code's rule), ``layer_quartile_axes``
            (ours: per-axis clipping), ``cv`` (the paper's, thresholds unpublished) or ``none``.
        cv_thresholds: tau1 > tau2 > tau3 for ``pooling=cv`` (no claim of fidelity).
        frame_view: ``pseudo_frames`` (the public code) or ``grid_aware`` (ours), see :mod:`.layout`.
    """

    reads_any_float: ClassVar[bool] = True  # tar_scores and van_scores compute in fp32 from any float dtype

    alpha: float = 0.5
    r_ratio: float = 0.125
    pooling: str = "layer_quartile"
    cv_thresholds: tuple[float, float, float] = (1.0, 0.6, 0.3)  # tau1 > tau2 > tau3; no claim of fidelity
    frame_view: str = "pseudo_frames"
    reverse: bool = fixed(False)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("alpha", self.alpha, 0.0, 1.0)
        check_range("r_ratio", self.r_ratio, 0.0, 1.0, low_open=True)
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("frame_view", self.frame_view, FRAME_VIEWS)
        taus = self.cv_thresholds
        if len(taus) != 3 or not taus[0] > taus[1] > taus[2] >= 0:
            raise ValueError(f"cv_thresholds={taus} must be three values tau1 > tau2 > tau3 >= 0, e.g. (1.0, 0.6, 0.3)")

    def validate(self, n_keep: int, tokens_per_frame: int, n_tokens: int) -> None:
        super().validate(n_keep, tokens_per_frame, n_tokens)
        self._check_share(n_keep, tokens_per_frame, math.ceil(n_tokens / tokens_per_frame))

    def _check_share(self, n_keep: int, p: int, n_frames: int) -> int:
        """n_tar for this pass, after checking that it holds TaR's r recent frames."""
        n_tar = tar_share(n_keep, self.alpha)
        if n_tar > 0:
            check_tar_share(n_tar, recent_frames(self.r_ratio, n_frames), p, self.alpha, self.r_ratio)
        return n_tar


@register("tar_van", "infinipotv.compress.tar_van:TarVan")
@dataclass(frozen=True)
class TarVan(TarVanPool):
    """TaR + VaN without pooling (the paper's ablation of pooling). Paper: InfiniPot-V (NeurIPS 2025, arXiv:2506.15745),
    ablation table.

    Parameters: alpha, r_ratio, frame_view (as :class:`TarVanPool`); pins pooling to none.
    """

    pooling: str = fixed("none")
    cv_thresholds: tuple[float, float, float] = fixed((1.0, 0.6, 0.3))


@register("tar", "infinipotv.compress.tar_van:Tar")
@dataclass(frozen=True)
class Tar(TarVan):
    """TaR alone: the r recent frames plus the past tokens least similar to the same patch in the recent frames.
    Paper: InfiniPot-V (NeurIPS 2025, arXiv:2506.15745), ablation table ("TaR").

    Parameters: r_ratio, frame_view (as :class:`TarVanPool`); pins alpha to 1.
    """

    alpha: float = fixed(1.0)


@register("tar_reversed", "infinipotv.compress.tar_van:TarReversed")
@dataclass(frozen=True)
class TarReversed(Tar):
    """Sanity ablation: the recent frames plus the MOST redundant past tokens. Paper: InfiniPot-V (NeurIPS 2025,
    arXiv:2506.15745), ablation table ("TaR reversed").

    Parameters: r_ratio, frame_view (as :class:`Tar`).
    """

    reverse: bool = fixed(True)


@register("van_pool", "infinipotv.compress.tar_van:VanPool")
@dataclass(frozen=True)
class VanPool(TarVanPool):
    """VaN alone, pooled: the tokens in neighbourhoods of large value norm. Paper: InfiniPot-V (NeurIPS 2025,
    arXiv:2506.15745), ablation table ("VaN + pool").

    Parameters: pooling, cv_thresholds, frame_view (as :class:`TarVanPool`); pins alpha to 0.
    """

    alpha: float = fixed(0.0)
    r_ratio: float = fixed(0.125)


@register("van", "infinipotv.compress.tar_van:Van")
@dataclass(frozen=True)
class Van(VanPool):
    """VaN alone: the tokens with the largest value norms, per head. Paper: InfiniPot-V (NeurIPS 2025,
    arXiv:2506.15745), ablation table ("VaN").

    Parameters: none.
    """

    pooling: str = fixed("none")
    cv_thresholds: tuple[float, float, float] = fixed((1.0, 0.6, 0.3))
    frame_view: str = fixed("pseudo_frames")


@register("van_reversed", "infinipotv.compress.tar_van:VanReversed")
@dataclass(frozen=True)
class VanReversed(Van):
    """Sanity ablation: the smallest value norms. Paper: InfiniPot-V (NeurIPS 2025, arXiv:2506.15745), ablation table
    ("VaN reversed").

    Parameters: none.
    """

    reverse: bool = fixed(True)
