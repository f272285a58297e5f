"""The streaming session: frames in, the memory shaped by a streaming method, questions answered on it.

One session streams one video at a time: :meth:`StreamingSession.start` makes the video's whole state
(:class:`VideoState`, :mod:`infinipotv.stream.video_state`: its cache, host stores, counts and trace). ``feed`` encodes
a chunk of frames and prefills it into the cache with causal positions; then the streaming method
(:mod:`infinipotv.stream.method`) shapes the memory: for a policy, when the video part of the cache holds |M|
(``budget``) tokens or more, every layer is compressed to |C| = c_ratio * |M| tokens per KV head, after the chunk's
forward (when a pass is due, and how a budget in bytes is held, is the :class:`Schedule`'s); a retrieval method keeps a
window and offloads the rest (:mod:`infinipotv.stream.retrieval`). Each step's record is
:mod:`infinipotv.stream.trace`'s. ``ask`` answers on the view of the memory the method gives the question (all of it, or
retrieved blocks) in the cache's transient mode, so the question and answer are gone afterwards and the memory never
depends on a question. A streaming question asked between two chunk boundaries also sees the frames since the last
boundary: ``ask(frames=...)`` prefills them transiently with the question, at the positions they will have when their
chunk is fed (after a view, right after it), so chunk boundaries (and so every compression pass) depend on the video
alone.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from infinipotv.compress import Policy
from infinipotv.kv.cache import StreamCache
from infinipotv.kv.store import FullPrecisionStore, KVStore
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import Asked, StreamingMethod, View, build_method
from infinipotv.stream.needles import Extent, evidence_ids, needle_stats, video_tokens_read
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.trace import PassClock, PeakMemory, TraceStep, sync
from infinipotv.stream.video_state import VideoState

TEXT_ID = -1  # stream id of a text token in the stores (vision tokens: their index in the video)


@dataclass
class Answer:
    text: str
    tokens: list[int]
    first_logprobs: torch.Tensor  # log-softmax of the first answer token's logits (vocabulary,)
    reference: "Answer | None" = None  # the same question answered from the uncompressed cache, when enabled
    ttft_s: float = 0.0  # from the question to its first token's logits, retrieval included
    accelerator_bytes: int = 0  # the cache's stores, the method's accelerator state and the view's buffers
    host_bytes: int = 0  # what the method holds in host memory while answering (an answer never changes it)
    video_tokens_read: float = 0.0  # vision tokens the prompt read, per layer and KV head (stream.needles)
    gate: dict | None = None  # an answer-time branch's record (WeaveTime: the branch that ran and its entropy)
    needle: dict[str, float] | None = None  # what the answer read of the question's evidence (stream.needles)


class StreamingSession:
    """Streams videos through a model adapter into a StreamCache under a streaming method built from ``policy``
    (:func:`~infinipotv.stream.method.build_method`).

    ``policy`` None, a ``budget`` of None, or a policy that never evicts (``Policy.evicts``): the session never
    changes its memory (no method, no :class:`Schedule`)."""

    def __init__(
        self,
        adapter: ModelAdapter,
        policy: Policy | None,
        budget: int | None,
        c_ratio: float,
        make_store: Callable[[], KVStore],
        reference: bool = False,
        byte_cap: ByteCap | None = None,
    ) -> None:
        self.adapter = adapter
        self.method: StreamingMethod | None = build_method(policy, adapter, budget, c_ratio, byte_cap)
        self.policy = policy if self.method is not None else None
        self.schedule = getattr(self.method, "schedule", None)  # a policy's (Compression's), else None
        self.make_store = make_store
        self.reference = reference
        self.peak = PeakMemory(adapter.device)
        self._video: VideoState | None = None

    @property
    def video(self) -> VideoState:
        """The state of the video being streamed."""
        if self._video is None:
            raise RuntimeError("no video is streaming: call session.start(video_id) before feed(), finish() or ask()")
        return self._video

    @property
    def trace(self) -> list[TraceStep]:
        """One record per streaming step of the current video (empty before the first video starts)."""
        return [] if self._video is None else self._video.trace

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def start(self, video_id: str) -> None:
        """A fresh cache holding the system prefix; the video starts right after it."""
        a = self.adapter
        ids = a.prefix_ids()
        positions = a.text_positions(0, len(ids))
        video_start = int(positions.max()) + 1
        self._video = VideoState(
            video_id=video_id,
            cache=StreamCache(a.n_layers, self.make_store),
            ref_cache=StreamCache(a.n_layers, lambda: FullPrecisionStore()) if self.reference else None,
            prefix_len=len(ids),
            video_start=video_start,
            next_position=video_start,
        )
        self.peak.reset()
        self._prefill(a.embed_text(ids), positions, torch.full((len(ids),), TEXT_ID))
        if self.method is not None:
            self.method.start(self._video)

    def feed(self, frames: np.ndarray, fps: float) -> None:
        """Encode and prefill raw frames ``[N, H, W, 3]`` uint8; compress if the video part reached |M|.

        Frames that do not fill a whole model frame (Qwen merges 2) wait for the next call or :meth:`finish`.
        """
        v = self.video
        v.fps = fps
        v.frames_seen += len(frames)
        if v.pending is not None:
            frames = np.concatenate([v.pending, frames])
        step = self.adapter.frames_per_step
        usable = len(frames) - len(frames) % step
        v.pending = frames[usable:] if usable < len(frames) else None
        if usable:
            self._encode(frames[:usable])

    def finish(self) -> None:
        """End of the video: a leftover partial model frame is completed by repeating its last raw frame."""
        v = self.video
        if v.pending is not None:
            frames, v.pending = self._whole_steps(v.pending), None
            self._encode(frames)

    def _whole_steps(self, frames: np.ndarray) -> np.ndarray:
        """``frames`` completed to whole model frames by repeating the last raw frame (Qwen merges 2)."""
        missing = -len(frames) % self.adapter.frames_per_step
        return np.concatenate([frames, np.repeat(frames[-1:], missing, axis=0)]) if missing else frames

    # -- streaming ------------------------------------------------------------------------------------------------
    def _encode(self, frames: np.ndarray) -> None:
        """One step: encode the chunk, let the method prune before it (if its upstream does), prefill it, let the
        method shape the memory (a policy: compress when the schedule says so, hold the byte cap), then record the
        step."""
        a, v, method = self.adapter, self.video, self.method
        sync(a.device)
        t0 = time.perf_counter()
        chunk = a.encode_frames(frames, v.frames_encoded, v.fps, v.video_start)
        self._check_chunk(chunk)
        n = chunk.embeds.shape[0]  # encoded: the stream ids and positions count these, whatever a filter keeps
        end = int(chunk.positions.max()) + 1
        clock = PassClock(a.device)
        ids = torch.arange(v.vision_tokens, v.vision_tokens + n)
        held = v.video_tokens
        if method is not None:
            method.before_chunk(v, chunk, clock)
            chunk, ids = method.before_prefill(v, chunk, ids, transient=False)
        before = held + len(ids)  # what the memory would hold with the chunk, had nothing been pruned before it
        stream = method is None or method.prefills_chunks
        if method is not None and method.capture_chunk_queries:
            with a.capture_queries() as captured:
                self._prefill(chunk.embeds, chunk.positions, ids)
            queries = [layer[0] for layer in captured]  # the committing forward's (a reference cache's comes after)
        else:
            self._prefill(chunk.embeds, chunk.positions, ids, stream)
            queries = None
        if method is not None:
            method.after_chunk(v, chunk, ids, clock, queries)
        sync(a.device)
        step_s = time.perf_counter() - t0
        v.extents.append(Extent(v.frames_encoded, len(frames), v.vision_tokens, n))
        v.frames_encoded += len(frames)
        v.vision_tokens += n
        v.next_position = max(v.next_position, end)
        v.trace.append(
            TraceStep.of(
                v.cache,
                video_id=v.video_id,
                step=len(v.trace),
                frames_seen=v.frames_encoded,
                prefix_tokens=v.prefix_len,
                peak_memory_bytes=self.peak.read(),
                encode_seconds=step_s - clock.seconds,
                compress=clock.record(before, v.video_tokens),
                accelerator_bytes=self._accelerator_bytes(),
                host_bytes=self.method.host_bytes(v) if self.method is not None else 0,
                frames_encoded=len(frames),
            )
        )

    def _accelerator_bytes(self, view: View | None = None) -> int:
        """Bytes on the accelerator now: the stores, the method's own state there, and a question's view."""
        own = self.method.accelerator_bytes(self.video) if self.method is not None else 0
        return sum(self.video.cache.nbytes().values()) + own + (view.nbytes if view is not None else 0)

    def _check_chunk(self, chunk: VisionChunk) -> None:
        v = self.video
        if v.grid is None:
            v.grid = chunk.grid
        if chunk.grid != v.grid:
            raise ValueError(f"frame grid changed within a video: {v.grid} then {chunk.grid}")
        if self.method is not None:
            self.method.check_chunk(chunk.embeds.shape[0], chunk.n_frames)

    def _prefill(
        self, embeds: torch.Tensor, positions: torch.Tensor, token_ids: torch.Tensor, stream: bool = True
    ) -> None:
        """Prefill into the stream's cache (unless ``stream`` is False: a method that keeps no streaming context)
        and the reference cache."""
        for cache in (self.video.cache if stream else None, self.video.ref_cache):
            if cache is not None:
                cache.commit(token_ids.to(self.adapter.device))
                self.adapter.forward(embeds, positions, cache, logits=False)

    # -- questions ------------------------------------------------------------------------------------------------
    def ask(
        self,
        prompt: str,
        max_new_tokens: int,
        frames: np.ndarray | None = None,
        fps: float | None = None,
        stop: str | None = None,
        evidence: tuple[int, int] | None = None,
        question: str | None = None,
    ) -> Answer:
        """Greedy answer on the current memory; the question and answer are removed from the cache afterwards.
        Decoding ends at an end-of-sequence token, after ``max_new_tokens``, or once the text matches ``stop`` (a
        regular expression).

        ``frames``: raw frames streamed since the last chunk boundary, up to the question's time (``fps`` their
        rate). They are encoded and prefilled with the question, transiently: the memory after the answer is the
        memory before it, and the frames are fed again, as part of their chunk, when the stream reaches its end.

        ``evidence``: the raw frames ``[first, end)`` (indices of the stream) that show the answer, when the
        benchmark knows them; the answer then records what it read of them (:mod:`infinipotv.stream.needles`).

        ``question``: the question's own text, without options, template or answer cue
        (:attr:`~infinipotv.data.base.Question.text`), what a method's retrieval forward reads where its upstream
        reads the question alone; None: the prompt is the question (a caller with no separate text)."""
        v = self.video
        if frames is not None and v.pending is not None:
            raise RuntimeError("ask(frames=...) after a partial model frame was fed: feed whole chunks before it")
        tail, extents = None, v.extents
        if frames is not None and len(frames):
            whole = self._whole_steps(frames)
            tail = self.adapter.encode_frames(whole, v.frames_encoded, fps or v.fps, v.video_start)
            if v.grid is not None and tail.grid != v.grid:
                raise ValueError(f"frame grid changed within a video: {v.grid} then {tail.grid}")
            extents = [*extents, Extent(v.frames_encoded, len(whole), v.vision_tokens, tail.embeds.shape[0])]
        wanted = None if evidence is None else evidence_ids(extents, *evidence, self.adapter.frames_per_step)
        asked = Asked.of_text(self.adapter, prompt, question, 0 if tail is None else tail.n_frames)
        answer = self._answer(v.cache, asked, max_new_tokens, tail, stop, self.method, wanted)
        if v.ref_cache is not None:
            answer.reference = self._answer(v.ref_cache, asked, max_new_tokens, tail, stop, None)
        return answer

    @torch.inference_mode()
    def _answer(
        self,
        cache: StreamCache,
        asked: Asked,
        max_new_tokens: int,
        tail: VisionChunk | None,
        stop: str | None,
        method: StreamingMethod | None,
        evidence: torch.Tensor | None = None,
    ) -> Answer:
        """Greedy decoding in the cache's transient mode, on the view the ``method`` gives (None: all memory).

        The view replaces the stored video memory after the prefix, and the question starts at the view's
        position; frames since the last boundary (``tail``) are prefilled after it, at their own positions. A method
        with an answer-time branch (:meth:`StreamingMethod.reconsider`) sees the prompt's logits and queries on
        that view and may have the prompt prefilled again on another, which the answer then decodes from.
        ``evidence``: stream ids of the frames that show the answer; the answer records what it read of them."""
        a, ids = self.adapter, asked.prompt
        sync(a.device)
        t0 = time.perf_counter()
        view = method.view(self.video, asked) if method is not None else None
        tail_ids = None
        if tail is not None:
            first = self.video.vision_tokens
            tail_ids = torch.arange(first, first + tail.embeds.shape[0])
            if method is not None:
                tail, tail_ids = method.before_prefill(self.video, tail, tail_ids, transient=True)
        branch = method is not None and method.capture_answer_queries
        gate = None
        while True:
            with cache.transient(view=None if view is None else view.layers):
                with a.capture_queries() if branch else nullcontext() as captured:
                    logits, position = self._prompt(cache, view, tail, ids)
                if branch:
                    branch, (second, gate) = False, method.reconsider(self.video, logits, [q[-1] for q in captured])
                    if second is not None:
                        view = second
                        continue  # the first forward's cache is dropped; the prompt is prefilled on the second view
                first = torch.log_softmax(logits, dim=-1).cpu()
                ttft = time.perf_counter() - t0
                out = self._decode(cache, logits, position, max_new_tokens, stop)
                break
        held = self._accelerator_bytes(view) if cache is self.video.cache else sum(cache.nbytes().values())
        read = self._read_ids(cache, view, tail_ids)
        return Answer(
            text=a.decode(out),
            tokens=out,
            first_logprobs=first,
            ttft_s=ttft,
            accelerator_bytes=held,
            host_bytes=method.host_bytes(self.video) if method is not None else 0,
            video_tokens_read=video_tokens_read(read),
            gate=gate,
            needle=None if evidence is None else needle_stats(read, evidence),
        )

    @staticmethod
    def _read_ids(cache: StreamCache, view: View | None, tail_ids: torch.Tensor | None) -> list[torch.Tensor]:
        """Per layer the stream ids of the tokens a prompt read: the view's, or the stored memory's, then the
        frames since the boundary."""
        read = view.ids if view is not None else [store.token_ids() for store in cache.stores]
        if tail_ids is None:
            return read
        return [torch.cat([r, tail_ids.to(r).expand(*r.shape[:-1], -1)], dim=-1) for r in read]

    def _prompt(
        self, cache: StreamCache, view: View | None, tail: VisionChunk | None, ids: list[int]
    ) -> tuple[torch.Tensor, int]:
        """Prefill the frames since the boundary and the prompt on the cache in its transient mode: the next
        token's logits ``[V]`` and the position the next token takes."""
        a = self.adapter
        start = self.video.next_position if view is None else view.start
        if tail is not None:  # after a view, the frames since the boundary follow it (a shift of 0 in place)
            placed = view is not None and view.tail_placed
            positions = tail.positions + (0 if placed else start - self.video.next_position)
            a.forward(tail.embeds, positions, cache, logits=False)
            start = max(start, int(positions.max()) + 1)
        logits = a.forward(a.embed_text(ids), a.text_positions(start, len(ids)), cache)[-1]
        return logits, start + len(ids)

    def _decode(
        self, cache: StreamCache, logits: torch.Tensor, position: int, max_new_tokens: int, stop: str | None
    ) -> list[int]:
        """Greedy tokens from the prompt's ``logits``, each at the next ``position``, until an end-of-sequence
        token, ``max_new_tokens`` or ``stop``."""
        a, out = self.adapter, []
        while True:
            token = int(logits.argmax())
            if token in a.eos_ids:
                return out
            out.append(token)
            if len(out) == max_new_tokens or (stop is not None and re.search(stop, a.decode(out))):
                return out
            logits = a.forward(a.embed_text([token]), a.text_positions(position, 1), cache)[-1]
            position += 1
