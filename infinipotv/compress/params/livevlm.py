"""LiveVLM's parameters (its tensor code: :mod:`infinipotv.compress.livevlm`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .base import check_range, register
from .retrieval import RetrievalParams


@register("livevlm", "infinipotv.compress.livevlm:LiveVLM")
@dataclass(frozen=True)
class LiveVLM(RetrievalParams):
    """LiveVLM (Ning et al., "LiveVLM: Efficient Online Video Understanding via Streaming-Oriented KV Cache and
    Retrieval", arXiv:2505.15269 v2; no public code).

    A short-term memory of the newest |C| = c_ratio * |M| video tokens stays in the cache at full precision; tokens
    leaving it join the long-term memory, held to ``(|M| - |C|) / page_ratio`` tokens by vision-sink buckets (VSB):
    each token is scored by the attention of the newest ``r_frames`` frames' vision tokens,
    ``S = MeanPool_r softmax(Q K^T / sqrt(D))``; ``N = capacity / bucket_size`` position-ordered buckets; the top
    ``sink_ratio`` of the capacity by S are kept first, then the rest by descending S while their bucket has room
    (and, where B does not divide the capacity, the best of the others fill it: :func:`vsb_keep`).
    At a question (page retrieval, PaR) the long-term memory is split into pages of ``page_tokens``, RoPE is
    stripped from its keys to score them (page key = mean, against the mean pre-RoPE query of a forward of the
    question's own text: ``query``, a declared choice, since no code says what the paper's "question" holds; ReKV,
    the framework it is measured against, reads the bare question), the top
    ``page_ratio`` of the pages are copied back, and the answer reads [prefix | retrieved pages | short-term].

    Unstated in the paper, chosen here and made knobs (docs/extending.md): r (``r_frames``: the newest frame), R
    (``sink_ratio`` of the capacity), the short-term size (|C|), the restored positions (``original``: RoPE is
    restored where it was), the granularity (per layer, shared by the heads, scores averaged over query heads), and
    the normalization of S (the softmax runs over the long-term candidates, not the whole cache). The long-term
    memory lives in host memory (``offload``; the paper keeps it on the GPU), so the accelerator holds |M| tokens at
    most, the answer included; B = 1 as in the paper.

    Parameters:
        page_tokens: tokens per retrieval page (C = 16).
        page_ratio: share of the long-term pages a question retrieves (Table 6's optimum, 0.4).
        r_frames: newest frames whose vision tokens' attention scores the long-term candidates.
        sink_ratio: share of the long-term capacity kept by score alone (VSB phase 1).
        bucket_size: tokens per VSB bucket (B = 1; any B keeps the whole capacity).
        offload: the long-term memory in host memory (false: on the accelerator, as the paper).
        include_window: the short-term memory joins the answer's context (the paper: it does).
        positions: ``original`` (RoPE restored where it was) or ``contiguous``.
        query: the text the retrieval forward reads: ``question`` (declared) or ``prompt`` (the whole prompt).
    """

    offload_on_arrival: ClassVar[bool] = False
    cache_block_keys: ClassVar[bool] = False
    block_knob: ClassVar[str | None] = "page_tokens"

    # The paper gives no short-term size (only the long-term budget M = 12K and page_ratio); an even split of the
    # accelerator tokens between the short-term memory and the retrieved pages is this harness's declared choice.
    default_c_ratio: ClassVar[float] = 0.5

    page_tokens: int = 16
    page_ratio: float = 0.4
    r_frames: int = 1
    sink_ratio: float = 0.5
    bucket_size: int = 1
    offload: bool = True
    include_window: bool = True
    positions: str = "original"
    query: str = "question"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("page_tokens", "r_frames", "bucket_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        check_range("page_ratio", self.page_ratio, 0.0, 1.0, low_open=True)
        check_range("sink_ratio", self.sink_ratio, 0.0, 1.0)

    def check_chunk(self, chunk_frames: int, frames_per_step: int) -> None:
        """The long-term memory is scored with the queries of the chunk just prefilled: ``r_frames`` newest frames
        must fit in one chunk (more would silently score with the chunk's frames only)."""
        frames = chunk_frames // frames_per_step
        if self.r_frames > frames:
            per_step = f" ({frames_per_step} raw frames each)" if frames_per_step > 1 else ""
            raise ValueError(
                f"compress.r_frames={self.r_frames} is more than a chunk's {frames} model frame(s){per_step} of "
                f"eval.chunk_frames={chunk_frames}, and the scores read the chunk's own queries: use compress.r_frames"
                f" in 1..{frames}, or eval.chunk_frames={self.r_frames * frames_per_step} (or more)"
            )

    def block_tokens(self, tokens_per_frame: int) -> int:
        return self.page_tokens

    def host_capacity(self, buffer_tokens: int) -> int | None:
        return max(self.page_tokens, math.floor(buffer_tokens / self.page_ratio))

    def blocks_to_retrieve(self, n_blocks: int, buffer_tokens: int, block: int) -> int:
        return min(n_blocks, math.ceil(self.page_ratio * n_blocks), buffer_tokens // block)
