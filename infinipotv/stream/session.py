"""The streaming session: frames in, continual compression under a hard cap, questions answered on the memory.

One session streams one video at a time. ``feed`` encodes a chunk of frames and prefills it into the cache with
causal positions; when the video part of the cache holds |M| (``budget``) tokens or more, every layer is compressed to
|C| = c_ratio * |M| tokens per KV head by the policy. Over a KIVI cache, whose read builds full-precision tensors,
the pass a chunk triggers runs on each layer as soon as that chunk's forward is done with the layer
(:meth:`StreamCache.after_attention`), on the keys and values attention just read: the same memory as a pass after
the forward (a forward never reads a layer again after its attention), without dequantizing the cache twice. Over
full-precision stores, whose read is free, it runs after the forward, on data still warm in the CPU's caches
(``KVStore.read_is_view``). A budget given in bytes (:class:`ByteCap`) is also held on the
bytes the cache really occupies, which KIVI's partially evicted key groups can push past the formula. ``ask``
answers on the current memory in the cache's transient mode, so the question and answer are gone afterwards and the
memory never depends on a question. A streaming question asked between two chunk boundaries also sees the frames
since the last boundary: ``ask(frames=...)`` prefills them transiently with the question, at the positions they
will have when their chunk is fed, so chunk boundaries (and so every compression pass) depend on the video alone.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from infinipotv.compress import FrameLayout, compressed_size
from infinipotv.kv.accounting import Storage, cache_bytes
from infinipotv.kv.cache import StreamCache
from infinipotv.kv.store import FullPrecisionStore, KVStore
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.trace import CompressRecord, PeakMemory, TraceStep

TEXT_ID = -1  # stream id of a text token in the stores (vision tokens: their index in the video)


@dataclass(frozen=True)
class ByteCap:
    """A KV budget given in bytes (``compress.budget_mib``), held on the bytes the stores really occupy.

    The budget is converted to |M| tokens with the full-group formula, but under KIVI a key group thinned by eviction
    keeps its scale/zero row while any token of it survives (never re-quantized: spec/kivi.md), so |M| kept tokens
    can occupy more than the formula says. The session therefore also compresses when a step leaves more than
    ``cap`` bytes, and a pass that leaves more than ``after_pass`` bytes (the formula's figure for |C| tokens) keeps
    fewer tokens, so the cache never holds more than ``cap`` bytes after a step (between a chunk's prefill and the
    pass it triggers it may, by up to that chunk, as with tokens). Full-precision storage costs exactly the formula,
    so for it the cap never acts before |M| tokens.
    """

    cap: int
    after_pass: int

    @classmethod
    def of(cls, budget: int, c_ratio: float, prefix: int, shape: tuple[int, int, int], storage: Storage) -> "ByteCap":
        """The formula's bytes for |M| = ``budget`` and |C| video tokens plus the ``prefix``, over the whole model
        (``shape`` = layers, KV heads, head_dim)."""
        def formula(video: int) -> int:
            return int(cache_bytes(video + prefix, *shape, storage))

        return cls(cap=formula(budget), after_pass=formula(compressed_size(budget, c_ratio)))


@dataclass
class Answer:
    text: str
    tokens: list[int]
    first_logprobs: torch.Tensor  # log-softmax of the first answer token's logits (vocabulary,)
    reference: "Answer | None" = None  # the same question answered from the uncompressed cache, when enabled


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class _PassClock:
    """Compression time within one step (synchronised on a GPU around each timed call) and the passes made."""

    device: torch.device
    seconds: float = 0.0
    passes: int = 0

    @contextmanager
    def timed(self) -> Iterator[None]:
        _sync(self.device)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            _sync(self.device)
            self.seconds += time.perf_counter() - t0

    def timing(self, fn: Callable[..., None]) -> Callable[..., None]:
        """``fn`` timed on every call (each layer of a pass made during the forward)."""
        def timed_fn(*args: object) -> None:
            with self.timed():
                fn(*args)

        return timed_fn


class StreamingSession:
    """Streams videos through a model adapter into a StreamCache under a compression policy."""

    def __init__(
        self,
        adapter: ModelAdapter,
        policy: Callable | None,
        budget: int | None,
        c_ratio: float,
        make_store: Callable[[], KVStore],
        reference: bool = False,
        byte_cap: ByteCap | None = None,
    ) -> None:
        self.adapter = adapter
        self.policy = policy if budget is not None and getattr(policy, "evicts", True) else None
        self.budget = budget
        self.n_keep = None if budget is None else compressed_size(budget, c_ratio)
        self.make_store = make_store
        self.reference = reference
        self.byte_cap = byte_cap
        self.peak = PeakMemory(adapter.device)
        self.trace: list[TraceStep] = []

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def start(self, video_id: str) -> None:
        """A fresh cache holding the system prefix; the video starts right after it."""
        a = self.adapter
        self.video_id = video_id
        self.cache = StreamCache(a.n_layers, self.make_store)
        self.ref_cache = StreamCache(a.n_layers, lambda: FullPrecisionStore()) if self.reference else None
        self.trace = []
        self.peak.reset()
        ids = a.prefix_ids()
        positions = a.text_positions(0, len(ids))
        self._prefill(a.embed_text(ids), positions, torch.full((len(ids),), TEXT_ID))
        self.prefix_len = len(ids)
        self.video_start = int(positions.max()) + 1
        self.next_position = self.video_start
        self.frames_seen = 0  # raw frames fed (encoded or pending)
        self.frames_encoded = 0
        self.vision_tokens = 0  # vision tokens ever prefilled (their stream ids are 0..vision_tokens-1)
        self.grid: tuple[int, int] | None = None
        self._pending: np.ndarray | None = None
        self._fps = 1.0

    def feed(self, frames: np.ndarray, fps: float) -> None:
        """Encode and prefill raw frames ``[N, H, W, 3]`` uint8; compress if the video part reached |M|.

        Frames that do not fill a whole model frame (Qwen merges 2) wait for the next call or :meth:`finish`.
        """
        self._fps = fps
        self.frames_seen += len(frames)
        if self._pending is not None:
            frames = np.concatenate([self._pending, frames])
        step = self.adapter.frames_per_step
        usable = len(frames) - len(frames) % step
        self._pending = frames[usable:] if usable < len(frames) else None
        if usable:
            self._encode(frames[:usable])

    def finish(self) -> None:
        """End of the video: a leftover partial model frame is completed by repeating its last raw frame."""
        if self._pending is not None:
            frames, self._pending = self._whole_steps(self._pending), None
            self._encode(frames)

    def _whole_steps(self, frames: np.ndarray) -> np.ndarray:
        """``frames`` completed to whole model frames by repeating the last raw frame (Qwen merges 2)."""
        missing = -len(frames) % self.adapter.frames_per_step
        return np.concatenate([frames, np.repeat(frames[-1:], missing, axis=0)]) if missing else frames

    # -- streaming ------------------------------------------------------------------------------------------------
    def _encode(self, frames: np.ndarray) -> None:
        a = self.adapter
        _sync(a.device)
        t0 = time.perf_counter()
        chunk = a.encode_frames(frames, self.frames_encoded, self._fps, self.video_start)
        self._check_chunk(chunk)
        n = chunk.embeds.shape[0]
        ids = torch.arange(self.vision_tokens, self.vision_tokens + n)
        before = self.video_tokens + n
        clock = _PassClock(a.device)
        due = self.policy is not None and before >= self.budget
        n_keep = min(self.n_keep, before - 1) if due else 0
        # over stores whose read is not free, each layer is compressed as soon as the forward is done with it, on
        # what its attention read; otherwise (and with nothing due) the forward runs as it is
        during = due and not self.cache.stores[0].read_is_view
        with self.cache.after_attention(clock.timing(self._layer_pass(n_keep))) if during else nullcontext():
            self._prefill(chunk.embeds, chunk.positions, ids)
        if due:
            if not during:
                with clock.timed():
                    self._pass(n_keep)
            clock.passes += 1
        self._hold_byte_cap(clock)
        _sync(a.device)
        step_s = time.perf_counter() - t0
        self.frames_encoded += len(frames)
        self.vision_tokens += n
        self.next_position = max(self.next_position, int(chunk.positions.max()) + 1)
        record = (CompressRecord(tokens_before=before, tokens_after=self.video_tokens, seconds=clock.seconds,
                                 passes=clock.passes) if clock.passes else None)
        self._record(step_s - clock.seconds, record)

    def _check_chunk(self, chunk: VisionChunk) -> None:
        if self.grid is None:
            self.grid = chunk.grid
        if chunk.grid != self.grid:
            raise ValueError(f"frame grid changed within a video: {self.grid} then {chunk.grid}")
        if self.budget is not None and self.policy is not None and chunk.embeds.shape[0] >= self.budget - self.n_keep:
            raise ValueError(
                f"a chunk of {chunk.n_frames} frames holds {chunk.embeds.shape[0]} vision tokens, not fewer than "
                f"|M| - |C| = {self.budget - self.n_keep}: lower eval.chunk_frames or raise compress.budget"
            )

    def _prefill(self, embeds: torch.Tensor, positions: torch.Tensor, token_ids: torch.Tensor) -> None:
        for cache in (self.cache, self.ref_cache):
            if cache is not None:
                cache.commit(token_ids.to(self.adapter.device))
                self.adapter.forward(embeds, positions, cache, logits=False)

    @property
    def video_tokens(self) -> int:
        """Vision tokens per layer per KV head now in the cache."""
        return self.cache.committed_length() - self.prefix_len

    def _held_bytes(self) -> int:
        return sum(self.cache.nbytes().values())

    def _hold_byte_cap(self, clock: "_PassClock") -> None:
        """Under a byte cap: compress when the step left more than ``cap`` bytes and no pass has run, then keep
        fewer tokens while the last pass left more than ``after_pass`` (each further pass runs the same policy on
        the memory the previous one left). Measured only when there is a cap."""
        cap = self.byte_cap
        if cap is None or self.policy is None:
            return
        held = self._held_bytes()
        if not clock.passes and held <= cap.cap:
            return
        n_keep = self.n_keep
        while not clock.passes or held > cap.after_pass:
            if clock.passes:
                n_keep = self.video_tokens * cap.after_pass // held
            n_keep = min(n_keep, self.video_tokens - 1)
            if n_keep < 1:
                return
            with clock.timed():
                self._pass(n_keep)
                held = self._held_bytes()
            clock.passes += 1

    @torch.inference_mode()
    def _pass(self, n_keep: int) -> None:
        """One pass over every layer after the forward: each store read again."""
        compress = self._layer_pass(n_keep)
        for layer, store in enumerate(self.cache.stores):
            compress(layer, *store.read())

    def _layer_pass(self, n_keep: int) -> Callable[[int, torch.Tensor, torch.Tensor], None]:
        """Compress one layer, given the keys and values its store holds: keep the prefix and the policy's
        ``n_keep`` video tokens per head."""
        p, n_layers = self.prefix_len, self.adapter.n_layers

        @torch.inference_mode()
        def compress(layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
            store = self.cache.stores[layer]
            layout = FrameLayout(token_ids=store.token_ids()[:, p:].long(), grid=self.grid)
            kept = self.policy(keys[:, p:], values[:, p:], layout, n_keep, layer, n_layers)
            prefix = torch.arange(p, device=kept.device).expand(kept.shape[0], p)
            store.keep(torch.cat([prefix, kept + p], dim=1))

        return compress

    def _record(self, encode_s: float, record: CompressRecord | None) -> None:
        by_layer = self.cache.nbytes_by_layer()
        parts = self.cache.nbytes(by_layer)
        self.trace.append(
            TraceStep(
                video_id=self.video_id, step=len(self.trace), frames_seen=self.frames_encoded,
                prefix_tokens=self.prefix_len, video_tokens=self.video_tokens,
                total_tokens=self.cache.committed_length(), cache_bytes=sum(parts.values()),
                cache_bytes_by_part=parts, layer_bytes=self.cache.layer_nbytes(by_layer),
                peak_memory_bytes=self.peak.read(), encode_seconds=encode_s, compress=record,
            )
        )

    # -- questions ------------------------------------------------------------------------------------------------
    def ask(self, prompt: str, max_new_tokens: int, frames: np.ndarray | None = None, fps: float | None = None) -> Answer:
        """Greedy answer on the current memory; the question and answer are removed from the cache afterwards.

        ``frames``: raw frames streamed since the last chunk boundary, up to the question's time (``fps`` their
        rate). They are encoded and prefilled with the question, transiently: the memory after the answer is the
        memory before it, and the frames are fed again, as part of their chunk, when the stream reaches its end."""
        if frames is not None and self._pending is not None:
            raise RuntimeError("ask(frames=...) after a partial model frame was fed: feed whole chunks before it")
        tail = None
        if frames is not None and len(frames):
            tail = self.adapter.encode_frames(self._whole_steps(frames), self.frames_encoded, fps or self._fps,
                                              self.video_start)
            if self.grid is not None and tail.grid != self.grid:
                raise ValueError(f"frame grid changed within a video: {self.grid} then {tail.grid}")
        answer = self._answer(self.cache, prompt, max_new_tokens, tail)
        if self.ref_cache is not None:
            answer.reference = self._answer(self.ref_cache, prompt, max_new_tokens, tail)
        return answer

    @torch.inference_mode()
    def _answer(self, cache: StreamCache, prompt: str, max_new_tokens: int, tail: VisionChunk | None) -> Answer:
        a = self.adapter
        ids = a.question_ids(prompt)
        eos = a.eos_ids
        with cache.transient():
            start = self.next_position
            if tail is not None:
                a.forward(tail.embeds, tail.positions, cache, logits=False)
                start = max(start, int(tail.positions.max()) + 1)
            logits = a.forward(a.embed_text(ids), a.text_positions(start, len(ids)), cache)[-1]
            first = torch.log_softmax(logits, dim=-1).cpu()
            position, out = start + len(ids), []
            while True:
                token = int(logits.argmax())
                if token in eos:
                    break
                out.append(token)
                if len(out) == max_new_tokens:
                    break
                logits = a.forward(a.embed_text([token]), a.text_positions(position, 1), cache)[-1]
                position += 1
        return Answer(text=a.decode(out), tokens=out, first_logprobs=first)
