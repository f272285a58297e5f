"""What InfiniPot-V and its ablations keep of the needles: the measured reason behind the field's table (issue 34).

The CPU study (experiments/cpu_peers.yaml) asks which of TaR and pooling costs InfiniPot-V on the symbolic stream.
Accuracy says *that* a method loses; this says *what it drops*. Each of VaN, TaR + VaN, VaN + pooling and InfiniPot-V
streams the study's videos (both stream kinds, |M| = 144, chunks of two frames: the study's config composed from the
experiment file, built by the job's own factory) and, once a video has streamed whole (where its offline questions
are asked), every layer and KV head's memory is read back as stream ids, i.e. frame and glyph slot. A needle is the
line its question's evidence shows for four frames; per layer and head we count

- ``line``: the share of the line's content glyphs (its newline padding aside) kept in at least one of its frames,
  the part a reader can still find;
- ``copies``: the share of all its frames' content glyphs kept (four identical copies, so a policy that keeps one
  copy of everything scores 25% here and 100% on ``line``);

and, for the memory as a whole, the share of its vision tokens spent on needle frames, on the background rows (the
background kind) and on newline padding. Means over layers, heads, needles (or videos for the shares); ``line``'s
95% CI is a bootstrap over needles (each needle's mean over layers and heads), as the study's CIs are over questions.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from bench.common import CONF, parse, parser, write_result
from infinipotv import job
from infinipotv.config import RunConfig, as_run_config, register_configs
from infinipotv.data.loading import hms_seconds
from infinipotv.factory import build_adapter, build_benchmark, build_parts
from infinipotv.models import glyphs
from infinipotv.models.base import ModelAdapter
from infinipotv.models.symbolic import smollm2_tokenizer
from infinipotv.results.stats import bootstrap_ci

EXPERIMENT = "cpu_peers"
POLICIES = ("van", "tar_van", "van_pool", "tar_van_pool")  # the attribution's four: VaN, + TaR, + pooling, both
KINDS = {  # the study's two stream kinds, as experiments/cpu_peers.sh runs them
    "plain": [],
    "background": ["benchmark.options.background_rows=1", "benchmark.options.grid=[4,4]", "model.max_pixels=4096"],
}
BUDGET = 144


@dataclass(frozen=True)
class Video:
    """One video's glyphs and what its questions point at."""

    video_id: str
    frames: np.ndarray  # [frames, H, W, 3] uint8, as the job streams them
    ids: np.ndarray  # [frames, tokens per frame]: the glyph (token id) at each slot, as the stream numbers them
    needles: list[range]  # each needle's frames (its question's evidence)


def compose_config(kind: str, policy: str, smoke_root: Path | None) -> RunConfig:
    """The study's run config for ``policy`` on ``kind`` (its sweep line's overrides); ``smoke_root``: a one-video
    benchmark generated there instead."""
    overrides = [f"+experiment={EXPERIMENT}", f"compress={policy}", f"compress.budget={BUDGET}", *KINDS[kind]]
    if smoke_root is not None:
        overrides += ["benchmark.options.n_videos=1", f"benchmark.root={smoke_root}"]
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return as_run_config(compose("config", overrides=overrides))


def load_videos(cfg: RunConfig, adapter: ModelAdapter, n_videos: int, n_frames: int | None) -> list[Video]:
    """The first ``n_videos`` videos (``n_frames`` each, None = whole), read as the job reads them."""
    bench = build_benchmark(cfg)
    samples = list(bench.samples())[:n_videos]  # generates the videos on first use
    rows = json.loads(bench.annotations.read_text())
    fps = cfg.benchmark.options["fps"]
    videos = []
    for sample in samples:
        with job.sample_frames(sample, cfg, adapter) as source:
            frames = source.read(0, n_frames or len(source))
        ids = glyphs.decode(frames, cfg.model.options["patch"]).reshape(len(frames), -1)
        spans = [[round(hms_seconds(t) * fps) for t in r["evidence"]] for r in rows if r["video_id"] == sample.video_id]
        videos.append(Video(sample.video_id, frames, ids, [range(a, b) for a, b in spans if b <= len(frames)]))
    return videos


def held(cfg: RunConfig, adapter: ModelAdapter, video: Video) -> list[np.ndarray]:
    """Stream ``video`` through the run's session; each layer's memory at the end as stream ids ``[heads, T]``."""
    session = build_parts(cfg, adapter).session(cfg.compress.c_ratio)
    session.start(video.video_id)
    chunk = cfg.eval.chunk_frames
    for start in range(0, len(video.frames), chunk):
        session.feed(video.frames[start : start + chunk], float(cfg.benchmark.options["fps"]))
    session.finish()
    return [store.token_ids().cpu().numpy() for store in session.video.cache.stores]


