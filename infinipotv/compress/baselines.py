"""Token-level baselines: no eviction, positional selections, and simple data-dependent scores."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .base import Policy, register
from .layout import FrameLayout

_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # odd 64-bit constants (splitmix64)


@register("full")
@dataclass(frozen=True)
class Full(Policy):
    """No eviction: the reference with the whole video in the cache ("Full KV" in every table).

    Parameters: none.
    """

    evicts = False
    head_shared = True

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


@register("uniform_tokens")
@dataclass(frozen=True)
class UniformTokens(Policy):
    """Every k-th token: |C| indices evenly spaced over the region, oldest and newest included (the public InfiniPot-V
    code's "uniform" baseline).

    Parameters: none.
    """

    head_shared = True

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


@register("swa")
@dataclass(frozen=True)
class Swa(Policy):
    """A sliding window with attention sinks: the first ``n_sink`` vision tokens of the region plus the most recent.
    Paper: StreamingLLM (Xiao et al., ICLR 2024, arXiv:2309.17453).

    Parameters:
        n_sink: vision tokens at the start of the region always kept.
    """

    head_shared = True
    n_sink: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_sink < 0:
            raise ValueError(f"n_sink={self.n_sink} must be >= 0 (e.g. n_sink=4)")

    def validate(self, n_keep: int, tokens_per_frame: int, n_tokens: int) -> None:
        super().validate(n_keep, tokens_per_frame, n_tokens)
        if self.n_sink >= n_keep:
            raise ValueError(f"n_sink={self.n_sink} leaves no room for recent tokens in |C|={n_keep}; lower n_sink")

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        score = torch.arange(keys.shape[1], device=keys.device, dtype=torch.float64)
        score[: self.n_sink] = math.inf
        return score.expand(keys.shape[0], -1)


@register("random")
@dataclass(frozen=True)
class Random(Policy):
    """Uniformly random tokens per head (a floor every method should beat). The generator is seeded from (seed,
    layer, T, newest token id), so the same stream always gives the same cache, whatever else ran before, and
    successive passes draw afresh.

    Parameters:
        seed: the generator's seed.
    """

    seed: int = 0

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        heads, n_tokens = keys.shape[:2]
        newest = int(layout.token_ids.max())
        mixed = (self.seed * _MIX[0] + layer * _MIX[1] + n_tokens * _MIX[2] + newest) % (2**63)
        generator = torch.Generator().manual_seed(mixed)
        return torch.rand(heads, n_tokens, generator=generator).to(keys.device)


@register("knorm")
@dataclass(frozen=True)
class Knorm(Policy):
    """The tokens with the LOWEST key L2 norm (low-norm keys draw the most attention). Paper: "A Simple and
    Effective L2 Norm-Based Strategy for KV Cache Compression" (Devoto et al., EMNLP 2024, arXiv:2406.11430).

    Parameters: none.
    """

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        return -keys.norm(dim=-1)
