"""The memory trace: one record per streaming step, as data (written to ``memory.jsonl`` by the job)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import psutil
import torch


@dataclass
class CompressRecord:
    """One compression pass over every layer."""

    tokens_before: int
    tokens_after: int
    seconds: float
    passes: int = 1  # more than one when a byte cap made the session keep fewer than |C| tokens


@dataclass
class TraceStep:
    video_id: str
    step: int
    frames_seen: int  # raw frames fed so far
    prefix_tokens: int
    video_tokens: int  # per layer per KV head, after this step (and its compression pass, if any)
    total_tokens: int
    cache_bytes: int  # the stores' real tensor bytes, all layers
    cache_bytes_by_part: dict[str, int]
    layer_bytes: list[int]
    peak_memory_bytes: int  # CUDA max allocated on GPU, process RSS high-water mark on CPU
    encode_seconds: float  # vision encoding + prefill of this chunk
    compress: CompressRecord | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class PeakMemory:
    """Peak device memory since reset: CUDA's allocator statistics on GPU, the process RSS seen at each step on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reset()

    def reset(self) -> None:
        self._rss_peak = 0
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def read(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        self._rss_peak = max(self._rss_peak, psutil.Process().memory_info().rss)
        return self._rss_peak
