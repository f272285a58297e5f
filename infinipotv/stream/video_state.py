"""What one video's stream holds: :class:`VideoState`, made whole by the session's ``start`` and handed to its
streaming method at every step.

It lives in its own module, below both :mod:`infinipotv.stream.session` (which makes and advances it) and
:mod:`infinipotv.stream.method` (whose methods read and shape it), so that neither imports the other to name it:
the stream's imports point one way, type-only ones included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from infinipotv.kv.cache import StreamCache
from infinipotv.kv.host import HostStore
from infinipotv.stream.needles import Extent
from infinipotv.stream.trace import TraceStep


@dataclass
class VideoState:
    """Everything one video's stream holds, made whole by :meth:`StreamingSession.start`."""

    video_id: str
    cache: StreamCache
    ref_cache: StreamCache | None  # the uncompressed cache answering the reference questions, when enabled
    prefix_len: int  # system-prefix tokens, never evicted
    video_start: int  # the position of the first video token (right after the prefix)
    next_position: int  # the position the next text token (a question) takes
    frames_seen: int = 0  # raw frames fed (encoded or pending)
    frames_encoded: int = 0
    vision_tokens: int = 0  # vision tokens ever prefilled (their stream ids are 0..vision_tokens-1)
    grid: tuple[int, int] | None = None  # tokens per model frame (rows, columns), fixed by the first chunk
    pending: np.ndarray | None = None  # raw frames waiting to fill a whole model frame (Qwen merges 2)
    fps: float = 1.0  # the frame rate of the last frames fed
    trace: list[TraceStep] = field(default_factory=list)
    extents: list[Extent] = field(default_factory=list)  # each prefilled chunk's raw frames and stream ids
    host: list[HostStore] = field(default_factory=list)  # offloaded tokens, one store per layer (H2), if any
    state: dict = field(default_factory=dict)  # the streaming method's own per-video state

    @property
    def video_tokens(self) -> int:
        """Vision tokens per layer per KV head now in the cache."""
        return self.cache.committed_length() - self.prefix_len
