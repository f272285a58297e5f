"""One measured stream through the real session: the runner behind the memory, overhead and first-token benches.

A stream is fed chunk by chunk from a :class:`~bench.common.FrameStream` until a number of vision tokens has gone
in; after every chunk the runner records the memory trace (cache bytes as the stores hold them; two analytic figures
of :mod:`infinipotv.kv.accounting`: the published one for the same tokens, full key groups and the largest window,
and the same rates applied to the layout the stores really hold; peak and current process/device memory) and the
time of the step. At the stream lengths named as checkpoints it can ask a question and time the first answer token.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from bench.common import PAPER_BUDGET, PAPER_C_RATIO, FrameStream, quant_config, session
from infinipotv.config import QuantConfig
from infinipotv.kv.accounting import Layout, Storage, cache_bytes, layout_bytes
from infinipotv.models import ModelAdapter
from infinipotv.stream.session import StreamingSession
from infinipotv.stream.trace import PeakMemory, sync

QUESTION = "What happens in the video?\nA. a\nB. b\nC. c\nD. d\nAnswer with the option's letter."
FPS = 2.0


@dataclass(frozen=True)
class StreamSpec:
    """A model from conf/model (with overrides), the frames fed to it and the budget shape."""

    model: str
    frame_hw: tuple[int, int]
    chunk_frames: int
    budget: int = PAPER_BUDGET
    c_ratio: float = PAPER_C_RATIO
    overrides: dict[str, Any] = field(default_factory=dict)
    glyph_patch: int = 0  # > 0: glyph frames for the symbolic model (see FrameStream)
    storage_dtype: str | None = None  # quant.dtype override (None: the conf/quant default)

    def quant(self, name: str) -> QuantConfig:
        return quant_config(name, **({"dtype": self.storage_dtype} if self.storage_dtype else {}))

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def warm_up(adapter: ModelAdapter, spec: StreamSpec, policy: str, quant: str) -> None:
    """One short throwaway stream through a compression pass and a question: lazy initialisation, first-call
    kernel selection and allocator growth stay out of the measured stream."""
    run_stream(adapter, spec, policy, quant, n_tokens=spec.budget + 1, checkpoints=(1.0,), answer_tokens=2)


def run_stream(
    adapter: ModelAdapter,
    spec: StreamSpec,
    policy: str,
    quant: str,
    n_tokens: int,
    checkpoints: tuple[float, ...] = (),
    answer_tokens: int = 0,
    in_bytes: bool = False,
) -> dict[str, Any]:
    """Stream until ``n_tokens`` vision tokens went in; per-step records, and at each checkpoint (a multiple of the
    budget, reached when the streamed tokens first reach it) the running peak and, with ``answer_tokens`` > 0, the
    time to the first answer token and to a whole answer of that many tokens. ``in_bytes``: the budget is also held
    in bytes (``compress.budget_mib``'s behaviour)."""
    sess = session(
        adapter, policy, spec.quant(quant), spec.budget, spec.c_ratio, in_bytes=in_bytes, chunk_frames=spec.chunk_frames
    )
    device = adapter.device
    peak = sess.peak  # the session's own probe: the trace's peaks and the checkpoints' are one measure
    storage = Storage.from_config(spec.quant(quant), adapter.dtype)
    shape = (adapter.n_layers, adapter.n_kv_heads, adapter.head_dim)
    sess.start("bench")
    baseline = peak.current()
    frames = FrameStream(*spec.frame_hw, n_frames=10**9, chunk=spec.chunk_frames, glyph_patch=spec.glyph_patch)
    steps: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    pending = sorted(checkpoints)
    for chunk in frames:
        sync(device)
        t0 = time.perf_counter()
        sess.feed(chunk, FPS)
        sync(device)
        seconds = time.perf_counter() - t0
        trace = sess.trace[-1]
        steps.append(
            {
                "streamed_tokens": sess.video.vision_tokens,
                "video_tokens": trace.video_tokens,
                "total_tokens": trace.total_tokens,
                "cache_bytes": trace.cache_bytes,
                "cache_bytes_before_pass": trace.compress.bytes_before if trace.compress else None,
                "cache_bytes_by_part": trace.cache_bytes_by_part,
                "analytic_bytes": cache_bytes(trace.total_tokens, *shape, storage),
                "layout_bytes": held_layout_bytes(sess, adapter.head_dim),
                "peak_bytes": trace.peak_memory_bytes,
                "current_bytes": peak.current(),
                "seconds": seconds,
                "encode_seconds": trace.encode_seconds,
                "compress_seconds": trace.compress.seconds if trace.compress else 0.0,
                "pass": trace.compress is not None,
                "passes": trace.compress.passes if trace.compress else 0,
            }
        )
        while pending and sess.video.vision_tokens >= pending[0] * spec.budget:
            marks.append(_checkpoint(sess, pending.pop(0), steps, peak, answer_tokens))
        if sess.video.vision_tokens >= n_tokens:
            break
    cap = sess.schedule.byte_cap if sess.schedule else None
    return {
        "policy": policy,
        "quant": quant,
        "device": str(device),
        "budget": spec.budget,
        "c_ratio": spec.c_ratio,
        "budget_in": "bytes" if cap else "tokens",
        "byte_cap": cap.cap if cap else None,
        "tokens_per_frame": sess.video.grid[0] * sess.video.grid[1],
        "prefix_tokens": sess.video.prefix_len,
        "peak_method": peak.method,
        "baseline_bytes": baseline,
        "steps": steps,
        "checkpoints": marks,
        "totals": totals(steps),
    }


def held_layout_bytes(sess: StreamingSession, head_dim: int) -> float:
    """The analytic bytes of what the stores hold now: their counts (tokens, window, live key groups, heads; read
    on the host) at their own widths, bookkeeping included. The measured bytes exceed it only by the stores'
    padding, where :func:`~infinipotv.kv.accounting.cache_bytes` also differs by thinned key groups and the window."""
    stores = sess.video.cache.stores
    layout = sum((store.layout() for store in stores), Layout(0))
    return sum(layout_bytes(layout, head_dim, stores[0].storage()).values())


def _checkpoint(
    sess: StreamingSession, multiple: float, steps: list[dict[str, Any]], peak: PeakMemory, answer_tokens: int
) -> dict[str, Any]:
    """The running peaks at this point of the stream, then (optionally) a timed question on the memory."""
    mark = {
        "multiple": multiple,
        "streamed_tokens": sess.video.vision_tokens,
        "video_tokens": sess.video.video_tokens,
        "peak_bytes": peak.read(),
        "peak_cache_bytes": max(max_cache_bytes(s) for s in steps),
        "cache_bytes": steps[-1]["cache_bytes"],
        "analytic_bytes": steps[-1]["analytic_bytes"],
        "layout_bytes": steps[-1]["layout_bytes"],
    }
    if answer_tokens:
        device = sess.adapter.device
        for key, n in (("first_token_seconds", 1), ("answer_seconds", answer_tokens)):
            sync(device)
            t0 = time.perf_counter()
            answer = sess.ask(QUESTION, max_new_tokens=n)
            sync(device)
            mark[key] = time.perf_counter() - t0
        mark["answer_tokens"] = answer_tokens
        # greedy decoding stops at an end-of-sequence token: answers differ in length, so compare per token
        mark["answer_tokens_generated"] = n_out = len(answer.tokens)
        mark["decode_seconds_per_token"] = (
            (mark["answer_seconds"] - mark["first_token_seconds"]) / (n_out - 1) if n_out > 1 else None
        )
        mark["peak_with_answer_bytes"] = peak.read()
    return mark


def max_cache_bytes(step: dict[str, Any]) -> int:
    return max(step["cache_bytes"], step["cache_bytes_before_pass"] or 0)


def totals(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Streaming time and the share of it spent in compression passes, over the whole stream and over its steady
    state: the steps after the first pass (first calls, kernel selection and the growth to |M| left out)."""
    first = next((i for i, s in enumerate(steps) if s["pass"]), len(steps))
    out: dict[str, Any] = {"steps": len(steps), "encode_seconds": sum(s["encode_seconds"] for s in steps)}
    for prefix, part in (("", steps), ("steady_", steps[first + 1 :])):
        stream_s = sum(s["seconds"] for s in part)
        compress_s = sum(s["compress_seconds"] for s in part)
        out |= {
            f"{prefix}stream_seconds": stream_s,
            f"{prefix}compress_seconds": compress_s,
            f"{prefix}passes": sum(s["pass"] for s in part),
            f"{prefix}compress_share": compress_s / stream_s if stream_s else 0.0,
        }
    return out


def release(device: torch.device) -> None:
    """Return cached device memory between streams so one stream's peak does not carry into the next."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
