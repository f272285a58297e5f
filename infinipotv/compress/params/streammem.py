"""StreamMem's parameters (its tensor code: :mod:`infinipotv.compress.streammem`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import PolicyParams, check_choice, check_range, register

AGGREGATES = ("mean", "max")
SELECTS = ("head", "layer")
MERGE_THRESHOLD = 0.95  # the paper's delta
PROXY = "<|im_end|>\n<|im_start|>assistant\n"  # the chat template's assistant turn (the paper's proxy query)


@register("streammem", "infinipotv.compress.streammem:StreamMem")
@dataclass(frozen=True)
class StreamMem(PolicyParams):
    """StreamMem (Yang et al., "StreamMem: Query-Agnostic KV Cache Memory for Streaming Video Understanding",
    arXiv:2508.15717; no public code: the paper is the reference).

    After every clip (chunk) the memory is re-scored by the attention of a generic proxy query (the chat template's
    assistant turn, prefilled transiently after the clip; its attention over the memory is computed from the stored
    keys, :func:`proxy_scores`), and the best |M| tokens of old memory and new clip are kept (|M| + chunk -> |M|).
    Before the clip is prefilled, runs of near-duplicate consecutive frames (cosine of their embeddings above
    ``merge_threshold``) are averaged into one frame (:func:`merge_chunk`); after it, each new frame adds one
    prototype key and value, the score-weighted means of its tokens (:func:`frame_prototypes`), inserted into the
    memory like any token (ids ``-2 - frame``, bytes counted, re-scored and evicted with the rest).

    Departures and choices (docs/extending.md): the proxy is the same text on every model, ChatML's assistant turn
    (SmolLM2, Qwen2-VL and LLaVA-OneVision all use ChatML; the symbolic benchmark's plain prompt included); no YaRN
    context extension (the paper's lambda: 8 on LLaVA-OV, 2 on Qwen2-VL; 1 here); the softmax runs over the whole
    committed memory, prefix included, as the proxy's own attention would (not over the proxy tokens themselves);
    frames merge within a clip (the frame before it is already in the memory); a merged frame takes the ids and
    positions of its run's first frame; prototypes average keys as cached, after RoPE.

    Parameters:
        proxy: the proxy text, tokenized by the model's tokenizer.
        aggregate: how the proxy rows (and the query heads of a KV head) make one score, ``mean`` or ``max`` (the
            paper does not say; a sum ranks as the mean does).
        select: ``head`` (each KV head keeps its own tokens) or ``layer`` (one set per layer, scores averaged over
            its KV heads); the paper does not say.
        merge_threshold: frames merge above this cosine (paper: 0.95); 1.0 turns merging off.
        prototypes: insert one prototype per new frame.
        prototypes_in_budget: prototypes count inside |M| (the memory holds |M| tokens, prototypes included) or
            come on top of it (|M| + the clip's frames); the paper does not say.
    """

    streaming: ClassVar[str] = "streammem"
    proxy: str = PROXY
    aggregate: str = "mean"
    select: str = "head"
    merge_threshold: float = MERGE_THRESHOLD
    prototypes: bool = True
    prototypes_in_budget: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("aggregate", self.aggregate, AGGREGATES)
        check_choice("select", self.select, SELECTS)
        check_range("merge_threshold", self.merge_threshold, -1.0, 1.0)
        if not self.proxy:
            raise ValueError(
                "proxy='' is empty: give the proxy text, e.g. proxy='<|im_end|>\\n<|im_start|>assistant\\n'"
            )
