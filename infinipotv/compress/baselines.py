"""Token-level baselines: no eviction, positional selections, and simple data-dependent scores."""

from __future__ import annotations

import math

import torch

from .base import Policy
from .layout import FrameLayout
from .params import baselines as params

_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # odd 64-bit constants (splitmix64)


class Full(params.Full, Policy):
    """The tensor code of :class:`.params.baselines.Full`."""

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        return torch.arange(n_keep, device=keys.device).expand(keys.shape[0], n_keep)


class UniformTokens(params.UniformTokens, Policy):
    """The tensor code of :class:`.params.baselines.UniformTokens`."""

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        n_tokens = keys.shape[1]
        step = torch.arange(n_keep, device=keys.device)
        index = step * (n_tokens - 1) // (n_keep - 1) if n_keep > 1 else step + n_tokens - 1
        return index.expand(keys.shape[0], n_keep)


class Swa(params.Swa, Policy):
    """The tensor code of :class:`.params.baselines.Swa`."""

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        score = torch.arange(keys.shape[1], device=keys.device, dtype=torch.float64)
        score[: self.n_sink] = math.inf
        return score.expand(keys.shape[0], -1)


class Random(params.Random, Policy):
    """The tensor code of :class:`.params.baselines.Random`."""

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        heads, n_tokens = keys.shape[:2]
        newest = int(layout.token_ids.max())
        mixed = (self.seed * _MIX[0] + layer * _MIX[1] + n_tokens * _MIX[2] + newest) % (2**63)
        generator = torch.Generator().manual_seed(mixed)
        return torch.rand(heads, n_tokens, generator=generator).to(keys.device)


class Knorm(params.Knorm, Policy):
    """The tensor code of :class:`.params.baselines.Knorm`."""

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        return -keys.norm(dim=-1)
