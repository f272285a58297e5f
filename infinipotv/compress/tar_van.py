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

import torch

from .base import Policy, top_indices
from .layout import FrameLayout, frame_coords
from .params import tar_van as params
from .params.tar_van import recent_frames
from .pooling import pool, pooling_kernel
from .scores import tar_scores, van_scores


class TarVanPool(params.TarVanPool, Policy):
    """The tensor code of :class:`.params.tar_van.TarVanPool`."""

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


class TarVan(params.TarVan, TarVanPool):
    """InfiniPot-V's code under the pins of :class:`.params.tar_van.TarVan`."""


class Tar(params.Tar, TarVan):
    """InfiniPot-V's code under the pins of :class:`.params.tar_van.Tar`."""


class TarReversed(params.TarReversed, Tar):
    """InfiniPot-V's code under the pins of :class:`.params.tar_van.TarReversed`."""


class VanPool(params.VanPool, TarVanPool):
    """InfiniPot-V's code under the pins of :class:`.params.tar_van.VanPool`."""


class Van(params.Van, VanPool):
    """InfiniPot-V's code under the pins of :class:`.params.tar_van.Van`."""


class VanReversed(params.VanReversed, Van):
    """InfiniPot-V's code under the pins of :class:`.params.tar_van.VanReversed`."""
