"""InfiniPot-V's combination of TaR and VaN, and every ablation that is a setting of it.

One implementation (:class:`TarVanPool`); the ablations are registrations that pin some parameters (kvpress style):
tar = alpha 1, van = alpha 0, van_pool = alpha 0 with pooling, tar_van = alpha 0.5 without pooling, and the
reversed sanity checks keep the lowest scores instead of the highest.

The combination (spec, "Combination"): n_tar = |C| - round((1 - alpha) |C|). TaR keeps the r recent frames plus the
top (n_tar - r p) past tokens by s_TaR. Those tokens are forced into the (pooled) VaN map (the spec's "max + 1"; we
use +inf, the same ranking without float rounding), and the top |C| of that map are kept. alpha = 0 skips TaR
entirely (n_tar = 0), alpha = 1 keeps exactly TaR's picks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Policy, check_choice, check_range, fixed, register, top_indices
from .layout import FRAME_VIEWS, FrameLayout, frame_coords
from .pooling import POOLINGS, pool, pooling_kernel
from .scores import check_tar_share, recent_frames, tar_scores, tar_share, van_scores


@register("tar_van_pool")
@dataclass(frozen=True)
class TarVanPool(Policy):
    """InfiniPot-V: TaR (temporal redundancy of keys) + VaN (value norm), VaN pooled."""

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
        n_tar = self._check_share(n_keep, coords.tokens_per_frame, coords.n_frames)
        if n_tar > 0:
            r = recent_frames(self.r_ratio, coords.n_frames)
            chosen = top_indices(tar_scores(keys, coords, r, self.reverse), n_tar)
            if n_tar == n_keep:
                return chosen
        van = van_scores(values)
        score = pool(van, coords, *pooling_kernel(self.pooling, layer, n_layers, van, self.cv_thresholds))
        if self.reverse:
            score = -score
        if n_tar > 0:
            score = score.scatter(1, chosen, math.inf)
        return top_indices(score, n_keep)


@register("tar_van")
@dataclass(frozen=True)
class TarVan(TarVanPool):
    """TaR + VaN without pooling."""

    pooling: str = fixed("none")
    cv_thresholds: tuple[float, float, float] = fixed((1.0, 0.6, 0.3))


@register("tar")
@dataclass(frozen=True)
class Tar(TarVan):
    """TaR alone: the r recent frames plus the least redundant past tokens."""

    alpha: float = fixed(1.0)


@register("tar_reversed")
@dataclass(frozen=True)
class TarReversed(Tar):
    """Sanity ablation: the recent frames plus the MOST redundant past tokens."""

    reverse: bool = fixed(True)


@register("van_pool")
@dataclass(frozen=True)
class VanPool(TarVanPool):
    """VaN alone, pooled."""

    alpha: float = fixed(0.0)
    r_ratio: float = fixed(0.125)


@register("van")
@dataclass(frozen=True)
class Van(VanPool):
    """VaN alone: the largest value norms."""

    pooling: str = fixed("none")
    cv_thresholds: tuple[float, float, float] = fixed((1.0, 0.6, 0.3))
    frame_view: str = fixed("pseudo_frames")


@register("van_reversed")
@dataclass(frozen=True)
class VanReversed(Van):
    """Sanity ablation: the smallest value norms."""

    reverse: bool = fixed(True)
