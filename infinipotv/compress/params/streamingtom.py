"""StreamingTOM's parameters (its tensor code: :mod:`infinipotv.compress.streamingtom`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import QUERIES, PolicyParams, check_choice, check_range, register

UPSTREAM_WINDOW = 4800  # the newest tokens a batch's prefill attends, dequantized (README env table)
UPSTREAM_RETRIEVED = 12544  # OQM_RETRIEVAL_MAX_TOKENS: the tokens an answer reads
RETAIN = 50  # CTR_RETAIN_TOKENS: G, of LLaVA-OneVision's 196 tokens per frame (asserted upstream)
UPSTREAM_FRAME = 196
TAU = 0.9  # CTR_SIMILARITY_THRESHOLD
DPC_K = 7  # CTR_K
BETA = 0.6  # CTR_BETA


def upstream_window(budget: int) -> int:
    """Upstream's encode window (4,800 tokens beside 12,544 retrieved) scaled to |M| = ``budget``."""
    return max(1, round(budget * UPSTREAM_WINDOW / UPSTREAM_RETRIEVED))


@register("streamingtom", "infinipotv.compress.streamingtom:StreamingTOM")
@dataclass(frozen=True)
class StreamingTOM(PolicyParams):
    """StreamingTOM (CVPR 2026; code github.com/YIGE24/StreamingTOM at 6c66b05).

    Before the LLM, CTR cuts every frame to ``retain`` tokens (:func:`reduce_chunk`: static tokens, those like the
    previous frame's token at the same place above ``tau``, merged by density-peak clustering; dynamic ones by
    saliency). After it, OQM (:class:`infinipotv.kv.oqm.OQMStore`) stores every kept token as 4-bit codes in groups
    of one frame (G = ``retain``) with one full-precision mean pre-RoPE key per group; chunks are prefilled over
    the prefix and the newest ``window`` tokens dequantized. At a question, a transient forward of the question's own
    text (``query``; upstream's ``tasks/query.py`` re-tokenizes the bare question for its retrieval pass) gives each
    layer's mean query; the groups whose keys are closest in cosine, up to |M| tokens, are dequantized
    and the prompt reads [prefix | those groups] (:func:`infinipotv.kv.oqm.top_groups`). Query-agnostic while the
    video streams, query-aware at the answer. The memory grows with the stream (~3.3x smaller than fp16 per token):
    every byte is counted, on the accelerator, as upstream keeps it.

    Equal memory: ``compress.budget`` |M| is the answer's retrieved tokens (upstream's OQM_RETRIEVAL_MAX_TOKENS,
    12,544), dequantized on the accelerator like every other method's |M|; the OQM itself is counted on top of it.

    Departures (docs/extending.md): saliency is the vision tower's attention upstream; no adapter gives it yet, so every
    model uses :func:`embedding_saliency` (1 - cosine of a token's embedding with its frame's mean); the symbolic
    model's glyph reader has no attention at all. Positions are the stream's own (upstream prefills each batch at
    positions following its window and the prompt at ``len(retrieved)``). The encode window defaults to upstream's
    proportion of |M| (4,800 against 12,544 retrieved tokens), the OQM stays on the accelerator (no host placement
    offered), and DPC's noise is seeded per frame.

    Parameters:
        retain: tokens kept per frame, G, at most the model's tokens per frame p (None: upstream's share,
            ``max(1, round(p * 50 / 196))``: 50 on LLaVA-OneVision's 196, 3 on the symbolic model's 12).
        tau: the cosine above which a token is static (upstream 0.9).
        k: DPC's nearest neighbours (upstream 7).
        beta: a static centre's own share after merging (upstream 0.6; 1.0: no merging).
        bits: OQM's code width (upstream 4).
        window: tokens of the newest memory a chunk's prefill attends, dequantized (None: upstream's share of
            |M|, ``round(|M| * 4800 / 12544)``: its 4,800-token encode window beside 12,544 retrieved tokens).
        seed: seeds DPC's tie-breaking noise.
        query: the text the retrieval forward reads: ``question`` (upstream) or ``prompt`` (the whole prompt).
    """

    streaming: ClassVar[str] = "streamingtom"
    retain: int | None = None
    tau: float = TAU
    k: int = DPC_K
    beta: float = BETA
    bits: int = 4
    window: int | None = None
    seed: int = 0
    query: str = "question"

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.retain is not None and self.retain < 1) or self.k < 1:
            raise ValueError(f"retain={self.retain} and k={self.k} must be >= 1 (upstream: retain=50, k=7)")
        check_range("tau", self.tau, -1.0, 1.0)
        check_range("beta", self.beta, 0.0, 1.0)
        if self.bits not in (2, 4, 8):
            raise ValueError(f"bits={self.bits} is not supported: use 2, 4 or 8 (upstream: 4)")
        if self.window is not None and self.window < 0:
            raise ValueError(f"window={self.window} must be >= 0 tokens (None: upstream's share of |M|)")
        check_choice("query", self.query, QUERIES)

    def check_storage(self, quantized: bool, contiguous_positions: bool) -> None:
        """OQM is StreamingTOM's own low-bit store, so KIVI would code its memory twice: refused, saying how the two
        compare (docs/peers.md)."""
        if quantized:
            raise ValueError(
                "StreamingTOM keeps its own 4-bit store, OQM (keys and values per head and channel over a frame's G "
                "tokens, no full-precision window, a mean key per group: ~154 B a token and head at D = 128, G = 50, "
                "against KIVI INT4's 164 B), so quant= does not apply (its width is compress.bits): use quant=fp16 "
                "(or bf16)"
            )

    def window_tokens(self, budget: int) -> int:
        """The encode window for |M| = ``budget``: ``window``, else upstream's 4,800 : 12,544 scaled to |M|."""
        return upstream_window(budget) if self.window is None else self.window

    def check_stream(self, chunk_frames: int, tokens_per_frame: int, budget: int, n_keep: int) -> None:
        """An encode window wider than |M| has each chunk's prefill read more of the OQM dequantized than the |M|
        tokens equal memory grants (past the OQM's length, all of it), while the peak counted stays a smaller
        window's: refused, naming the largest window."""
        if self.window is not None and self.window > budget:
            raise ValueError(
                f"window={self.window} is more tokens than |M| = {budget}: set compress.window to at most {budget} "
                f"(or null: upstream's share of |M|, {upstream_window(budget)} tokens)"
            )

    def tokens_kept(self, tokens_per_frame: int) -> int:
        """G for frames of ``tokens_per_frame`` tokens."""
        if self.retain is None:
            return max(1, round(tokens_per_frame * RETAIN / UPSTREAM_FRAME))
        return self.retain

    def validate(self, n_keep: int, tokens_per_frame: int, n_tokens: int) -> None:
        super().validate(n_keep, tokens_per_frame, n_tokens)
        if self.tokens_kept(tokens_per_frame) > tokens_per_frame:
            raise ValueError(
                f"retain={self.retain} is more than the model's {tokens_per_frame} tokens per frame: set "
                f"compress.retain to at most {tokens_per_frame}"
            )
