"""The field's streaming methods (ReKV, LiveVLM, StreamMem, StreamingVLM, StreamingTOM) beside InfiniPot-V at the
same accelerator budget, on one GPU: accelerator peak (the tensors' bytes and CUDA's allocator peak), host bytes,
time to first token, encode throughput, on real checkpoints or on 7B-shaped models with random weights.

    python -m bench.gpu_peers --checkpoint qwen2vl=/models/Qwen2-VL-7B-Instruct \\
        --checkpoint llava_ov=/models/llava-onevision-qwen2-7b-ov-hf --out $OUT     # real checkpoints, on a GPU
    python -m bench.gpu_peers --random-weights --out $OUT                          # no checkpoint, on a GPU
    python -m bench.gpu_peers --smoke                                              # tiny models on the CPU

Checkpoints are local folders (nothing is downloaded). ``--random-weights`` needs none: Qwen2-VL-7B-Instruct and
llava-onevision-qwen2-7b-ov-hf are built from their released config values (``bench/shapes.py``) with random bf16
weights created directly on the device, behind the project's real adapters (``--families``, ``--device``;
``--shape tiny``: the same geometry at tiny widths, for the CPU tests). Random weights answer nothing: those numbers
are memory and timing only, and the JSON says ``"weights": "random"``.

The stream is ``--frames`` raw frames of 336 x 588 seeded noise at 2 fps (timings and memory only: noise has no
answer), one question at the end. LLaVA-OneVision squashes every frame to 384 x 384: 196 tokens per frame; Qwen2-VL's
smart resize (max_pixels 128*28*28, ``conf/model/qwen2vl.yaml``) makes it 224 x 392: 8 x 14 = 112 tokens per model
frame of 2 raw frames. A chunk is 16 raw frames, halved until it holds fewer than |M| - |C| tokens (the methods'
shared check: 8 frames for LLaVA-OneVision at the defaults). Every method runs at ``compress.budget`` |M| =
``--budget`` tokens and c_ratio 0.5, so each holds at most |M| video tokens per KV head on the accelerator
(ReKV/LiveVLM: window + retrieval buffer; StreamMem, StreamingVLM: |M| after every chunk) except StreamingTOM, whose
4-bit OQM grows with the stream by design and whose question reads at most |M| retrieved tokens (docs/peers.md);
host bytes are reported beside, with whether the host store was pinned memory (ReKV, LiveVLM on a GPU).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from bench.common import load_model, parse, parser, tokens_per_model_frame, write_result
from bench.shapes import SHAPES, build_adapter
from bench.streams import release
from infinipotv.compress import build, compressed_size
from infinipotv.kv import FullPrecisionStore
from infinipotv.models import ModelAdapter
from infinipotv.stream.session import StreamingSession
from infinipotv.stream.trace import PeakMemory

METHODS = ("tar_van_pool", "rekv", "livevlm", "streammem", "streamingvlm", "streamingtom")
C_RATIO = 0.5
QUESTION = "What happens in the video? Answer in one sentence."
# The question is asked this many times on the same memory: time to first token is their median (the first ask of a
# process also pays one-time costs, e.g. the first retrieval's kernels and pinned-memory copies).
ASKS = 3
FRAME_HW = (336, 588)
MOST_CHUNK_FRAMES = 16


def stream(adapter: ModelAdapter, method: str, frames: np.ndarray, budget: int, chunk: int) -> dict[str, Any]:
    session = StreamingSession(adapter, build(method), budget, C_RATIO, lambda: FullPrecisionStore(adapter.dtype))
    probe = PeakMemory(adapter.device)
    session.start("bench")
    probe.reset()
    t0 = time.perf_counter()
    for i in range(0, len(frames), chunk):
        session.feed(frames[i : i + chunk], fps=2.0)
    session.finish()
    stream_s = time.perf_counter() - t0
    answers = [session.ask(QUESTION, max_new_tokens=8) for _ in range(ASKS)]  # a question leaves the memory as it was
    ttft = [a.ttft_s for a in answers]
    steps = session.trace
    host = session.video.host  # the offloaded stores, one per layer (ReKV, LiveVLM); none for the others
    return {
        "method": method,
        "frames": len(frames),
        "chunk_frames": chunk,
        "stream_seconds": stream_s,
        "encode_frames_per_s": len(frames) / max(1e-9, sum(s.encode_seconds for s in steps)),
        "ttft_s": float(np.median(ttft)),
        "ttft_each_s": ttft,
        "accelerator_peak_bytes": max(*(a.accelerator_bytes for a in answers), *(s.accelerator_bytes for s in steps)),
        "host_bytes": steps[-1].host_bytes,
        "host_pinned": all(h.pinned for h in host) if host else None,
        "device_peak_bytes": probe.read(),
        "peak_method": probe.method,
    }


def chunk_frames(adapter: ModelAdapter, per_model_frame: int, budget: int, most: int) -> int:
    """Raw frames per chunk: ``most``, halved until a chunk holds fewer than |M| - |C| tokens (every method's
    check), and whole model frames."""
    room, step = budget - compressed_size(budget, C_RATIO), adapter.frames_per_step
    n = most
    while n > step and n // step * per_model_frame >= room:
        n //= 2
    n = max(step, n // step * step)
    if n // step * per_model_frame >= room:
        raise SystemExit(
            f"--budget {budget} is too small for {adapter.family}: one model frame holds {per_model_frame} tokens, "
            f"a chunk must hold fewer than |M| - |C| = {room}; raise --budget"
        )
    return n


def check_device(device: torch.device) -> None:
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: no CUDA GPU here; run on a GPU, or pass --device cpu (tiny: --smoke)")


def models(args) -> Iterator[tuple[str, Callable[[], ModelAdapter]]]:
    """(family, build) for each model to run, built one at a time (two 7B models need not fit together)."""
    if args.smoke:
        yield "llava_ov", lambda: load_model("tiny_llava_ov")
    elif args.random_weights:
        dtype = torch.float32 if args.shape == "tiny" else torch.bfloat16
        for family in args.families.split(","):
            yield family, lambda f=family: build_adapter(f, SHAPES[args.shape][f], torch.device(args.device), dtype)
    else:
        for item in args.checkpoint:
            family, _, path = item.partition("=")
            yield family, lambda f=family, p=path: load_model(f, checkpoint=p, device=args.device, dtype="bfloat16")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--checkpoint", action="append", default=[], help="FAMILY=PATH (qwen2vl, qwen25vl, llava_ov)")
    p.add_argument(
        "--random-weights", action="store_true", help="7B-shaped models with random weights: memory and timing only"
    )
    p.add_argument(
        "--families", default="qwen2vl,llava_ov", help="with --random-weights: which models, comma-separated"
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="7b", help="with --random-weights: tiny for CPU tests")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--frames", type=int, default=256)
    p.add_argument("--budget", type=int, default=6000)
    args = parse(p, argv)
    if args.smoke:
        n_frames, budget, most, size, device = 12, 96, 2, (56, 56), torch.device("cpu")
    else:
        if not args.checkpoint and not args.random_weights:
            raise SystemExit(
                "give --checkpoint FAMILY=PATH for each model to run (local folders; nothing is fetched), "
                "or --random-weights"
            )
        if args.checkpoint and args.random_weights:
            raise SystemExit("--checkpoint and --random-weights exclude each other: give one")
        n_frames, budget, most, size, device = (
            args.frames,
            args.budget,
            MOST_CHUNK_FRAMES,
            FRAME_HW,
            torch.device(args.device),
        )
        check_device(device)
        unknown = [f for f in args.families.split(",") if f not in SHAPES[args.shape]]
        if args.random_weights and unknown:
            raise SystemExit(f"--families: {', '.join(unknown)} not among {', '.join(SHAPES[args.shape])}")
    frames = np.random.default_rng(0).integers(0, 255, size=(n_frames, *size, 3), dtype=np.uint8)
    runs, families = [], {}
    for family, make in models(args):
        adapter = make()
        per_frame = tokens_per_model_frame(adapter, size)
        chunk = chunk_frames(adapter, per_frame, budget, most)
        families[family] = {
            "tokens_per_model_frame": per_frame,
            "frames_per_model_frame": adapter.frames_per_step,
            "chunk_frames": chunk,
            "parameters": sum(t.numel() for t in adapter.model.parameters()),
            "weights_bytes": sum(t.nbytes for t in adapter.model.parameters()),
            "dtype": str(adapter.dtype).removeprefix("torch."),
        }
        if not args.smoke:  # lazy initialisation and first-call kernel selection stay out of the first method's time
            stream(adapter, METHODS[0], frames[: 2 * chunk], budget, chunk)
        for method in METHODS:
            t0 = time.perf_counter()
            run = {"model": family, **stream(adapter, method, frames, budget, chunk)}
            run["seconds"] = time.perf_counter() - t0
            runs.append(run)
            gc.collect()
            release(device)
            each = ", ".join(f"{t:.3f}" for t in run["ttft_each_s"])
            print(
                f"{family:9s} {method:13s} accelerator {run['accelerator_peak_bytes']:,} B  host "
                f"{run['host_bytes']:,} B  ttft {run['ttft_s']:.3f} s ({each})  {run['seconds']:.1f} s",
                flush=True,
            )
        del adapter
        gc.collect()
        release(device)
    weights = "checkpoint" if args.checkpoint and not args.smoke else "random"
    data = {
        "weights": weights,  # random: memory and timing only, the answers mean nothing
        "shape": args.shape if args.random_weights and not args.smoke else None,
        "budget": budget,
        "c_ratio": C_RATIO,
        "frames": n_frames,
        "frame_hw": list(size),
        "families": families,
        "runs": runs,
    }
    write_result(args.out, "gpu_peers", data, args.smoke, device)
    return data


if __name__ == "__main__":
    main()
