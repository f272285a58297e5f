"""A streaming method: what happens to the memory after each chunk, and which view of it a question reads.

The session (:mod:`infinipotv.stream.session`) owns the order of events and the guarantees: a chunk is encoded,
:meth:`StreamingMethod.before_chunk` may prune the memory (a method whose upstream evicts first), the chunk is
prefilled into the cache with causal positions, then :meth:`StreamingMethod.after_chunk` shapes the memory; a
question first asks :meth:`StreamingMethod.view` which view of the memory its prompt and answer read, then reads it
in the cache's transient mode, so the memory after the answer is the memory before it and the stream stays fixed by
the video. A method decides only those two things (plus a chunk-size check and the bytes it holds outside the cache).

How a method plugs in (docs/extending.md, "a method that retrieves at question time"):

1. The rule: its parameters, a frozen dataclass in ``infinipotv/compress/params/NAME.py`` registered with
   ``@register("NAME", "infinipotv.compress.NAME:CLASS")`` (its fields become ``compress.FIELD``; bad knobs are
   refused in one line, before torch loads), and its tensor code in ``infinipotv/compress/NAME.py``, subclassing
   them and ``Policy`` or a base made for its kind (``compress.retrieval.RetrievalPolicy``). Its class attribute
   ``streaming`` names the streaming method that drives it: ``"compression"`` (every ``Policy``: a pass keeps the
   top |C| when the video part reaches |M|; questions read the whole memory) or ``"retrieval"`` (ReKV, LiveVLM).
2. A new kind of streaming (a merge into prototypes, a filter before the LLM...): a :class:`StreamingMethod`
   subclass registered with ``@streaming_method("KIND")`` in a module imported by ``infinipotv/stream/__init__.py``.
   It is built as ``cls(policy, adapter, budget, c_ratio, byte_cap)`` and may use the session's hooks:
   ``adapter.capture_queries()`` (per-layer pre-RoPE queries of a forward: H1 retrieval, H4 scores;
   :attr:`capture_chunk_queries` has the session capture them during each chunk's prefill), ``adapter.rerotate``
   (H5), :class:`~infinipotv.kv.host.HostStore` (H2: ``video.host``, one per layer, made in :meth:`start`), and a
   :class:`View` (H1: the tensors a question reads after the prefix, instead of the stored video memory).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from infinipotv.compress import FrameLayout, Policy
from infinipotv.kv.store import KVStore
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.registry import Registry
from infinipotv.stream.schedule import ByteCap, Schedule
from infinipotv.stream.trace import PassClock
from infinipotv.stream.video_state import VideoState


@dataclass
class View:
    """What a question's prompt and answer read before their own tokens, per layer: ``layers[i]`` = the keys and
    the values as runs ``[H, N_i, D]`` on the accelerator, read in order (the stored prefix, then retrieved blocks,
    the window...; a run of the stored tensors is read in place), instead of what the store holds (the totals may
    differ between layers: StreamKV's layer-adaptive retrieval); None: what the stores read (a view that only
    places the question). ``start``: the position of the question's first token. ``nbytes``: the accelerator
    bytes the view's own tensors occupy (a retrieval buffer), counted in the answer's memory.
    ``tail_placed``: the method's :meth:`StreamingMethod.before_prefill` already put the frames since the last
    boundary where they follow the view (StreamingVLM's shrink); otherwise the session shifts them by ``start``
    less the position they were encoded for. ``ids``: per layer the stream ids of the tokens it reads, in order
    (``[N]`` when the heads agree, else ``[H, N]``; text negative), so a question can count what it read of its
    evidence (:mod:`infinipotv.stream.needles`)."""

    layers: list[tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] | None
    start: int
    nbytes: int
    ids: list[torch.Tensor]
    tail_placed: bool = False


@dataclass(frozen=True)
class Asked:
    """The text a question brings, as token ids. ``prompt``: what the answer reads after the video (the benchmark's
    prompt in the adapter's template, answer cue included). ``question``: the question's own text alone
    (:attr:`~infinipotv.data.base.Question.text` through :meth:`ModelAdapter.text_ids`: no options, template or
    cue). A method's retrieval forward reads the one its upstream reads (a policy's ``query`` knob where it has one).
    ``frames``: the model frames shown since the last chunk boundary, prefilled with the question
    (``ask(frames=...)``): a method whose upstream prunes before a chunk's prefill makes room for them."""

    prompt: list[int]
    question: list[int]
    frames: int = 0

    @classmethod
    def of_text(cls, adapter: ModelAdapter, prompt: str, question: str | None = None, frames: int = 0) -> "Asked":
        """The ids of ``prompt`` in the adapter's template and of ``question`` alone (None: the prompt is the
        question, a caller with no separate text)."""
        return cls(adapter.question_ids(prompt), adapter.text_ids(prompt if question is None else question), frames)

    def of(self, query: str) -> list[int]:
        """The ids a retrieval forward reads for ``query`` = ``question`` | ``prompt``."""
        return self.question if query == "question" else self.prompt


class StreamingMethod(ABC):
    """One streaming method for one session (its per-video state lives on the :class:`VideoState`)."""

    #: The session captures each layer's pre-RoPE queries during a chunk's prefill and hands them to after_chunk.
    capture_chunk_queries: bool = False
    #: The session captures each layer's pre-RoPE queries of a question's prompt forward and hands them, with the
    #: prompt's next-token logits, to :meth:`reconsider` (an answer-time branch: WeaveTime's gate).
    capture_answer_queries: bool = False
    #: False: the session does not prefill a chunk into the cache (a method that keeps no streaming context and
    #: encodes the chunk itself in :meth:`after_chunk`, MuKV's side prefills); the reference cache still gets it.
    prefills_chunks: bool = True

    def start(self, video: VideoState) -> None:
        """A new video starts (its cache holds the prefix): make per-video state (host stores...)."""

    @classmethod
    def check_byte_cap(cls) -> None:
        """Fail (one line naming what to use instead) when the method cannot hold a budget given in bytes
        (``compress.budget_mib``: after every step the stores, and the method's accelerator state, hold at most
        :class:`~infinipotv.stream.schedule.ByteCap`'s ``cap``). Checked when the config is validated and when the
        method is built with a cap. Default: it holds it."""

    def check_chunk(self, tokens: int, frames: int) -> None:
        """Fail on a chunk the method cannot take (before it is prefilled)."""

    def before_chunk(self, video: VideoState, chunk: VisionChunk, clock: PassClock) -> None:
        """Shape the memory before ``chunk`` (encoded and checked, not yet filtered) is prefilled: a method whose
        upstream prunes first (StreamingVLM) evicts here, so the chunk's forward reads only what is kept. Timed and
        counted through ``clock`` as in :meth:`after_chunk`. Not called for the frames a question prefills. Default:
        nothing."""

    def before_prefill(
        self, video: VideoState, chunk: VisionChunk, token_ids: torch.Tensor, transient: bool
    ) -> tuple[VisionChunk, torch.Tensor]:
        """H3, a filter before the LLM: the chunk to prefill and its stream ids ``[N]`` (given: the next N vision
        ids). Called on every encoded chunk after :meth:`check_chunk`, and with ``transient`` on the frames a
        question prefills with itself (``ask(frames=...)``); a filter that drops or merges tokens returns fewer rows
        (embeddings, positions and ids together). Default: unchanged."""
        return chunk, token_ids

    @abstractmethod
    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        """Shape the memory after ``chunk`` (stream ids ``token_ids``) was prefilled into ``video.cache``. Time spent
        compressing goes through ``clock.timed()`` and counts in ``clock.passes``. ``queries``: per layer
        ``[H_q, N, D]`` of the chunk's prefill when :attr:`capture_chunk_queries`, else None."""

    def view(self, video: VideoState, asked: Asked) -> View | None:
        """The view a question reads (None: the whole stored memory). Called before the question's prompt
        forward; anything it prefills must be transient. ``asked``: the question's text and prompt as ids."""
        return None

    def reconsider(
        self, video: VideoState, logits: torch.Tensor, queries: list[torch.Tensor]
    ) -> tuple[View | None, dict | None]:
        """An answer-time branch, called after the prompt's forward on :meth:`view` when
        :attr:`capture_answer_queries`: ``logits [V]`` of the next token, ``queries`` per layer ``[H_q, N, D]`` of
        the prompt (pre-RoPE). Returns the view to prefill the prompt again on and decode from (None: decode from
        the first forward's cache) and what the answer records of the choice (its prediction's ``gate``)."""
        return None, None

    def accelerator_bytes(self, video: VideoState) -> int:
        """Bytes the method holds on the accelerator outside the cache's stores (0 by default)."""
        return 0

    def host_bytes(self, video: VideoState) -> int:
        """Bytes the method holds in host memory (offloaded blocks)."""
        return sum(sum(store.nbytes().values()) for store in video.host if not store.on_accelerator)


STREAMING: Registry[type[StreamingMethod]] = Registry("streaming method")


def streaming_method(kind: str):
    """Class decorator: the streaming method that drives every policy whose ``streaming`` is ``kind``."""

    def decorate(cls: type[StreamingMethod]) -> type[StreamingMethod]:
        return STREAMING.add(kind, cls)

    return decorate


def build_method(
    policy: Policy | None, adapter: ModelAdapter, budget: int | None, c_ratio: float, byte_cap: ByteCap | None
) -> StreamingMethod | None:
    """The streaming method of ``policy`` (None: a session that never changes its memory: no policy, no budget, or
    a policy that never evicts)."""
    if policy is None or budget is None or not policy.evicts:
        return None
    kind = policy.streaming
    if kind not in STREAMING:
        raise ValueError(f"policy {policy.name!r} names streaming method {kind!r}; known: {', '.join(STREAMING)}")
    if byte_cap is not None:
        STREAMING[kind].check_byte_cap()
    return STREAMING[kind](policy, adapter, budget, c_ratio, byte_cap)


@streaming_method("compression")
class Compression(StreamingMethod):
    """A policy under a :class:`Schedule`: when the video part reaches |M| tokens, a pass over every layer keeps the
    prefix and the policy's |C| video tokens per head (InfiniPot-V and every policy); under a byte cap, the further
    passes the schedule asks for. Questions read the whole memory."""

    def __init__(
        self, policy: Policy, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.policy = policy
        self.n_layers = adapter.n_layers
        every_chunk = policy.every_chunk
        self.schedule = Schedule.per_chunk(budget, byte_cap) if every_chunk else Schedule.of(budget, c_ratio, byte_cap)

    def check_chunk(self, tokens: int, frames: int) -> None:
        self.schedule.check_chunk(tokens, frames)

    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        n_keep = self.schedule.due(video.video_tokens)
        if n_keep is not None:
            clock.bytes_before = held_bytes(video)
            with clock.timed():
                self.compress(video, n_keep)
            clock.passes += 1
        self.hold_byte_cap(video, clock)

    def hold_byte_cap(self, video: VideoState, clock: PassClock) -> None:
        """Under a byte cap, the further passes :meth:`Schedule.byte_pass` asks for (measured only when there is
        a cap)."""
        if self.schedule.byte_cap is None:
            return
        held = held_bytes(video)
        while (n_keep := self.schedule.byte_pass(clock.passes, held, video.video_tokens)) is not None:
            with clock.timed():
                self.compress(video, n_keep)
                held = held_bytes(video)
            clock.passes += 1

    @torch.inference_mode()
    def compress(self, video: VideoState, n_keep: int) -> None:
        """One pass over every layer after the forward, a layer at a time (over KIVI one layer's dequantized keys
        and values are alive at once)."""
        for layer, store in enumerate(video.cache.stores):
            self.compress_layer(video, layer, store, n_keep)

    def compress_layer(self, video: VideoState, layer: int, store: KVStore, n_keep: int) -> None:
        """Keep the prefix and the policy's ``n_keep`` video tokens per head of one layer's store."""
        p = video.prefix_len
        keys, values = store.read()
        layout = FrameLayout(token_ids=store.token_ids()[:, p:], grid=video.grid)  # int32 ids: the views need no more
        kept = self.policy(keys[:, p:], values[:, p:], layout, n_keep, layer, self.n_layers)
        prefix = torch.arange(p, device=kept.device).expand(kept.shape[0], p)
        store.keep(torch.cat([prefix, kept + p], dim=1))


def held_bytes(video: VideoState) -> int:
    """Bytes the cache's stores occupy now."""
    return sum(video.cache.nbytes().values())
