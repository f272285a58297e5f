"""The token-level baselines' parameters: no eviction, positional selections, and simple data-dependent scores."""

from __future__ import annotations

from dataclasses import dataclass

from .base import PolicyParams, register


@register("full", "infinipotv.compress.baselines:Full")
@dataclass(frozen=True)
class Full(PolicyParams):
    """No eviction: the reference with the whole video in the cache ("Full KV" in every table).

    Parameters: none.
    """

    evicts = False
    head_shared = True


@register("uniform_tokens", "infinipotv.compress.baselines:UniformTokens")
@dataclass(frozen=True)
class UniformTokens(PolicyParams):
    """Every k-th token: |C| indices evenly spaced over the region, oldest and newest included (the public InfiniPot-V
    code's "uniform" baseline).

    Parameters: none.
    """

    head_shared = True


@register("swa", "infinipotv.compress.baselines:Swa")
@dataclass(frozen=True)
class Swa(PolicyParams):
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


@register("random", "infinipotv.compress.baselines:Random")
@dataclass(frozen=True)
class Random(PolicyParams):
    """Uniformly random tokens per head (a floor every method should beat). The generator is seeded from (seed,
    layer, T, newest token id), so the same stream always gives the same cache, whatever else ran before, and
    successive passes draw afresh.

    Parameters:
        seed: the generator's seed.
    """

    seed: int = 0


@register("knorm", "infinipotv.compress.baselines:Knorm")
@dataclass(frozen=True)
class Knorm(PolicyParams):
    """The tokens with the LOWEST key L2 norm (low-norm keys draw the most attention). Paper: "A Simple and
    Effective L2 Norm-Based Strategy for KV Cache Compression" (Devoto et al., EMNLP 2024, arXiv:2406.11430).

    Parameters: none.
    """
