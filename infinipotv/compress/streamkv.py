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
from typing import ClassVar

import numpy as np
import torch

from .base import check_choice, check_range, register
from .rekv import ReKV
from .retrieval import RetrievalPolicy, mean_query, top_blocks

BUDGET_MODES = ("upstream", "strict")

#: ``encode_prompt`` of ``model/llava_onevision_streamkv.py:load_model``, verbatim.
GUIDANCE = (
    "For this event segment in the video, please prioritize retaining the following visual information:1)Key "
    "objects, people, and their attributes, and any changes or transitions during the event.2)Major actions, state "
    "transitions, and interactions (e.g., who/what is doing what, when, and where), including the precise timing of "
    "key moments.3)On-screen text, numbers, and all visible cues (such as labels, scores, timer, signs, etc.).4)"
    "Causal relationships, outcome(s), anomalies, and salient shifts within the segment (e.g., cause-effect chains, "
    "rare or surprising events, turning points).5)Counts and spatial arrangements of important objects or people, "
    "as well as layout details that may support summarization, prediction, or sequential reasoning in later "
    "queries.6)Any misleading, ambiguous, or easily confused visual clues\u2014ensure enough context is preserved to "
    "distinguish the current event state from similar past/future states."
)


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


@register("streamkv")
@dataclass(frozen=True)
class StreamKV(RetrievalPolicy):
    """StreamKV (Chen et al., "StreamKV: Streaming Video Question-Answering with Segment-based KV Cache Retrieval
    and Compression"; code github.com/sou1p0wer/StreamKV at b0dbe3f; spec/field2.md section 1).

    ReKV's window and host store (every frame a block, offloaded as it arrives, re-rotated to contiguous positions
    after the prefix at a question), plus: the stream is cut into semantic segments by the cosine of consecutive
    frames' mean input features (a new segment when it is at most ``segment_theta`` and the open one holds at
    least ``min_segment_size`` frames; past ``max_segment_size`` the most similar adjacent pair is averaged); when
    a segment closes, a summary frame (the per-position mean of its frames) and the guidance prompt are prefilled
    after it without being stored; the prompt's mean pre-RoPE query scores each frame block of the segment (a dot
    product with the block's mean pre-RoPE key), and each layer keeps its top ``reserved[l]`` frames (counts from
    :func:`obtain_cdf_num` at ``compression_ratio``, spread by ``compress_temp``) and the summary, never evicted.
    A question retrieves per layer the top blocks that fit the buffer, scored with the queries of a forward of the
    question's own text (``query``: upstream's ``question_answering`` in ``model/llava_onevision_streamkv.py``
    tokenizes ``input_text['question']`` alone, as ReKV), the newest ``retrieve_local`` forced in;
    with ``retrieve_temp`` > 0 the counts are layer-adaptive (:meth:`retrieval_counts`): the question's block scores
    in every layer give each layer its count, between R (1 - temp) and R (1 + temp) frames, R the buffer's frames.

    Departures (docs/retrieval.md, StreamKV): ``retrieve_temp`` is 0 by default (every layer reads the buffer's
    (|M| - |C|) / frame frames: the spec's option for a strict per-layer |M|); the adaptive counts sum to exactly
    L R (upstream's rescale does not keep the sum), so a layer may read up to 1.5x the buffer while the
    accelerator holds the same bytes; they come from the same question pass the blocks are picked with (upstream
    runs the question twice, its second pass reading the first's retrieval), and a layer that reads fewer frames
    reads them right-aligned before the question (upstream re-rotates each layer's blocks to follow the prefix,
    so the question's position differs per layer; here it is shared and the distances from the question to the
    retrieved blocks are upstream's); merged frames are averaged as KV (pre-RoPE keys and
    values, at the first frame's positions: the stream is prefilled as it arrives) rather than as input features
    before the prefill; the summary and guidance prompt read the prefix and window (upstream: the segment); the
    summary takes its segment's last frame's positions (upstream: after it, shifting later frames); the open
    segment is read uncompressed and without summary by a question (upstream encodes it then: a question here
    never writes the memory).

    Parameters:
        min_segment_size / max_segment_size: frames a segment holds before it may close / at most (run_eval.sh:
            4 / 64).
        segment_theta: a segment closes when consecutive frames' cosine is at most this (0.99).
        use_segment_summary: add the summary frame per segment.
        compression_ratio: rho, the share of a segment's frames the host keeps per layer on average (0.6; 1: off).
        compress_temp: the spread of the per-layer counts around rho * F (1).
        budget_mode: ``upstream`` (rescale_sum_match) or ``strict`` (the same ranking, int(L * F * rho) exactly).
        retrieve_temp: the spread of the per-layer retrieval counts around R (upstream 0.5; 0: every layer R).
        retrieve_local: the newest candidate blocks every question reads (upstream 8 of 64; 0: none).
        guidance: the guidance prompt (upstream's encode_prompt).
        include_window / positions / query: as ReKV's.
    """

    # Upstream's split (run_eval.sh, spec/field2.md section 1.2): ReKV's, a window of n_local = 15,000 tokens beside
    # retrieve_size = 64 one-frame blocks of 196 tokens.
    default_c_ratio: ClassVar[float] = ReKV.default_c_ratio
    block_knob: ClassVar[str | None] = None  # a block is a frame

    min_segment_size: int = 4
    max_segment_size: int = 64
    segment_theta: float = 0.99
    use_segment_summary: bool = True
    compression_ratio: float = 0.6
    compress_temp: float = 1.0
    budget_mode: str = "upstream"
    retrieve_temp: float = 0.0
    retrieve_local: int = 0
    guidance: str = GUIDANCE
    include_window: bool = False
    positions: str = "contiguous"
    query: str = "question"

    streaming = "streamkv"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.min_segment_size <= self.max_segment_size:
            raise ValueError(
                f"min_segment_size={self.min_segment_size}, max_segment_size={self.max_segment_size}: need "
                f"2 <= min_segment_size <= max_segment_size (upstream 4 and 64)"
            )
        check_range("segment_theta", self.segment_theta, -1.0, 1.0)
        check_range("compression_ratio", self.compression_ratio, 0.0, 1.0, low_open=True)
        check_range("compress_temp", self.compress_temp, 0.0, 1.0)
        check_choice("budget_mode", self.budget_mode, BUDGET_MODES)
        check_range("retrieve_temp", self.retrieve_temp, 0.0, 1.0)
        if self.retrieve_local < 0:
            raise ValueError(f"retrieve_local={self.retrieve_local} must be >= 0 (upstream 8; 0: none forced)")
        if not self.guidance.strip():
            raise ValueError("guidance is empty: give the guidance prompt's text (upstream's encode_prompt)")

    def validate(self, n_keep: int, tokens_per_frame: int, n_tokens: int) -> None:
        """At startup: the forced recency must leave frames to rank. ``n_tokens - n_keep`` (|M| plus a chunk, less
        |C|) is at least the retrieval buffer, so a ``retrieve_local`` refused here is refused at every chunk size."""
        super().validate(n_keep, tokens_per_frame, n_tokens)
        most = (n_tokens - n_keep) // tokens_per_frame
        if self.retrieve_local and self.retrieve_local >= most:
            raise ValueError(
                f"retrieve_local={self.retrieve_local} forces every frame the retrieval buffer holds (at most {most} "
                f"frames of {tokens_per_frame} tokens): lower compress.retrieve_local or raise compress.budget"
            )

    def block_tokens(self, tokens_per_frame: int) -> int:
        return tokens_per_frame  # a block is a frame (upstream: block_size = n_frame_tokens = 196)

    @property
    def compresses(self) -> bool:
        return self.compression_ratio < 1

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
