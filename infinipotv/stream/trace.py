"""The memory trace: one record per streaming step, as data (written to ``memory.jsonl`` by the job), and the
probes that fill it: the time of the compression passes and the peak memory."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import psutil
import torch

from infinipotv.kv.cache import StreamCache


@dataclass
class CompressRecord:
    """One compression pass over every layer."""

    tokens_before: int
    tokens_after: int
    seconds: float
    passes: int = 1  # more than one when a byte cap made the session keep fewer than |C| tokens
    # The stores' bytes just before the step's first pass: the cache with the chunk in every layer, its largest
    # moment. Host-side counts, not timed.
    bytes_before: int = 0


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
    # Bytes by place, counted the same way for every method: the accelerator holds the stores and what the method
    # keeps there (block representatives...); the host holds offloaded blocks (a retrieval method's).
    accelerator_bytes: int = 0
    host_bytes: int = 0
    encode_frames_per_s: float = 0.0  # raw frames of this chunk / encode_seconds
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(
        cls,
        cache: StreamCache,
        *,
        video_id: str,
        step: int,
        frames_seen: int,
        prefix_tokens: int,
        peak_memory_bytes: int,
        encode_seconds: float,
        compress: CompressRecord | None,
        accelerator_bytes: int | None = None,
        host_bytes: int = 0,
        frames_encoded: int = 0,
    ) -> "TraceStep":
        """The step's record, with the token counts and bytes read from the ``cache`` as it is now."""
        by_layer = cache.nbytes_by_layer()
        parts = cache.nbytes(by_layer)
        total = cache.committed_length()
        return cls(
            video_id=video_id,
            step=step,
            frames_seen=frames_seen,
            prefix_tokens=prefix_tokens,
            video_tokens=total - prefix_tokens,
            total_tokens=total,
            cache_bytes=sum(parts.values()),
            cache_bytes_by_part=parts,
            layer_bytes=cache.layer_nbytes(by_layer),
            peak_memory_bytes=peak_memory_bytes,
            encode_seconds=encode_seconds,
            compress=compress,
            accelerator_bytes=sum(parts.values()) if accelerator_bytes is None else accelerator_bytes,
            host_bytes=host_bytes,
            encode_frames_per_s=frames_encoded / encode_seconds if encode_seconds > 0 else 0.0,
        )


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so that a wall-clock time includes it (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class PassClock:
    """Compression time within one step (synchronised on a GPU around each timed call) and the passes made."""

    device: torch.device
    seconds: float = 0.0
    passes: int = 0
    bytes_before: int = 0  # CompressRecord.bytes_before, read by the session before the timed pass

    @contextmanager
    def timed(self) -> Iterator[None]:
        sync(self.device)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            sync(self.device)
            self.seconds += time.perf_counter() - t0

    def record(self, tokens_before: int, tokens_after: int) -> CompressRecord | None:
        """The step's compression record, or None when it made no pass."""
        if not self.passes:
            return None
        return CompressRecord(
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            seconds=self.seconds,
            passes=self.passes,
            bytes_before=self.bytes_before,
        )


class PeakMemory:
    """Peak memory since :meth:`reset`, the one probe of the session's trace and of the benches.

    On a GPU: CUDA's allocator peak. On a CPU: the kernel's resident-set high-water mark (``VmHWM``, reset through
    ``/proc/self/clear_refs``), which sees the short peaks inside a forward or a compression pass that sampling the
    RSS between steps would miss; where it cannot be reset (not Linux), the RSS sampled at each :meth:`read`.
    ``method`` names which; ``baseline`` is the memory in use at the last reset."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.method = "cuda.max_memory_allocated" if device.type == "cuda" else _cpu_method()
        self.baseline = 0
        self._rss_peak = 0
        self.reset()

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.method == "VmHWM":
            HWM_RESET.write_text("5")
        self._rss_peak = 0
        self.baseline = self.current()

    def current(self) -> int:
        """Memory in use now: allocated CUDA memory, or the process RSS."""
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return psutil.Process().memory_info().rss

    def read(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        if self.method == "VmHWM":
            return _status_kib("VmHWM") * 1024
        self._rss_peak = max(self._rss_peak, self.current())
        return self._rss_peak


HWM_RESET = Path("/proc/self/clear_refs")  # writing "5" resets the process's VmHWM to its current RSS (Linux)


def _cpu_method() -> str:
    try:
        HWM_RESET.write_text("5")
        return "VmHWM"
    except OSError:
        return "rss_sampled"


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")
