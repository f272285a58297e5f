"""WeaveTime's parameters (its tensor code: :mod:`infinipotv.compress.weavetime`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import check_range, register
from .retrieval import RetrievalParams


@register("weavetime", "infinipotv.compress.weavetime:WeaveTime")
@dataclass(frozen=True)
class WeaveTime(RetrievalParams):
    """WeaveTime's inference part, the "Past-Current Dynamic Focus Cache" (Zhang et al., "WeaveTime",
    github.com/zhangyl4/weavetime at a077e75; spec: shared/spec/field2.md section 3). The temporal-order
    fine-tuning (SOPE / the temporal-order LoRA the paper's checkpoints carry) is out of scope: this is the
    inference method on the base checkpoints.

    The stream is ReKV's memory (a window of the newest |C| = c_ratio * |M| video tokens in the cache, every frame
    offloaded to host memory as it arrives with its mean pre-RoPE key). At a question the answer prompt is
    prefilled over [prefix | window], capturing each layer's pre-RoPE queries (the whole prompt, as upstream's
    shipped scripts ask: ``--query_type prompt``, ``eval.sh:22,48``; read at ``video_qa/base.py:254``); the
    top-``10`` entropy of its next-token distribution, normalized to [0, 1], gates the rest (``mixins.py:455-482``).
    Below ``threshold`` (confident) the answer decodes from that cache. At or above it (uncertain), each layer
    picks its blocks coarse-to-fine with those queries averaged over each KV head's group (:func:`coarse_to_fine`),
    the blocks are copied back and re-rotated to contiguous positions after the prefix, and the prompt is prefilled
    again over [prefix | retrieved blocks] (no window: upstream's retrieval view has none) and decoded. Each answer
    records the branch and the entropy (``gate`` in predictions.jsonl). The memory is unchanged after an answer.

    Departures (docs/retrieval.md): the window is |C| and the retrieval buffer |M| - |C| (upstream: a window of
    15,680 tokens, or 144 frames after ``set_block_size``'s hard-coded override, which is a bug and not copied,
    against 64 retrieved frames), so the accelerator never holds more than |M| video tokens; the detailed keys are
    the host store's own keys with RoPE stripped (upstream keeps a second copy, 1.5x the host bytes); the blocks
    a question reads are always chosen among the offloaded ones (upstream scores the not yet offloaded remainder by
    a mean-of-max before its window first fills; here every frame is offloaded on arrival); two prompt passes in
    the uncertain branch, not three (upstream's second forward only triggers retrieval with the saved queries);
    only the final logits gate (``entropy_window_layers`` 1, the evaluated setting); no time prompts (an input
    format of the fine-tuned checkpoints); on M-RoPE models retrieved keys keep their original positions.

    Parameters:
        threshold: normalized top-10 entropy at or above which a question retrieves (0.6 upstream; 0: always
            retrieve; 1: only when the top ten are equal). Tuned for the fine-tuned LLaVA-OV-7B: calibrate it for
            another model on held-out questions (the share of questions that retrieve is in metrics.json).
        prefilter: candidates per retrieved block kept by the coarse score for the fine one (3 upstream).
        block_frames: frames per offloaded block (upstream: one frame).
        include_window: the window joins the retrieval branch's context after the blocks (upstream: it does not).
        positions: ``contiguous`` (retrieved blocks re-rotated after the prefix, upstream) or ``original``.
    """

    streaming: ClassVar[str] = "weavetime"
    top: ClassVar[int] = 10  # the top logits the gate's entropy reads (upstream's constant)
    # The gate and the retrieval read one forward of the whole answer prompt, cue included: upstream's pass reads
    # input_text[self.query_type] (video_qa/base.py:254) and the method's shipped scripts set --query_type prompt
    # (eval.sh:22,48; eval_pcdfCache.sh:26). A class constant: the gate needs the answer's own next token.
    query: ClassVar[str] = "prompt"

    # Upstream's split (run_eval.sh, spec/field2.md section 3.2): a window of n_local = 15,680 tokens (80 frames of
    # 196) beside retrieve_size = 64 frames, so the window is 80 / 144 of the accelerator tokens.
    default_c_ratio: ClassVar[float] = 80 / (80 + 64)

    threshold: float = 0.6
    prefilter: int = 3
    block_frames: int = 1
    include_window: bool = False
    positions: str = "contiguous"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("threshold", self.threshold, 0.0, 1.0)
        for name, upstream in (("prefilter", 3), ("block_frames", 1)):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1 (upstream: {name}={upstream})")

    def check_stream(self, chunk_frames: int, tokens_per_frame: int, budget: int, n_keep: int) -> None:
        if chunk_frames % self.block_frames:
            raise ValueError(
                f"a chunk of {chunk_frames} model frames cannot be cut into blocks of block_frames="
                f"{self.block_frames}: make eval.chunk_frames a multiple of the block's frames"
            )
        super().check_stream(chunk_frames, tokens_per_frame, budget, n_keep)

    def block_tokens(self, tokens_per_frame: int) -> int:
        return self.block_frames * tokens_per_frame

    def retrieves(self, entropy: float) -> bool:
        """The gate: an entropy at or above the threshold retrieves (``strategy = 'retrieval' if avg >= 0.6``)."""
        return entropy >= self.threshold
