"""MuKV's parameters (its tensor code: :mod:`infinipotv.compress.mukv`)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import QUERIES, PolicyParams, check_choice, check_range, register
from .retrieval import POSITIONS

GRAINS = ("patch", "frame", "segment")  # fine, medium, coarse: upstream's 49, 196, 784 tokens of 196-token frames


@register("mukv", "infinipotv.compress.mukv:MuKV")
@dataclass(frozen=True)
class MuKV(PolicyParams):
    """MuKV (multi-grained KV blocks, github.com/IMBALDY/MuKV at 2127b87; spec: shared/spec/field2.md section 2).

    MuKV keeps no streaming KV cache. Each chunk's vision tokens are cut into blocks at three granularities, a
    quarter frame (``patch``), a frame and ``segment_frames`` frames (upstream: 49, 196 and 784 tokens of 196-token
    frames), and every block is prefilled alone over the system prefix (a side prefill: the stream's memory is not
    touched). In each block the tokens are scored by ``alpha * minmax(attention received in the last layer) +
    (1 - alpha) * (high-pass FFT of the last layer's keys)``, ``max(1, int(g * keep))`` of them are kept in every
    layer, and they go to the host with the block's representative (the mean last-layer key of the kept tokens). At
    a question, the question's own text prefilled over the prefix gives the last-layer key of its last token
    (``query``: upstream tokenizes ``input_text['question']`` alone, ``model/mukv_rerank.py:173-195``, no
    options, template or answer cue); per
    granularity the ``2 * k`` blocks whose representatives are closest (cosine) are the candidates, patch and frame
    candidates are reranked against the mean representative of the ``top_n`` best segment candidates, the top
    ``k`` of each are copied back, and the prompt and answer read [prefix | patch blocks | frame blocks | segment
    blocks], each in score order. Every block keeps the positions it was prefilled at (``positions=original``,
    upstream: all of them start where the video does), or they are re-rotated to follow the prefix one after the
    other (``positions=contiguous``). The memory is unchanged after an answer.

    Memory: the accelerator holds the prefix while streaming (plus one block's forward, transient) and at most
    |M| = ``compress.budget`` retrieved tokens per layer and KV head at an answer: the retrieved counts are
    upstream's ``topk`` scaled to fit, ``k_g = floor(topk_g * |M| / sum_h topk_h * s_h)`` with ``s_g`` a block's
    kept tokens. Candidates are scored on the host (their representatives live there), so only the picked blocks
    cross. The host holds every block's kept tokens at the three granularities (about the stream once with the
    shipped keep ratios) and the frames of the open segment's embeddings.

    Departures (docs/retrieval.md): blocks are sized in frames, not tokens; at least one token per block is kept
    (upstream keeps the whole block when ``int(g * keep)`` is 0); a segment block gathers its frames across chunks
    (upstream cuts within its 64-frame chunks and drops the tail); the retrieved counts are scaled to |M|.

    Parameters:
        patch_split: patch blocks per frame (4: a quarter frame, upstream's 49 of 196 tokens).
        segment_frames: frames per segment block (4, upstream's 784 tokens).
        keep_patch, keep_frame, keep_segment: the share of a block's tokens kept (0.1 / 0.1 / 0.8, the scripts').
        alpha_patch, alpha_frame, alpha_segment: the attention signal's weight (0.5 / 0.7 / 0.8).
        topk_patch, topk_frame, topk_segment: retrieved blocks before scaling to |M| (20 / 32 / 12).
        rerank_patch, rerank_frame: the context's weight in a candidate's score (0.3 / 0.3).
        top_n: segment candidates averaged into the context (5).
        positions: ``original`` (upstream) or ``contiguous``.
        query: the text prefilled for the query key: ``question`` (upstream) or ``prompt`` (the answer's whole
            prompt, cue included: an ablation; its last token is then the cue's last word).
    """

    streaming = "mukv"
    head_shared = True  # a block keeps the same tokens in every layer and head

    patch_split: int = 4
    segment_frames: int = 4
    keep_patch: float = 0.1
    keep_frame: float = 0.1
    keep_segment: float = 0.8
    alpha_patch: float = 0.5
    alpha_frame: float = 0.7
    alpha_segment: float = 0.8
    topk_patch: int = 20
    topk_frame: int = 32
    topk_segment: int = 12
    rerank_patch: float = 0.3
    rerank_frame: float = 0.3
    top_n: int = 5
    positions: str = "original"
    query: str = "question"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("positions", self.positions, POSITIONS)
        check_choice("query", self.query, QUERIES)
        for grain in GRAINS:
            check_range(f"keep_{grain}", getattr(self, f"keep_{grain}"), 0.0, 1.0, low_open=True)
            check_range(f"alpha_{grain}", getattr(self, f"alpha_{grain}"), 0.0, 1.0)
        for grain in ("patch", "frame"):
            check_range(f"rerank_{grain}", getattr(self, f"rerank_{grain}"), 0.0, 1.0)
        for name in ("patch_split", "segment_frames", "topk_patch", "topk_frame", "topk_segment", "top_n"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1 (upstream: {name}={_UPSTREAM[name]})")

    def block_tokens(self, tokens_per_frame: int) -> dict[str, int]:
        """Tokens per block of each granularity for frames of ``tokens_per_frame`` tokens."""
        return {
            "patch": tokens_per_frame // self.patch_split,
            "frame": tokens_per_frame,
            "segment": self.segment_frames * tokens_per_frame,
        }

    def kept(self, tokens_per_frame: int) -> dict[str, int]:
        """Tokens a block of each granularity keeps, ``max(1, int(g * keep))``."""
        return {g: max(1, int(n * getattr(self, f"keep_{g}"))) for g, n in self.block_tokens(tokens_per_frame).items()}

    def retrieved(self, tokens_per_frame: int, budget: int) -> dict[str, int]:
        """Blocks a question reads per granularity: upstream's ``topk`` scaled so their kept tokens fit |M|
        (``floor(topk_g * budget / sum_h topk_h * s_h)``)."""
        kept = self.kept(tokens_per_frame)
        total = sum(getattr(self, f"topk_{g}") * kept[g] for g in GRAINS)
        return {g: getattr(self, f"topk_{g}") * budget // total for g in GRAINS}

    def alpha(self, grain: str) -> float:
        return getattr(self, f"alpha_{grain}")

    def rerank(self) -> dict[str, float]:
        return {"patch": self.rerank_patch, "frame": self.rerank_frame}

    def check_stream(self, chunk_frames: int, tokens_per_frame: int, budget: int, n_keep: int) -> None:
        """A frame must cut into whole patch blocks, and |M| must retrieve at least one block of each granularity."""
        if tokens_per_frame % self.patch_split:
            fits = [d for d in range(1, tokens_per_frame + 1) if tokens_per_frame % d == 0]
            raise ValueError(
                f"a frame of {tokens_per_frame} tokens cannot be cut into patch_split={self.patch_split} patch blocks: "
                f"use compress.patch_split={' or '.join(map(str, fits))}"
            )
        counts = self.retrieved(tokens_per_frame, budget)
        if min(counts.values()) < 1:
            kept = self.kept(tokens_per_frame)
            total = sum(getattr(self, f"topk_{g}") * kept[g] for g in GRAINS)
            need = max(-(-total // getattr(self, f"topk_{g}")) for g in GRAINS)
            raise ValueError(
                f"|M| = {budget} retrieves {counts} blocks per granularity (kept tokens per block {kept}): every "
                f"granularity needs one, raise compress.budget to {need} or lower compress.keep_segment"
            )


_UPSTREAM = {"patch_split": 4, "segment_frames": 4, "topk_patch": 20, "topk_frame": 32, "topk_segment": 12, "top_n": 5}
