"""StreamKV's parameters (its tensor code: :mod:`infinipotv.compress.streamkv`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import check_choice, check_range, register
from .rekv import ReKV
from .retrieval import RetrievalParams

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


@register("streamkv", "infinipotv.compress.streamkv:StreamKV")
@dataclass(frozen=True)
class StreamKV(RetrievalParams):
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
