"""Host memory against video length: real 720p mp4s of 1x and 16x the length, streamed as the job streams them.

    python -m bench.host_memory            # about two minutes on 2 CPU cores
    python -m bench.host_memory --smoke    # tiny sizes, for the tests

Two mp4 files (H.264, 1280x720, written with PyAV; scenes held for a few seconds with a moving bar) of 1x and 16x
the length go through the job's own frame source (:func:`infinipotv.job.sample_frames`: decoded chunk by chunk in
a background thread, resized to the model's input as they come) into a compressed streaming session (the tiny
Qwen2-VL under tar_van_pool, from the job's own :func:`~infinipotv.factory.build_parts`), then one question. For
comparison the same videos are also streamed the way the job did before the frame source: the whole video decoded
into one array first (``whole``). Each (mode, length) runs in its own process; the peak is the kernel's resident-set
high-water mark, as the session's own probe reads it, reset when the measured stream starts (after the model is
loaded and a warm-up stream ran).

Reported: peak RSS and the decode/model overlap, the share of the stream's wall time the model waited for input
(``wait_share``; for ``whole`` the up-front decode). The claim checked: with the frame source, peak RSS at 16x is
within 5% of 1x.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from bench.common import CONF, ROOT, parse, parser, write_result
from infinipotv import job
from infinipotv.config import RunConfig, as_run_config, register_configs
from infinipotv.data import VideoSample
from infinipotv.data.video import FramePlan, decode_planned, write_video
from infinipotv.factory import build_parts

MODES = ("stream", "whole")
MULTIPLES = (1, 16)
FLAT_TOLERANCE = 0.05
QUESTION = "What happens in the video? Answer:"
# 32 raw frames at 2 fps = 16 model frames of 15 tokens (720p at max_pixels 112x112 -> 84x140): 240 vision tokens
# over |M| = 160, so the 1x stream is compressed too; chunks of 4 raw frames (30 tokens) fit |M| - |C| = 40.
SIZES = {"hw": (720, 1280), "base_frames": 32, "fps": 2, "overrides": ["compress.budget=160", "eval.chunk_frames=4"]}
SMOKE_SIZES = {"hw": (72, 128), "base_frames": 16, "fps": 2, "overrides": ["compress.budget=80", "eval.chunk_frames=2"]}


def run_config(sizes: dict[str, Any]) -> RunConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return as_run_config(
            compose(
                "config",
                overrides=[
                    "model=tiny_qwen2vl",
                    "model.max_frames=100000",
                    "compress=tar_van_pool",
                    "quant=fp16",
                    *sizes["overrides"],
                ],
            )
        )


def frames(hw: tuple[int, int], n: int, scene_frames: int = 8, seed: int = 0) -> Iterator[np.ndarray]:
    """Smooth scenes (coarse random blocks, so H.264 keeps the file small) with a bar moving across each frame."""
    h, w = hw
    for i in range(n):
        rng = np.random.default_rng((seed, i // scene_frames))
        scene = rng.integers(0, 200, size=(9, 16, 3), dtype=np.uint8)
        frame = np.repeat(np.repeat(scene, -(-h // 9), axis=0)[:h], -(-w // 16), axis=1)[:, :w].copy()
        x = (i * w // 32) % w
        frame[:, x : x + max(2, w // 64)] = 255
        yield frame


def stream(cfg: RunConfig, parts: Any, path: Path, mode: str) -> dict[str, Any]:
    """Stream one video as the job does (``stream``) or after decoding it whole (``whole``), then one question.

    The session starts first: its probe (:class:`~infinipotv.stream.trace.PeakMemory`, reset by ``start``) then
    holds the peak RSS of everything after it, decoding included, and its baseline the RSS before."""
    session = parts.session(cfg.compress.c_ratio)
    session.start(path.stem)
    chunk = cfg.eval.chunk_frames
    t0 = time.perf_counter()
    if mode == "stream":
        source = job.sample_frames(VideoSample(video_id=path.stem, path=path, questions=[]), cfg, parts.adapter)
        with source:
            for start in range(0, len(source), chunk):
                session.feed(source.read(start, start + chunk), source.fps)
        n, wait = len(source), source.wait_seconds
    else:
        plan = FramePlan.rate(path, cfg.model.fps, cfg.model.max_frames)
        whole = np.stack(list(decode_planned(plan)))
        wait = time.perf_counter() - t0
        for start in range(0, len(whole), chunk):
            session.feed(whole[start : start + chunk], len(plan) / plan.info.duration_s)
        n = len(whole)
        del whole
    session.finish()
    session.ask(QUESTION, max_new_tokens=2)
    wall = time.perf_counter() - t0
    passes = sum(s.compress.passes for s in session.trace if s.compress)
    return {
        "frames": n,
        "wall_seconds": wall,
        "wait_seconds": wait,
        "wait_share": wait / wall,
        "passes": passes,
        "peak_video_tokens": max(s.video_tokens for s in session.trace),
        "baseline_rss_bytes": session.peak.baseline,
        "peak_rss_bytes": session.peak.read(),
        "peak_method": session.peak.method,
    }


def measure(sizes: dict[str, Any], mode: str, video: Path, warm_video: Path) -> dict[str, Any]:
    """One (mode, video) after a warm-up stream of the short video; peak RSS from the reset on."""
    cfg = run_config(sizes)
    parts = build_parts(cfg)
    stream(cfg, parts, warm_video, mode)
    result = stream(cfg, parts, video, mode)
    return {**result, "mode": mode, "video": video.name, "video_bytes": video.stat().st_size}


def _in_subprocess(sizes: dict[str, Any], mode: str, video: Path, warm: Path, threads: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "job.json", Path(tmp) / "result.json"
        spec.write_text(
            json.dumps({"sizes": sizes, "mode": mode, "video": str(video), "warm": str(warm), "threads": threads})
        )
        done = subprocess.run(
            [sys.executable, "-m", "bench.host_memory", "--worker", str(spec), str(out)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"host-memory worker for {mode}/{video.name} failed:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    register_configs()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        spec = json.loads(Path(argv[1]).read_text())
        torch.set_num_threads(spec["threads"])
        result = measure(spec["sizes"], spec["mode"], Path(spec["video"]), Path(spec["warm"]))
        Path(argv[2]).write_text(json.dumps(result))
        return {}
    args = parse(parser(__doc__.splitlines()[0]), argv)
    sizes = SMOKE_SIZES if args.smoke else SIZES
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        videos = {
            m: write_video(Path(tmp) / f"{m}x.mp4", frames(sizes["hw"], m * sizes["base_frames"]), sizes["fps"])
            for m in MULTIPLES
        }
        warm = write_video(Path(tmp) / "warm.mp4", frames(sizes["hw"], sizes["base_frames"] // 2, seed=1), sizes["fps"])
        for mode in MODES:
            for multiple, video in videos.items():
                # the smoke run stays in-process (seconds); measurements each get a fresh process
                result = (
                    measure(sizes, mode, video, warm)
                    if args.smoke
                    else _in_subprocess(sizes, mode, video, warm, args.threads)
                )
                runs.append({**result, "multiple": multiple})
                print(
                    f"{mode:6s} {multiple:3d}x {result['frames']:5d} frames  peak RSS "
                    f"{result['peak_rss_bytes'] / 2**20:8.1f} MiB  wait {100 * result['wait_share']:5.1f}%",
                    flush=True,
                )
    peak = {(r["mode"], r["multiple"]): r["peak_rss_bytes"] for r in runs}
    ratios = {mode: peak[(mode, MULTIPLES[-1])] / peak[(mode, MULTIPLES[0])] for mode in MODES}
    data = {
        "sizes": sizes,
        "multiples": MULTIPLES,
        "tolerance": FLAT_TOLERANCE,
        "runs": runs,
        "peak_ratio": ratios,
        "stream_flat": ratios["stream"] <= 1 + FLAT_TOLERANCE,
        "command": "python -m bench.host_memory" + (" --smoke" if args.smoke else ""),
    }
    write_result(args.out, "host_memory", data, args.smoke, torch.device("cpu"))
    return data


if __name__ == "__main__":
    main()
