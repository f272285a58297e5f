"""Which questions a job runs: explicit ids, a seeded fraction of the videos, the first N questions, one shard.

They apply in that order. Fraction and shard work on whole videos, because a video's questions share one pass over
its stream (and, for streaming benchmarks, one compressed memory); shards stride over the videos so long and short
ones spread evenly, are disjoint, and together give exactly the unsharded selection. ``describe`` is recorded in the
metrics so a subset number is never mistaken for a full-benchmark one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.base import VideoSample


def parse_shard(shard: str | None) -> tuple[int, int] | None:
    """``"i/n"`` -> (i, n), checked: 0 <= i < n."""
    if shard is None:
        return None
    try:
        i, n = (int(x) for x in str(shard).split("/"))
    except ValueError:
        raise ConfigError(f"benchmark.shard={shard!r} must look like 'i/n', e.g. benchmark.shard=0/4") from None
    if not 0 <= i < n:
        raise ConfigError(f"benchmark.shard={shard!r} needs 0 <= i < n (shards are 0-based): e.g. 0/{max(n, 1)}")
    return i, n


def _check(cfg: BenchmarkConfig) -> None:
    if cfg.limit is not None and cfg.limit < 1:
        raise ConfigError(f"benchmark.limit={cfg.limit} must be >= 1 (or null for every question)")
    if cfg.fraction is not None and not 0 < cfg.fraction <= 1:
        raise ConfigError(f"benchmark.fraction={cfg.fraction} must lie in (0, 1], e.g. 0.1 for a tenth of the videos")
    parse_shard(cfg.shard)


def _by_ids(samples: list[VideoSample], ids: list[str]) -> list[VideoSample]:
    wanted = set(ids)
    found = {q.qid for s in samples for q in s.questions} & wanted
    if found != wanted:
        unknown = sorted(wanted - found)
        raise ConfigError(
            f"benchmark.ids: {len(unknown)} ids are not in the annotations, e.g. {unknown[:3]}; "
            f"use question ids as they appear in predictions.jsonl"
        )
    kept = [replace(s, questions=[q for q in s.questions if q.qid in wanted]) for s in samples]
    return [s for s in kept if s.questions]


def _fraction(samples: list[VideoSample], fraction: float, seed: int) -> list[VideoSample]:
    k = max(1, round(fraction * len(samples)))
    chosen = sorted(random.Random(seed).sample(range(len(samples)), min(k, len(samples))))
    return [samples[i] for i in chosen]


def _limit(samples: list[VideoSample], limit: int) -> list[VideoSample]:
    out: list[VideoSample] = []
    left = limit
    for s in samples:
        if left <= 0:
            break
        out.append(replace(s, questions=s.questions[:left]))
        left -= len(out[-1].questions)
    return out


def select(samples: Iterable[VideoSample], cfg: BenchmarkConfig) -> list[VideoSample]:
    """The videos (with their questions) this job runs, in the benchmark's order."""
    _check(cfg)
    out = list(samples)
    if cfg.ids is not None:
        out = _by_ids(out, [str(i) for i in cfg.ids])
    if cfg.fraction is not None and cfg.fraction < 1:
        out = _fraction(out, cfg.fraction, cfg.seed)
    if cfg.limit is not None:
        out = _limit(out, cfg.limit)
    shard = parse_shard(cfg.shard)
    if shard is not None:
        i, n = shard
        out = out[i::n]
    return out


def describe(cfg: BenchmarkConfig) -> dict[str, Any]:
    """The metrics' ``subset`` block: what was selected and whether the numbers cover the whole benchmark."""
    _check(cfg)
    shard = parse_shard(cfg.shard)
    partial = (cfg.fraction is not None and cfg.fraction < 1) or (shard is not None and shard[1] > 1)
    return {
        "is_subset": partial or cfg.limit is not None or cfg.ids is not None,
        "limit": cfg.limit,
        "fraction": cfg.fraction,
        "n_ids": None if cfg.ids is None else len(cfg.ids),
        "shard": cfg.shard,
        "seed": cfg.seed,
    }
