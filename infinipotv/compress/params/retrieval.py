"""The parameters every method that retrieves at question time shares (ReKV, LiveVLM, StreamKV, WeaveTime):
where retrieved tokens sit, and which text the retrieval forward reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import QUERIES, PolicyParams, check_choice

POSITIONS = ("contiguous", "original")


@dataclass(frozen=True)
class RetrievalParams(PolicyParams):
    """Base of the retrieval methods' parameters. Subclasses set the knobs and implement :meth:`block_tokens`;
    their tensor code (:class:`infinipotv.compress.retrieval.RetrievalPolicy`) implements ``select`` (and
    ``compact`` when their host memory is bounded)."""

    streaming: ClassVar[str] = "retrieval"
    head_shared = True  # the window and the retrieved blocks are whole tokens, every head's
    #: True: a chunk's tokens are offloaded as soon as they are prefilled (ReKV: every block goes to the host, the
    #: window's too); False: tokens are offloaded when they leave the window (LiveVLM's short-term -> long-term).
    offload_on_arrival: ClassVar[bool] = True
    #: True: block rows are computed once, when a block is offloaded (the offloaded tokens never change).
    cache_block_keys: ClassVar[bool] = True
    #: The knob that sizes a retrieval block, named when a block cannot fit the buffer (None: a block is a frame).
    block_knob: ClassVar[str | None] = "block_frames"

    # Every subclass declares these knobs (dataclass fields cannot follow defaults across a base):
    #   include_window: the window's tokens join the answer's context (after the retrieved ones)
    #   positions: "contiguous" (retrieved, then window, re-rotated to follow the prefix) or "original"
    #   query: the text the retrieval forward reads, "question" or "prompt" (QUERIES), its upstream's by default
    #          (a knob, or a class constant where the upstream offers no other)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("positions", self.positions, POSITIONS)
        check_choice("query", self.query, QUERIES)

    def block_tokens(self, tokens_per_frame: int) -> int:
        """Tokens per retrieval block (a frame for ReKV, a page for LiveVLM)."""
        raise NotImplementedError

    def check_stream(self, chunk_frames: int, tokens_per_frame: int, budget: int, n_keep: int) -> None:
        """A question copies whole blocks into the buffer |M| - |C|: one block must fit, or every answer would read
        the window alone."""
        block = self.block_tokens(tokens_per_frame)
        if block > budget - n_keep:
            knob = f", or lower compress.{self.block_knob}" if self.block_knob else ""
            raise ValueError(
                f"a retrieval block of {block} tokens exceeds the retrieval buffer |M| - |C| = {budget - n_keep} "
                f"(|M| = {budget}, |C| = {n_keep}): raise compress.budget, lower compress.c_ratio{knob}"
            )

    def host_capacity(self, buffer_tokens: int) -> int | None:
        """Most tokens the host memory keeps (None: the whole stream)."""
        return None

    def blocks_to_retrieve(self, n_blocks: int, buffer_tokens: int, block: int) -> int:
        """How many of ``n_blocks`` candidate blocks a question copies back into a buffer of ``buffer_tokens``."""
        return min(n_blocks, buffer_tokens // block)
