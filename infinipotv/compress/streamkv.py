"""StreamKV: ReKV with semantic segments, a summary frame per segment, guidance-prompt compression of the host
store, per layer (the rule; :mod:`infinipotv.stream.streamkv` streams with it).

The tensor functions here are the upstream ones, each transcribed from ``sou1p0wer/StreamKV@b0dbe3f``
(spec/field2.md section 1, anchors file -> function) and held against the spec's vectors
(``tests/compress/test_streamkv_rule.py``):

- :class:`Segmenter`: ``encode_video``'s semantic branch with ``cosine_similarity`` and ``merge``
  (``model/abstract_streamkv.py``): when a segment closes, and which adjacent frames are averaged at its maximum size;
- :func:`obtain_cdf_num` and :func:`rescale_sum_match`: the per-layer counts of ``_encode_video_chunk``;
- :func:`apportion`: our strict mode, the same ranking with the total held exactly (upstream's rescale does not
  preserve it: 24 frames for a target of 30 in the spec's T2);
- :meth:`StreamKV.reserved`, :meth:`StreamKV.guidance_scores`, :meth:`StreamKV.select`: ``compress_kv`` and
  ``_calc_block_topk`` (``model/attention/kv_cache_manager.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .params import streamkv as params
from .retrieval import RetrievalPolicy, mean_query, top_blocks


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """``cosine_similarity`` of two frames' mean features ``[D]`` (upstream's 1e-8 in the denominator)."""
    a, b = a.double(), b.double()
    return float(torch.dot(a, b) / (a.norm() * b.norm() + 1e-8))


@dataclass
class Segmenter:
    """The open segment of ``encode_video``'s semantic branch, on each frame's mean feature ``[D]`` (the mean of a
    merged frame is the mean of its frames' means: the frames are averaged token by token).

    :meth:`push` takes the next frame and says what happened: ``"start"`` (the first frame of a video),
    ``"close"`` (the open segment ended before this frame, which starts the next), ``"append"``, or an int ``i``
    (appended, then the open segment's frames ``i`` and ``i + 1`` were averaged: it stays at ``max_size``)."""

    min_size: int
    max_size: int
    theta: float
    frames: list[torch.Tensor] = field(default_factory=list)  # the open segment's (merged) frames' mean features
    cossims: list[float] = field(default_factory=list)  # cos of adjacent frames of the open segment
    previous: torch.Tensor | None = None  # the raw previous frame (never a merged one)

    def push(self, feature: torch.Tensor) -> str | int:
        if not self.frames:
            self.frames, self.cossims, self.previous = [feature], [], feature
            return "start"
        cos = cosine(feature, self.previous)
        self.previous = feature
        if len(self.frames) < self.min_size or cos > self.theta:
            self.frames.append(feature)
            self.cossims.append(cos)
            if len(self.frames) > self.max_size:
                return self._merge()
            return "append"
        self.frames, self.cossims = [feature], []
        return "close"

    def _merge(self) -> int:
        """``merge``: average the most similar adjacent pair, then recompute the merged frame's neighbours'
        cosines."""
        i = int(np.argmax(self.cossims))
        merged = (self.frames[i] + self.frames[i + 1]) / 2
        self.frames[i] = merged
        del self.frames[i + 1]
        if i > 0:
            self.cossims[i - 1] = cosine(self.frames[i - 1], merged)
        if i + 1 < len(self.cossims):
            self.cossims[i] = cosine(merged, self.frames[i + 1])
            del self.cossims[i + 1]
        else:
            del self.cossims[i]
        return i


def obtain_cdf_num(scores: list[torch.Tensor], target: int) -> list[int]:
    """Per-layer counts whose sum is within 5 of ``target`` (``obtain_cdf_num``): each layer's scores are
    z-normalised (unbiased std) and softmaxed, their sorted cumulative sum is cut at one threshold tau, bisected on
    [0, 1] (to 1e-6), and a layer keeps the entries below tau, at least 1. Equal scores (std 0) give a uniform
    softmax (upstream: NaN)."""
    cumulative = []
    for score in scores:
        score = score.float()
        std = score.std()
        z = (score - score.mean()) / std if float(std) > 0 else torch.zeros_like(score)
        cumulative.append(torch.softmax(z, dim=0).sort(descending=True).values.cumsum(0))
    width = max(c.numel() for c in cumulative)
    table = torch.stack([torch.cat([c, torch.full((width - c.numel(),), float("inf"))]) for c in cumulative])

    def counts(tau: float) -> torch.Tensor:
        taus = torch.full((len(scores), 1), tau, dtype=table.dtype)
        return torch.searchsorted(table, taus, right=False).clamp(min=1).view(-1)

    left, right, mid = 0.0, 1.0, 0.0
    while right - left > 1e-6:
        mid = (left + right) / 2.0
        total = int(counts(mid).sum())
        if abs(total - target) < 5:
            break
        if total > target:
            right = mid
        else:
            left = mid
    return counts(mid).tolist()


def stretch(counts: list[int], new_min: float, new_max: float) -> np.ndarray:
    """The min-max stretch of ``counts`` into [new_min, new_max] (``rescale_sum_match``'s first stage); equal
    counts stay as they are."""
    arr = np.array(counts, dtype=float)
    low, high = arr.min(), arr.max()
    if low == high:
        return arr
    return (arr - low) / (high - low) * (new_max - new_min) + new_min


def rescale_sum_match(counts: list[int], new_min: float, new_max: float) -> list[int]:
    """``rescale_sum_match``: a min-max stretch of ``counts`` into [new_min, new_max], rescaled to their sum,
    rounded and clipped, then one pass of +-1 corrections (the smallest first when short, the largest first when
    over). The smallest count always maps to ``new_min`` and the largest to ``new_max``; once clipping bites, the
    sum is not kept (use :func:`apportion` for that)."""
    arr = np.array(counts, dtype=float)
    total = arr.sum()
    if arr.min() == arr.max():
        return arr.astype(int).tolist()
    scaled = stretch(counts, new_min, new_max)
    mapped = np.clip(np.round(scaled * (total / scaled.sum())), new_min, new_max)
    diff = int(round(total - mapped.sum()))
    if diff:
        order = np.argsort(mapped, kind="stable") if diff > 0 else np.argsort(-mapped, kind="stable")
        for i in order:
            if (diff > 0 and mapped[i] < new_max) or (diff < 0 and mapped[i] > new_min):
                mapped[i] += 1 if diff > 0 else -1
                diff += -1 if diff > 0 else 1
                if diff == 0:
                    break
    return mapped.astype(np.int32).tolist()


def apportion(weights: list[float], total: int, low: int, high: int | list[int]) -> list[int]:
    """Counts of at least ``low`` and at most ``high`` (one bound, or one per entry) summing to exactly ``total``,
    in proportion to ``weights`` (largest deficit first, ties to the lower layer): the strict mode's replacement of
    :func:`rescale_sum_match`."""
    n = len(weights)
    highs = high if isinstance(high, list) else [high] * n
    total = min(max(total, n * low), sum(highs))
    weight_sum = float(sum(weights)) or 1.0
    ideal = [total * (w if sum(weights) else 1) / weight_sum for w in weights]
    out = [low] * n
    for _ in range(total - n * low):
        open_ = [i for i in range(n) if out[i] < highs[i]]
        best = max(open_, key=lambda i: (ideal[i] - out[i], -i))
        out[best] += 1
    return out


class StreamKV(params.StreamKV, RetrievalPolicy):
    """The tensor code of :class:`.params.streamkv.StreamKV`."""

    def reserved(self, scores: list[torch.Tensor]) -> list[int]:
        """Frames each layer keeps of a closed segment of F = ``len(scores[l])`` frames (``_encode_video_chunk``):
        obtain_cdf_num at target int(L * F * rho), then rescale_sum_match into [max(1, int(F rho (1 - temp))),
        min(F, int(F rho (1 + temp)))] and at least 1 (``upstream``), or :func:`apportion` of the target into
        [1, F] (``strict``)."""
        n_layers, n_frames = len(scores), scores[0].numel()
        target = int(n_layers * n_frames * self.compression_ratio)
        counts = obtain_cdf_num(scores, target)
        if self.budget_mode == "strict":
            return apportion(counts, target, 1, n_frames)
        share = n_frames * self.compression_ratio
        low = max(1, int(share * (1 - self.compress_temp)))
        high = min(n_frames, int(share * (1 + self.compress_temp)))
        return [max(1, n) for n in rescale_sum_match(counts, low, high)]

    def retrieval_counts(self, scores: list[torch.Tensor], counts: list[int]) -> list[int]:
        """Frames each layer retrieves (the two-pass question's counts, ``retrieval_nums``): ``scores[l]`` are a
        layer's block scores (the question's mean pre-RoPE query dotted with each candidate block's row),
        ``counts[l]`` what it reads without adaptation (R, or fewer where fewer blocks are candidates). With
        ``retrieve_temp`` 0: ``counts``. Otherwise obtain_cdf_num at the total, min-max stretched into
        [max(1, int(R (1 - temp))), min(int(R (1 + temp)), 128)] as upstream, then :func:`apportion`-ed to exactly
        the same total, no layer past its candidates."""
        if not self.retrieve_temp or len(counts) < 2:
            return list(counts)
        total, most = sum(counts), max(counts)
        low = max(1, int(most * (1 - self.retrieve_temp)))
        high = min(int(most * (1 + self.retrieve_temp)), 128)
        caps = [min(high, score.numel()) for score in scores]
        weights = stretch(obtain_cdf_num(scores, total), low, high)
        return apportion(weights.tolist(), total, min([low, *caps]), caps)

    def guidance_scores(self, queries: torch.Tensor, block_keys: torch.Tensor) -> torch.Tensor:
        """``[F]``: each frame block's mean pre-RoPE key ``block_keys [F, H_kv * D]`` dotted with the guidance
        prompt's mean pre-RoPE query (``queries [H_q, N, D]``; GQA-expanded as upstream)."""
        kv_heads = block_keys.shape[1] // queries.shape[-1]
        return block_keys.float() @ mean_query(queries, kv_heads).to(block_keys.device)

    def select(self, queries: torch.Tensor, block_keys: torch.Tensor, n_select: int) -> torch.Tensor:
        """``_calc_block_topk``: the newest ``retrieve_local`` blocks, then the top of the rest by ``q̄ · k̄``,
        ascending; everything when the candidates fit."""
        n_blocks = block_keys.shape[0]
        if n_blocks <= n_select:
            return torch.arange(n_blocks)
        local = min(self.retrieve_local, n_select)
        older = n_blocks - local
        rest = top_blocks(self.guidance_scores(queries, block_keys[:older]), n_select - local).cpu()
        return torch.cat([rest, torch.arange(older, n_blocks)])