def measure(layers: list[np.ndarray], video: Video, newline: int, event_slots: int) -> dict[str, Any]:
    """The needles' ``line`` and ``copies`` shares (one value per needle) and the memory's shares for one video."""
    n_frames, per_frame = video.ids.shape
    kept = np.zeros((len(layers), layers[0].shape[0], n_frames, per_frame), dtype=bool)  # layer, head, frame, slot
    for layer, ids in enumerate(layers):
        for head, row in enumerate(ids):
            vision = row[row >= 0]
            kept[layer, head, vision // per_frame, vision % per_frame] = True
    content = video.ids != newline
    content[:, event_slots:] = False  # the background rows are no needle's
    line, copies = [], []
    for frames in video.needles:
        glyph = content[frames.start]  # the line's content slots (the same line in each of its frames)
        on = kept[:, :, frames.start : frames.stop][..., glyph]  # layer, head, frame, content slot
        line.append(float(on.any(axis=2).mean()))
        copies.append(float(on.mean()))
    total = kept.sum(axis=(2, 3)).astype(float)  # vision tokens each head holds
    needle_frames = np.zeros(n_frames, dtype=bool)
    for frames in video.needles:
        needle_frames[frames.start : frames.stop] = True

    def share(mask: np.ndarray) -> float:
        return float((kept[..., mask].reshape(*kept.shape[:2], -1).sum(axis=2) / total).mean())

    padding = video.ids == newline
    padding[:, event_slots:] = False
    return {
        "line": line,
        "copies": copies,
        "share_needle_frames": share(np.broadcast_to(needle_frames[:, None], video.ids.shape)),
        "share_background": share(np.broadcast_to(np.arange(per_frame) >= event_slots, video.ids.shape)),
        "share_padding": share(padding),
        "stream_share_needle_frames": float(needle_frames.mean()),
        "tokens_held": float(total.mean()),
    }


def run_kind(kind: str, n_videos: int, n_frames: int | None, smoke_root: Path | None) -> dict[str, Any]:
    """Every policy on ``kind``'s first videos: per policy the needles' shares with their CI, the memory's shares."""
    base = compose_config(kind, POLICIES[-1], smoke_root)
    adapter = build_adapter(base)
    videos = load_videos(base, adapter, n_videos, n_frames)
    grid = tuple(base.benchmark.options["grid"])
    event_slots = (grid[0] - base.benchmark.options["background_rows"]) * grid[1]
    newline = smollm2_tokenizer()("\n", add_special_tokens=False).input_ids[0]
    out: dict[str, Any] = {"grid": list(grid), "event_slots": event_slots, "videos": len(videos), "policies": {}}
    for policy in POLICIES:
        cfg = compose_config(kind, policy, smoke_root)
        start = time.perf_counter()
        per_video = [measure(held(cfg, adapter, v), v, newline, event_slots) for v in videos]
        line = [x for m in per_video for x in m["line"]]
        copies = [x for m in per_video for x in m["copies"]]
        low, high = bootstrap_ci(np.asarray(line) * 100, np.full(len(line), 1 / len(line))) if line else (None, None)
        out["policies"][policy] = {
            "needles": len(line),
            "line_pct": 100 * float(np.mean(line)) if line else None,
            "line_ci95": [low, high],
            "copies_pct": 100 * float(np.mean(copies)) if copies else None,
            **{
                f"{key}_pct": 100 * float(np.mean([m[key] for m in per_video]))
                for key in ("share_needle_frames", "share_background", "share_padding", "stream_share_needle_frames")
            },
            "tokens_held": float(np.mean([m["tokens_held"] for m in per_video])),
            "seconds": time.perf_counter() - start,
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--videos", type=int, default=20, help="videos per stream kind (the study has 20)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"stream kinds, comma-separated ({', '.join(KINDS)})")
    args = parse(p, argv)
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        p.error(f"--kinds: unknown {unknown}; choose from {list(KINDS)}")
    if args.smoke:  # one video's first 32 frames (its first needles), the plain kind: seconds
        data = {"kinds": {"plain": run_kind("plain", 1, 32, smoke_root=args.out / "data")}}
    else:
        data = {"kinds": {kind: run_kind(kind, args.videos, None, smoke_root=None) for kind in kinds}}
    data.update(experiment=EXPERIMENT, budget=BUDGET, policies=list(POLICIES))
    path = write_result(args.out, "needle_retention", data, args.smoke, torch.device("cpu"))
    text = "\n".join(markdown(json.loads(path.read_text()))) + "\n"
    path.with_suffix(".md").write_text(text)
    print(text)
    return data


def markdown(data: dict[str, Any]) -> list[str]:
    """One table per stream kind: what each policy keeps of the needles, and where its memory goes."""
    smoke = "smoke run, " if data["smoke"] else ""
    lines = [
        "# What InfiniPot-V and its ablations keep of the needles",
        "",
        f"`python -m bench.needle_retention` at {data['environment']['git_sha']} ({smoke}|M| = {data['budget']}, "
        f"the study's config from experiments/{data['experiment']}.yaml). At the end of each "
        "video, per layer and KV head: *line* = the needle line's content glyphs kept in at least one of its four "
        "frames (95% CI: bootstrap over needles); *copies* = all its frames' content glyphs kept; then the share of "
        "the memory's vision tokens on needle frames (beside the stream's share), on the background rows and on "
        "newline padding.",
    ]
    names = {"van": "VaN", "tar_van": "TaR + VaN", "van_pool": "VaN + pooling", "tar_van_pool": "InfiniPot-V"}
    for kind, result in data["kinds"].items():
        lines += [
            "",
            f"## {kind} stream ({result['videos']} videos, grid {result['grid'][0]} x {result['grid'][1]})",
            "",
            "| policy | needles | line kept % [95% CI] | copies kept % | memory on needle frames % (stream %) "
            "| on background % | on padding % |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for policy, r in result["policies"].items():
            low, high = r["line_ci95"]
            ci = f" [{low:.1f}, {high:.1f}]" if low is not None else ""
            lines.append(
                f"| {names.get(policy, policy)} | {r['needles']} | {r['line_pct']:.1f}{ci} | {r['copies_pct']:.1f} "
                f"| {r['share_needle_frames_pct']:.1f} ({r['stream_share_needle_frames_pct']:.1f}) "
                f"| {r['share_background_pct']:.1f} | {r['share_padding_pct']:.1f} |"
            )
    return lines


if __name__ == "__main__":
    main()
