"""One evaluation job: a config in, predictions + metrics + memory trace out; resumable at question level.

Each video is decoded and streamed through the session once; all of its questions are answered on that memory
(streaming benchmarks: each at its time stamp). Every answer is appended and flushed to ``predictions.jsonl`` at
once, so a job killed at any point and started again on the same run directory skips what is done.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from infinipotv.config import RunConfig
from infinipotv.data import Benchmark, Question, VideoSample
from infinipotv.data.subset import describe, select
from infinipotv.data.frames import FrameSource, SourcesAhead
from infinipotv.data.video import FramePlan, VideoError
from infinipotv.factory import Parts, build_benchmark, build_parts
from infinipotv.models.base import ModelAdapter, resize_frames
from infinipotv.progress import Progress
from infinipotv.provenance import now, provenance
from infinipotv.results.tracking import Tracker
from infinipotv.rundir import CONFIG, MEMORY, METRICS, PREDICTIONS, PROVENANCE, read_jsonl
from infinipotv.stream.session import Answer, StreamingSession



def read_predictions(path: Path) -> list[dict[str, Any]]:
    """A run's prediction records; a last line cut by a kill is dropped from the file, so appending goes on cleanly."""
    return read_jsonl(path, repair=True)[0]


class _Appender:
    """Append JSON lines, flushed and fsynced one by one (a SIGKILL loses at most the line being written)."""

    def __init__(self, path: Path) -> None:
        self.f = path.open("a")

    def write(self, record: dict) -> None:
        self.f.write(json.dumps(record) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def sample_frames(sample: VideoSample, cfg: RunConfig, adapter: ModelAdapter) -> FrameSource:
    """The frames to stream and their time stamps: a fixed count (uniform) or the model's rate capped at max_frames,
    decoded chunk by chunk in the background at the model's input size."""
    m = cfg.model
    plan = FramePlan.uniform(sample.path, m.num_frames) if m.num_frames else FramePlan.rate(sample.path, m.fps, m.max_frames)
    duration = plan.info.duration_s
    fps = len(plan) / duration if duration else m.fps  # the real rate of what is streamed

    def resize(frames: np.ndarray) -> np.ndarray:
        return resize_frames(frames, adapter.frame_size(frames.shape[1], frames.shape[2]))

    return FrameSource(plan, fps, cfg.eval.chunk_frames, resize)


def _record(bench: Benchmark, sample: VideoSample, q: Question, answer: Answer | None, error: str | None) -> dict:
    output = answer.text if answer else ""
    parsed = bench.parse(output, q) if answer else None
    rec = {
        "benchmark": bench.name, "question_id": q.qid, "video_id": sample.video_id, "categories": q.categories,
        "prompt": q.prompt, "options": q.options, "output": output, "parsed": parsed, "gold": q.gold,
        "correct": error is None and parsed == q.gold, "error": error, "time_s": q.time_s,
    }
    if answer is not None and answer.reference is not None:
        ref = answer.reference
        rec["reference"] = {
            "output": ref.text, "parsed": bench.parse(ref.text, q),
            "agree": bench.parse(ref.text, q) == parsed,
            "kl_first_token": float(torch.sum(ref.first_logprobs.exp() * (ref.first_logprobs - answer.first_logprobs))),
        }
    return rec


def _stream(session: StreamingSession, sample: VideoSample, frames: FrameSource, todo: list[Question], cfg: RunConfig,
            bench: Benchmark, out: _Appender, memory: _Appender, progress: Progress) -> None:
    """Stream one video and answer its remaining questions (offline: after the whole video; streaming: in time)."""
    session.start(sample.video_id)
    progress.start_video()
    chunk = cfg.eval.chunk_frames
    fed = 0

    def feed_until(n: int) -> None:
        nonlocal fed
        while fed < n:
            session.feed(frames.read(fed, min(fed + chunk, n)), frames.fps)
            fed = min(fed + chunk, n)
            progress.streamed(session)

    asked = sorted(todo, key=lambda q: q.time_s) if bench.streaming else todo
    traced = 0
    for q in asked:
        if bench.streaming and q.time_s is not None:
            feed_until(int(np.searchsorted(frames.times, q.time_s, side="right")))
        else:
            feed_until(len(frames))
            session.finish()
        answer = session.ask(q.prompt, cfg.eval.max_new_tokens or q.max_new_tokens)
        for step in session.trace[traced:]:  # the trace of what was streamed goes down before the answer it led to
            memory.write(step.to_dict())
        traced = len(session.trace)
        out.write(_record(bench, sample, q, answer, None))
        progress.answered()


def _metrics(bench: Benchmark, records: list[dict], cfg: RunConfig, parts_info: dict, expected: int,
             elapsed_s: float, memory_path: Path) -> dict:
    steps = read_jsonl(memory_path)[0]
    passes = [s["compress"] for s in steps if s["compress"]]
    refs = [r["reference"] for r in records if "reference" in r]
    metrics = {
        "benchmark": bench.name,
        "scores": bench.score(records),
        "subset": describe(cfg.benchmark),
        "n_questions": len(records),
        "n_expected": expected,
        "n_errors": sum(r["error"] is not None for r in records),
        "complete": len(records) == expected,
        "model": cfg.model.family, "checkpoint": cfg.model.checkpoint or ("tiny" if cfg.model.tiny else None),
        "policy": cfg.compress.name, "storage": cfg.quant.name, "bits": cfg.quant.bits,
        **parts_info,
        "memory": {
            "peak_cache_tokens": max((s["total_tokens"] for s in steps), default=0),
            "peak_video_tokens": max((s["video_tokens"] for s in steps), default=0),
            "peak_cache_bytes": max((s["cache_bytes"] for s in steps), default=0),
            "peak_memory_bytes": max((s["peak_memory_bytes"] for s in steps), default=0),
            "frames": sum(max(s["frames_seen"] for s in steps if s["video_id"] == v) for v in {s["video_id"] for s in steps}),
        },
        "time": {
            "seconds": elapsed_s,
            "encode_seconds": sum(s["encode_seconds"] for s in steps),
            "compress_seconds": sum(p["seconds"] for p in passes),
            "compress_passes": len(passes),
            "byte_cap_passes": sum(p.get("passes", 1) - 1 for p in passes),  # further passes a byte cap asked for
        },
    }
    if refs:
        metrics["reference"] = {
            "agreement": 100.0 * sum(r["agree"] for r in refs) / len(refs),
            "kl_first_token": float(np.mean([r["kl_first_token"] for r in refs])),
            "n": len(refs),
        }
    return metrics


def _drop_partial_traces(path: Path, restream: set[str]) -> None:
    """Videos that will be streamed again (some of their questions unanswered) record their trace anew."""
    steps = read_jsonl(path, repair=True)[0]
    kept = [step for step in steps if step["video_id"] not in restream]
    if len(kept) < len(steps):
        path.write_text("".join(json.dumps(step) + "\n" for step in kept))


def run_job(cfg: RunConfig, run_dir: Path) -> dict:
    """Run (or resume) one evaluation into ``run_dir``; returns the metrics."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG).write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    prov = provenance(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    bench = build_benchmark(cfg)
    samples = select(bench.samples(), cfg.benchmark)
    expected = sum(len(s.questions) for s in samples)
    done = {r["question_id"] for r in read_predictions(run_dir / PREDICTIONS)}
    _drop_partial_traces(run_dir / MEMORY, {s.video_id for s in samples if any(q.qid not in done for q in s.questions)})
    parts: Parts | None = None
    out, memory = _Appender(run_dir / PREDICTIONS), _Appender(run_dir / MEMORY)
    streamed = [s for s in samples if s.error is None and any(q.qid not in done for q in s.questions)]
    following = dict(zip((s.video_id for s in streamed), streamed[1:]))  # the video that streams after each
    ahead = SourcesAhead(lambda s: sample_frames(s, cfg, session.adapter))
    progress = Progress(len(streamed), sum(q.qid not in done for s in samples for q in s.questions))
    try:
        for sample in samples:
            todo = [q for q in sample.questions if q.qid not in done]
            if not todo:
                continue
            if sample.error is not None:
                for q in todo:
                    out.write(_record(bench, sample, q, None, sample.error))
                progress.answered(len(todo))
                continue
            if parts is None:
                parts = build_parts(cfg)
                session = parts.session(cfg.compress.c_ratio, reference=cfg.eval.reference.value == "full")
            try:
                with ahead.open(sample, following.get(sample.video_id)) as frames:
                    _stream(session, sample, frames, todo, cfg, bench, out, memory, progress)
            except VideoError as err:
                # frames decode as the stream goes: questions answered before the bad part keep their answers
                answered = {r["question_id"] for r in read_predictions(run_dir / PREDICTIONS)}
                failed = [q for q in todo if q.qid not in answered]
                for q in failed:
                    out.write(_record(bench, sample, q, None, str(err)))
                progress.answered(len(failed))
    finally:
        progress.close()
        ahead.close()
        out.close()
        memory.close()
    records = read_predictions(run_dir / PREDICTIONS)
    parts_info = {"budget_tokens": parts.budget if parts else cfg.compress.budget,
                  "budget_bytes": parts.budget_bytes if parts else None}
    metrics = _metrics(bench, records, cfg, parts_info, expected, time.perf_counter() - t0, run_dir / MEMORY)
    (run_dir / METRICS).write_text(json.dumps(metrics, indent=2))
    prov["end"] = now()
    (run_dir / PROVENANCE).write_text(json.dumps(prov, indent=2))
    with Tracker.open(cfg, run_dir) as tracker:  # after the local files: a tracking failure cannot lose them
        tracker.log_metrics(metrics)
        tracker.log_memory(read_jsonl(run_dir / MEMORY)[0])
    return metrics


def summary(metrics: dict) -> str:
    """A short markdown table of what a run did."""
    s, m, t = metrics["scores"], metrics["memory"], metrics["time"]
    rows = [
        ("benchmark", metrics["benchmark"]), ("model", f"{metrics['model']} ({metrics['checkpoint']})"),
        ("policy / storage", f"{metrics['policy']} / {metrics['storage']}"),
        ("budget |M| (tokens)", metrics["budget_tokens"]),
        ("accuracy", "n/a" if s["overall"] is None else f"{s['overall']:.1f}"), ("questions", f"{metrics['n_questions']} ({metrics['n_errors']} failed)"),
        ("frames streamed", m["frames"]), ("peak cache tokens", m["peak_cache_tokens"]),
        ("peak cache bytes", f"{m['peak_cache_bytes']:,}"), ("compression passes", t["compress_passes"]),
        ("time (s)", f"{t['seconds']:.1f}"),
    ]
    if "reference" in metrics:
        rows.append(("agreement with full cache", f"{metrics['reference']['agreement']:.1f}"))
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
