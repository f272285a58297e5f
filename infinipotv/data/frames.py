"""Frames for the stream, decoded chunk by chunk in the background while the model works on the previous chunk.

A :class:`FrameSource` knows every sampled frame's time stamp up front (its :class:`~infinipotv.data.video.FramePlan`,
from the container's metadata) and hands out frames by index range in increasing order, ``read(start, stop)``. A
background thread decodes the plan sequentially with PyAV, resizes each chunk to the model's input size
(:meth:`ModelAdapter.frame_size <infinipotv.models.base.ModelAdapter.frame_size>`, so 720p frames never pile up on
the host) and queues at most ``depth`` chunks ahead: host memory stays flat in the video's length. A range may be
read again from its start (a question's transient tail, then the same frames as part of the next whole chunk): the
frames from the last read's start on are kept until a later read starts past them. An error in the background
(a corrupt file) is raised as :class:`~infinipotv.data.video.VideoError` by the read that needs the frames.

:class:`SourcesAhead` opens the next video's source (its thread decodes that video's first chunks) while the current
one streams.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import numpy as np

from infinipotv.data.video import FramePlan, VideoError, decode_planned

Resize = Callable[[np.ndarray], np.ndarray]  # uint8 frames [N, H, W, 3] -> uint8 frames at the model's input size
_END = object()
_POLL_S = 0.1  # how often a blocked background thread checks whether its source was closed


class FrameSource:
    """A video's sampled frames, read by increasing index range while a background thread decodes ahead.

    ``times`` (seconds) and ``fps`` (the real rate of what is streamed) are known before any frame is decoded.
    ``wait_seconds`` adds up the time reads spent waiting for the decoder (the model waiting for input).
    """

    def __init__(self, plan: FramePlan, fps: float, chunk: int, resize: Resize | None = None, depth: int = 2) -> None:
        if chunk < 1 or depth < 1:
            raise ValueError(f"chunk ({chunk}) and depth ({depth}) must be at least 1")
        self.plan, self.fps, self.chunk, self.resize = plan, fps, chunk, resize
        self.times = plan.times
        self.wait_seconds = 0.0
        self.frames_decoded = 0
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._closed = threading.Event()
        self._held: list[np.ndarray] = []  # decoded chunks not yet released, frames _start.._end
        self._start = self._end = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._decode, name=f"decode {plan.path.name}", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return len(self.plan)

    def __enter__(self) -> "FrameSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the reader -----------------------------------------------------------------------------------------------
    def read(self, start: int, stop: int) -> np.ndarray:
        """Frames ``start..stop-1`` (``stop`` clipped to the plan, at least one frame), uint8 ``[N, h, w, 3]``;
        frames before ``start`` are released. ``start`` may not go back past a previous read's start."""
        stop = min(stop, len(self))
        if not self._start <= start < stop:
            raise ValueError(
                f"read({start}, {stop}) of {self.plan.path} ({len(self)} frames): ranges are not empty, "
                f"in increasing order, and frames before {self._start} were released"
            )
        while self._end < stop:
            self._pull()
        while self._start + len(self._held[0]) <= start:
            self._start += len(self._held.pop(0))
        pieces, first = [], self._start
        for block in self._held:
            lo, hi = max(start - first, 0), min(stop - first, len(block))
            if lo < hi:
                pieces.append(block[lo:hi])
            first += len(block)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def _pull(self) -> None:
        if self._error is not None:
            raise self._error
        t0 = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - t0
        if item is _END:
            self._error = VideoError(f"video {self.plan.path} ended before frame {self._end}")
        elif isinstance(item, BaseException):
            self._error = item
        else:
            self._held.append(item)
            self._end += len(item)
            return
        raise self._error

    def close(self) -> None:
        """Stop the background decoder (it may be blocked on a full queue) and release the frames."""
        self._closed.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                pass
        self._held.clear()

    # -- the background decoder -----------------------------------------------------------------------------------
    def _chunks(self) -> Iterator[np.ndarray]:
        block: list[np.ndarray] = []
        for frame in decode_planned(self.plan):
            block.append(frame)
            if len(block) == self.chunk:
                yield self._prepare(block)
                block = []
        if block:
            yield self._prepare(block)

    def _prepare(self, block: list[np.ndarray]) -> np.ndarray:
        frames = np.stack(block)
        self.frames_decoded += len(frames)
        return self.resize(frames) if self.resize is not None else frames

    def _decode(self) -> None:
        try:
            for item in self._chunks():
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as err:  # the read that needs these frames raises it, in the job's thread
            self._put(err)

    def _put(self, item: object) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False


K = TypeVar("K")


class SourcesAhead(Generic[K]):
    """Opens the source of the video that streams next while the current one streams (its first chunks decode in
    the background). ``open(key, following)`` returns ``key``'s source, opened earlier or now, and opens
    ``following``'s; an error opening a video (a missing file) is raised when that video's source is asked for."""

    def __init__(self, opener: Callable[[K], FrameSource]) -> None:
        self.opener = opener
        self._ahead: tuple[K, FrameSource | Exception] | None = None

    def open(self, key: K, following: K | None) -> FrameSource:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] is not key:
            self._close(ahead[1])
            ahead = None
        try:
            current = self.opener(key) if ahead is None else ahead[1]
            if isinstance(current, Exception):
                raise current
        finally:
            if following is not None:
                self._ahead = (following, self._try_open(following))
        return current

    def _try_open(self, key: K) -> FrameSource | Exception:
        try:
            return self.opener(key)
        except Exception as err:  # noqa: BLE001 (that video's error, raised when its source is asked for)
            return err

    def close(self) -> None:
        if self._ahead is not None:
            self._close(self._ahead[1])
            self._ahead = None

    @staticmethod
    def _close(item: FrameSource | Exception) -> None:
        if isinstance(item, FrameSource):
            item.close()

    def __enter__(self) -> "SourcesAhead[K]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
