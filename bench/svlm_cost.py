"""What StreamingVLM's rotation on read costs: the same stream and questions with keys rotated on read (the method)
and with keys re-rotated in the store at every eviction (the path before issue 47 item 5), side by side.

    python -m bench.svlm_cost            # the CPU study's setting (a few minutes on 2 cores)
    python -m bench.svlm_cost --smoke    # tiny sizes, for the tests

``compress=streamingvlm`` (``pos_mode=shrink``) on the setting of ``experiments/cpu_peers.yaml``: SmolLM2-135M
reading glyph frames (12 tokens each), |M| = 288, chunks of 2 frames, keys stored in fp16; a video of 96 frames with a
question (8 answer tokens) every 24. Rotating on read moves the work from the eviction (one rotation of the survivors
per chunk) to every forward that reads the memory (each chunk's prefill and every question and answer token), as
upstream does. Per path: the stream's encode seconds (the trace's: vision and prefill), its eviction seconds and the
questions' seconds, medians over rounds that alternate the two paths in one process (a shared machine's load falls
on both alike), and each path's ratio to the re-rotating one; every round's figures are kept beside them.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from bench.common import FrameStream, load_model, parse, parser, quant_config, session, write_result
from bench.streams import FPS, QUESTION
from infinipotv.compress.streamingvlm import window_keep
from infinipotv.models import ModelAdapter
from infinipotv.stream.streamingvlm import StreamingVLMMethod
from infinipotv.stream.video_state import VideoState

SPEC = {"model": "symbolic", "budget": 288, "frame_hw": (48, 64), "glyph_patch": 16, "chunk": 2, "frames": 96}
SMOKE_SPEC = {"model": "tiny_llava_ov", "budget": 64, "frame_hw": (56, 56), "glyph_patch": 0, "chunk": 1, "frames": 8}
QUESTIONS = 4  # one every frames / QUESTIONS frames
ANSWER_TOKENS = 8
ROUNDS, SMOKE_ROUNDS = 5, 1
PATHS = ("rerotated", "on_read")


class Rerotating(StreamingVLMMethod):
    """The shrink path before issue 47 item 5, kept here only to be timed against: the stores stay as the session
    made them, and an eviction re-rotates the survivors' stored keys to their new positions."""

    def start(self, video: VideoState) -> None:
        """Plain stores (no rotation on read)."""

    @torch.inference_mode()
    def evict(self, video: VideoState, frames: int) -> None:
        p = video.prefix_len
        per_frame = video.grid[0] * video.grid[1]
        ids = video.cache.stores[0].token_ids()[0, p:]
        n_video = len(ids)
        first = n_video if frames < 1 else int(window_keep(ids.long() // per_frame, frames)[0])
        n = n_video - first
        old = self.held_positions(video, n_video // per_frame)[:, first:]
        new = self.held_positions(video, n // per_frame)
        for store in video.cache.stores:
            keys, values = store.read()
            k, v, own = keys[:, p + first :], values[:, p + first :], store.token_ids()[0, p + first :]
            moved = self.adapter.rerotate(k, old, new)
            store.keep(torch.arange(p, device=ids.device).expand(keys.shape[0], p))
            store.append(moved, v, own)


def run(adapter: ModelAdapter, spec: dict[str, Any], path: str) -> dict[str, float]:
    """One video through a StreamingVLM session on ``path``: seconds encoding, evicting and answering."""
    sess = session(
        adapter, "streamingvlm", quant_config("fp16", dtype="float16"), spec["budget"], chunk_frames=spec["chunk"]
    )
    if path == "rerotated":
        sess.method = Rerotating(sess.method.policy, adapter, spec["budget"], 0.75, None)
    sess.start("bench")
    stream = FrameStream(
        *spec["frame_hw"], spec["frames"], spec["chunk"], scene_frames=6, glyph_patch=spec["glyph_patch"]
    )
    every, asked = max(1, spec["frames"] // QUESTIONS), 0.0
    for chunk in stream:
        sess.feed(chunk, FPS)
        if sess.video.frames_seen % every == 0:
            t0 = time.perf_counter()
            sess.ask(QUESTION, ANSWER_TOKENS)
            asked += time.perf_counter() - t0
    trace = sess.trace
    return {
        "encode_seconds": sum(s.encode_seconds for s in trace),
        "evict_seconds": sum(s.compress.seconds for s in trace if s.compress),
        "ask_seconds": asked,
        "evictions": sum(bool(s.compress) for s in trace),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    spec, rounds = (SMOKE_SPEC, SMOKE_ROUNDS) if args.smoke else (SPEC, ROUNDS)
    adapter = load_model(spec["model"])
    for path in PATHS:  # warm-up: lazy initialisation and allocator growth stay out of the rounds
        run(adapter, {**spec, "frames": spec["frames"] // 2}, path)
    measured: dict[str, list[dict[str, float]]] = {path: [] for path in PATHS}
    for _ in range(rounds):
        for path in PATHS:
            measured[path].append(run(adapter, spec, path))
    paths = {}
    for path, runs in measured.items():
        paths[path] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        paths[path]["stream_seconds"] = paths[path]["encode_seconds"] + paths[path]["evict_seconds"]
    base = paths["rerotated"]
    for path, row in paths.items():
        for key in ("encode_seconds", "evict_seconds", "stream_seconds", "ask_seconds"):
            row[f"{key}_ratio"] = row[key] / base[key] if base[key] else None
        print(
            f"{path:9s} encode {row['encode_seconds']:.3f} s, evict {row['evict_seconds']:.3f} s, stream "
            f"{row['stream_seconds']:.3f} s ({row['stream_seconds_ratio']:.2f}x), questions {row['ask_seconds']:.3f} s "
            f"({row['ask_seconds_ratio']:.2f}x), {row['evictions']:.0f} evictions",
            flush=True,
        )
    spec = {**spec, "questions": QUESTIONS, "answer_tokens": ANSWER_TOKENS, "rounds": rounds}
    data = {"spec": spec, "paths": paths, "rounds": measured}
    write_result(args.out, "svlm_cost", data, args.smoke, adapter.device)
    return data


if __name__ == "__main__":
    main()
