"""Retrieval methods at a fixed accelerator budget: a stream 1x to 8x as long, accelerator bytes flat, host bytes
growing with the stream (issue 32's figure).

    python -m bench.retrieval_memory            # the symbolic model (real SmolLM2-135M), ~10 minutes on 2 cores
    python -m bench.retrieval_memory --smoke    # the tiny LLaVA-OneVision, seconds, for the tests

ReKV, LiveVLM, StreamKV, WeaveTime and MuKV stream glyph frames of random token ids (12 tokens each) at
compress.budget=144 and c_ratio 0.5, with one question answered at every multiple of the base stream (its retrieval
buffer included in the accelerator peak; WeaveTime's gate at 0, so that every question retrieves). Bytes are the
tensors' own (the trace's ``accelerator_bytes``/``host_bytes``, an answer's ``accelerator_bytes``), not process
memory. The claim checked on the data: from 1x to 8x the accelerator peak moves by at most 5%, while ReKV's host
bytes grow about 8x (it offloads every frame); LiveVLM's host memory is bounded by its buckets, so it is flat once
full; StreamKV's grows with the stream too, below ReKV's (each closed segment keeps about compression_ratio of its
frames per layer, plus its summary); WeaveTime's host bytes are ReKV's (its fine score reads the stored keys);
MuKV's cache holds the prefix alone and its host every block's kept tokens at three granularities (about the stream
once with the shipped keep ratios), so its host bytes grow with the stream too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bench.common import load_model, parse, parser, write_result
from infinipotv.compress import build
from infinipotv.kv import FullPrecisionStore
from infinipotv.models import glyphs
from infinipotv.stream.session import StreamingSession

METHODS = ("rekv", "livevlm", "streamkv", "weavetime", "mukv")
# WeaveTime's gate at 0: every question takes the retrieval branch, its largest accelerator memory
PARAMS = {"weavetime": {"threshold": 0.0}}
MULTIPLES = (1, 2, 4, 8)
BUDGET, C_RATIO, CHUNK = 144, 0.5, 2
QUESTION = "Which word appeared most often?"


def glyph_video(n_frames: int, vocab: int, seed: int = 0) -> np.ndarray:
    """``n_frames`` glyph frames of random token ids on the benchmark's 3 x 4 grid."""
    ids = np.random.default_rng(seed).integers(200, min(vocab, 20000), size=(n_frames, 3, 4))
    return glyphs.encode(ids)


def random_video(n_frames: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n_frames, 56, 56, 3)).astype(np.uint8)


def run(adapter, method: str, video: np.ndarray, base: int) -> dict[str, Any]:
    """Stream ``video`` under ``method``; at each multiple of ``base`` frames, answer one question and read the
    accelerator peak so far (steps and answers) and the host bytes."""
    policy = build(method, **PARAMS.get(method, {}))
    session = StreamingSession(adapter, policy, BUDGET, C_RATIO, lambda: FullPrecisionStore(adapter.dtype))
    session.start("bench")
    peak, checkpoints, fed = 0, [], 0
    for multiple in MULTIPLES:
        while fed < multiple * base:
            session.feed(video[fed : fed + CHUNK], fps=2.0)
            fed += CHUNK
        answer = session.ask(QUESTION, max_new_tokens=1)
        steps = session.trace
        peak = max(peak, answer.accelerator_bytes, *(s.accelerator_bytes for s in steps))
        checkpoints.append(
            {
                "multiple": multiple,
                "frames": fed,
                "accelerator_peak_bytes": peak,
                "host_bytes": steps[-1].host_bytes,
                "ttft_s": answer.ttft_s,
                "encode_frames_per_s": float(np.mean([s.encode_frames_per_s for s in steps])),
            }
        )
        print(f"{method:8s} {multiple}x {fed:4d} frames  accelerator {peak:,} B  host {steps[-1].host_bytes:,} B")
    first, last = checkpoints[0], checkpoints[-1]
    return {
        "method": method,
        "checkpoints": checkpoints,
        "accelerator_change": last["accelerator_peak_bytes"] / first["accelerator_peak_bytes"] - 1,
        "host_growth": last["host_bytes"] / first["host_bytes"] if first["host_bytes"] else None,
        "trace": [
            {"frames_seen": s.frames_seen, "accelerator_bytes": s.accelerator_bytes, "host_bytes": s.host_bytes}
            for s in session.trace
        ],
    }


def last_host(run: dict[str, Any]) -> int:
    """The host bytes at the longest stream."""
    return run["checkpoints"][-1]["host_bytes"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    if args.smoke:
        adapter, base = load_model("tiny_llava_ov"), 6
        video = random_video(base * max(MULTIPLES))
    else:
        adapter, base = load_model("symbolic"), 24
        video = glyph_video(base * max(MULTIPLES), adapter.text_config.vocab_size)
    runs = [run(adapter, method, video, base) for method in METHODS]
    by = {r["method"]: r for r in runs}
    claims = {
        "accelerator_within_5_percent": all(abs(r["accelerator_change"]) <= 0.05 for r in runs),
        "rekv_host_grows_about_8x": 6.0 <= by["rekv"]["host_growth"] <= 10.0,
        "streamkv_host_below_rekv": last_host(by["streamkv"]) < last_host(by["rekv"]),
    }
    data = {
        "budget": BUDGET,
        "c_ratio": C_RATIO,
        "chunk_frames": CHUNK,
        "base_frames": base,
        "multiples": list(MULTIPLES),
        "runs": runs,
        "claims": claims,
    }
    write_result(args.out, "retrieval_memory", data, args.smoke, torch.device(adapter.device))
    print(claims)
    return data


if __name__ == "__main__":
    main()
