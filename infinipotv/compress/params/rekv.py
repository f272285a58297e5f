"""ReKV's parameters (its tensor code: :mod:`infinipotv.compress.rekv`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import register
from .retrieval import RetrievalParams


@register("rekv", "infinipotv.compress.rekv:ReKV")
@dataclass(frozen=True)
class ReKV(RetrievalParams):
    """ReKV (Di et al., "Streaming Video Question-Answering with In-context Video KV-Cache Retrieval", ICLR 2025,
    arXiv:2503.00540; code github.com/Becomebright/ReKV at 63793f7).

    While the video streams the cache keeps the system prefix and a local window of the newest |C| = c_ratio * |M|
    video tokens; every block of ``block_frames`` frames is offloaded to host memory as it completes, with its
    representative key (the mean of its pre-RoPE keys, heads concatenated: ``kv_cache_manager.py:L600-608``). At a
    question, a retrieval forward of the question's own text (``query``: upstream tokenizes
    ``input_text['question']`` alone, ``model/llava_onevision_rekv.py:45``, "Only input the question to perform
    retrieval": no options, template or answer cue) captures each layer's queries; per layer the score of block b
    is the unnormalized dot product ``q̄ · rep_b`` of the question's mean query with the representative
    (``L172-180``, ``L448``; named cosine upstream, not normalized), the top blocks that fit the retrieval buffer
    (|M| - |C| tokens) are copied back, sorted by time (``L459``), and re-rotated to contiguous positions after the
    prefix (``rekv_attention.py:L100``). The prompt and the answer read [prefix | retrieved blocks] (the window only
    with ``include_window``: upstream's answer does not read it unless retrieved); the memory is unchanged after.

    Departures (docs/extending.md): the window |C| and the retrieval buffer |M| - |C| share |M| in upstream's proportion
    (``default_c_ratio``: n_local 15,000 against 64 blocks of 196 tokens, so at |M| = 144 and 12 tokens a frame the
    buffer is 66 tokens, 5 whole frames) so every method holds the same accelerator tokens; the window keeps absolute
    positions while encoding (upstream re-rotates it to window-relative positions; attention within the window is the
    same, only the prefix's distance differs); representatives live on the host beside their blocks and are scored there
    (upstream keeps them on the GPU, where they grow with the stream); runs of ``retrieve_chunk_size`` > 1 are not
    offered (its default is 1); on M-RoPE models retrieved keys keep their original positions.

    Parameters:
        block_frames: frames per offloaded block (upstream: 1 frame of 196 tokens).
        include_window: the local window joins the answer's context after the retrieved blocks.
        positions: ``contiguous`` (re-rotated after the prefix, upstream) or ``original``.
        query: the text the retrieval forward reads: ``question`` (upstream) or ``prompt`` (the answer's whole
            prompt, its answer cue included: an ablation, a lookup key where the cue repeats the evidence).
    """

    # Upstream's split (video_qa/base.py:L189-191): a window of n_local = 15,000 tokens beside retrieve_size = 64
    # retrieved one-frame blocks of 196 tokens (12,544), so the window is 15,000 / 27,544 of the accelerator tokens.
    default_c_ratio: ClassVar[float] = 15000 / (15000 + 64 * 196)

    block_frames: int = 1
    include_window: bool = False
    positions: str = "contiguous"
    query: str = "question"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.block_frames < 1:
            raise ValueError(f"block_frames={self.block_frames} must be >= 1 (e.g. block_frames=1)")

    def check_chunk(self, chunk_frames: int, frames_per_step: int) -> None:
        """A chunk is offloaded as whole blocks (their representatives are computed as it arrives): its model frames
        must be a multiple of ``block_frames``."""
        frames = chunk_frames // frames_per_step
        if frames % self.block_frames:
            fits = [d for d in range(1, frames + 1) if frames % d == 0]
            per_step = f" ({frames_per_step} raw frames each)" if frames_per_step > 1 else ""
            raise ValueError(
                f"compress.block_frames={self.block_frames} does not divide a chunk's {frames} model frame(s)"
                f"{per_step} of eval.chunk_frames={chunk_frames}, and a chunk is offloaded in whole blocks: use "
                f"compress.block_frames={' or '.join(map(str, fits))}, or eval.chunk_frames="
                f"{self.block_frames * frames_per_step} (or a multiple)"
            )

    def block_tokens(self, tokens_per_frame: int) -> int:
        return self.block_frames * tokens_per_frame
