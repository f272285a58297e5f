"""The field's streaming methods (ReKV, LiveVLM, StreamMem, StreamingVLM, StreamingTOM) beside InfiniPot-V at the
same accelerator budget, on real checkpoints on one GPU: accelerator peak (the tensors' bytes and CUDA's allocator
peak), host bytes, time to first token, encode throughput.

    python -m bench.gpu_peers --checkpoint qwen2vl=/models/Qwen2-VL-7B-Instruct \\
        --checkpoint llava_ov=/models/llava-onevision-qwen2-7b-ov-hf --out $OUT     # on a GPU
    python -m bench.gpu_peers --smoke                                              # tiny models on the CPU

Checkpoints are local folders (nothing is downloaded; the GPU machines have no network). The stream is ``--frames``
raw frames of seeded noise at 2 fps (timings and memory only: noise has no answer), one question at the end. Every
method runs at ``compress.budget`` |M| = ``--budget`` tokens and c_ratio 0.5, so each holds at most |M| video tokens
per KV head on the accelerator (ReKV/LiveVLM: window + retrieval buffer; StreamMem, StreamingVLM: |M| after every
chunk) except StreamingTOM, whose 4-bit OQM grows with the stream by design and whose question reads at most |M|
retrieved tokens (docs/peers.md); host bytes are reported beside.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from bench.common import load_model, parse, parser, write_result
from infinipotv.compress import build
from infinipotv.kv import FullPrecisionStore
from infinipotv.stream.session import StreamingSession
from infinipotv.stream.trace import PeakMemory

METHODS = ("tar_van_pool", "rekv", "livevlm", "streammem", "streamingvlm", "streamingtom")
C_RATIO = 0.5
QUESTION = "What happens in the video? Answer in one sentence."


def stream(adapter, method: str, frames: np.ndarray, budget: int, chunk: int) -> dict[str, Any]:
    session = StreamingSession(adapter, build(method), budget, C_RATIO, lambda: FullPrecisionStore(adapter.dtype))
    probe = PeakMemory(adapter.device)
    session.start("bench")
    probe.reset()
    t0 = time.perf_counter()
    for i in range(0, len(frames), chunk):
        session.feed(frames[i : i + chunk], fps=2.0)
    session.finish()
    stream_s = time.perf_counter() - t0
    answer = session.ask(QUESTION, max_new_tokens=8)
    steps = session.trace
    return {
        "method": method,
        "frames": len(frames),
        "stream_seconds": stream_s,
        "encode_frames_per_s": len(frames) / max(1e-9, sum(s.encode_seconds for s in steps)),
        "ttft_s": answer.ttft_s,
        "accelerator_peak_bytes": max(answer.accelerator_bytes, *(s.accelerator_bytes for s in steps)),
        "host_bytes": steps[-1].host_bytes,
        "device_peak_bytes": probe.read(),
        "peak_method": probe.method,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--checkpoint", action="append", default=[], help="FAMILY=PATH (qwen2vl, qwen25vl, llava_ov)")
    p.add_argument("--frames", type=int, default=256)
    p.add_argument("--budget", type=int, default=6000)
    args = parse(p, argv)
    if args.smoke:
        models = {"llava_ov": load_model("tiny_llava_ov")}
        n_frames, budget, chunk, size = 12, 96, 2, (56, 56)
    else:
        if not args.checkpoint:
            raise SystemExit("give --checkpoint FAMILY=PATH for each model to run (local folders; nothing is fetched)")
        models = {}
        for item in args.checkpoint:
            family, _, path = item.partition("=")
            models[family] = load_model(family, checkpoint=path, device="cuda", dtype="bfloat16")
        n_frames, budget, chunk, size = args.frames, args.budget, 16, (336, 588)
    frames = np.random.default_rng(0).integers(0, 255, size=(n_frames, *size, 3)).astype(np.uint8)
    runs = []
    for family, adapter in models.items():
        for method in METHODS:
            run = {"model": family, **stream(adapter, method, frames, budget, chunk)}
            runs.append(run)
            print(
                f"{family:9s} {method:13s} accelerator {run['accelerator_peak_bytes']:,} B  host "
                f"{run['host_bytes']:,} B  ttft {run['ttft_s']:.3f} s",
                flush=True,
            )
    device = next(iter(models.values())).device
    data = {"budget": budget, "c_ratio": C_RATIO, "frames": n_frames, "runs": runs}
    write_result(args.out, "gpu_peers", data, args.smoke, torch.device(device))
    return data


if __name__ == "__main__":
    main()
