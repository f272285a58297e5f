"""MuKV's extra prefill cost: encode seconds against ReKV on the same stream, side by side in one process.

    python -m bench.mukv_encode            # the symbolic model (real SmolLM2-135M), 48 glyph frames, 3 rounds
    python -m bench.mukv_encode --smoke    # the tiny LLaVA-OneVision, seconds, for the tests

ReKV prefills each chunk once into its cache; MuKV prefills every frame's patch blocks, the frame and every segment
alone over the prefix (3 prefills of every vision token, in short forwards: spec/field2.md 2.5). Both stream the
same glyph frames at compress.budget=144 (chunks of 2 frames), alternating, ``ROUNDS`` times; per method the
medians of the stream's encode seconds (the trace's, side prefills included for MuKV), its compression seconds
(offload and selection), the language-model forwards and the vision tokens they ran. The ratio MuKV / ReKV of the
encode plus compression seconds is the figure docs/retrieval.md quotes.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from bench.common import load_model, parse, parser, write_result
from bench.retrieval_memory import glyph_video, random_video
from infinipotv.compress import build
from infinipotv.kv import FullPrecisionStore
from infinipotv.stream.session import StreamingSession

METHODS = ("rekv", "mukv")
BUDGET, C_RATIO, CHUNK, ROUNDS = 144, 0.5, 2, 3


def stream(adapter, method: str, video: np.ndarray) -> dict[str, Any]:
    """One stream of ``video`` under ``method``: its seconds and the forwards the language model ran."""
    session = StreamingSession(adapter, build(method), BUDGET, C_RATIO, lambda: FullPrecisionStore(adapter.dtype))
    calls, tokens = 0, 0
    forward = adapter.forward

    def counted(embeds, positions, cache, logits=True):
        nonlocal calls, tokens
        calls, tokens = calls + 1, tokens + embeds.shape[0]
        return forward(embeds, positions, cache, logits)

    adapter.forward = counted
    try:
        session.start("bench")
        calls, tokens = 0, 0  # the prefix is not the stream's
        for i in range(0, len(video), CHUNK):
            session.feed(video[i : i + CHUNK], fps=2.0)
    finally:
        del adapter.forward  # the class's method again
    steps = session.trace
    encode = sum(s.encode_seconds for s in steps)
    compress = sum(s.compress.seconds for s in steps if s.compress is not None)
    return {
        "encode_s": encode,
        "compress_s": compress,
        "total_s": encode + compress,
        "forwards": calls,
        "forward_tokens": tokens,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    if args.smoke:
        adapter, rounds, video = load_model("tiny_llava_ov"), 1, random_video(8)
    else:
        adapter, rounds = load_model("symbolic"), ROUNDS
        video = glyph_video(48, adapter.text_config.vocab_size)
    stream(adapter, "mukv", video[:4])  # warm-up: first-call allocations are no method's cost
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    for _ in range(rounds):
        for method in METHODS:
            samples[method].append(stream(adapter, method, video))
    medians = {m: {key: statistics.median(s[key] for s in runs) for key in runs[0]} for m, runs in samples.items()}
    for m, row in medians.items():
        print(
            f"{m:5s} encode {row['encode_s']:.2f} s  compress {row['compress_s']:.2f} s  "
            f"{row['forwards']} forwards, {row['forward_tokens']} tokens"
        )
    rekv, mukv = medians["rekv"], medians["mukv"]
    data = {
        "budget": BUDGET,
        "chunk_frames": CHUNK,
        "frames": len(video),
        "rounds": rounds,
        "samples": samples,
        "medians": medians,
        "mukv_over_rekv_total": mukv["total_s"] / rekv["total_s"],
        "mukv_over_rekv_encode": mukv["encode_s"] / rekv["encode_s"],
        "mukv_over_rekv_forward_tokens": mukv["forward_tokens"] / rekv["forward_tokens"],
    }
    print({k: round(v, 3) for k, v in data.items() if k.startswith("mukv_over")})
    write_result(args.out, "mukv_encode", data, args.smoke, torch.device(adapter.device))
    return data


if __name__ == "__main__":
    main()
