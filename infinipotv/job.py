"""One evaluation job: a config in, predictions + metrics + memory trace out; resumable at question level.

Each video is decoded and streamed through the session once; all of its questions are answered on that memory
(streaming benchmarks: each at its time stamp). Every answer is appended and flushed to ``predictions.jsonl`` at
once, so a job killed at any point and started again on the same run directory skips what is done.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from omegaconf import OmegaConf

from infinipotv.config import RunConfig, as_run_config
from infinipotv.data import Benchmark, Question, VideoSample
from infinipotv.data.answers import Asked, RunFailed, answer_again, asked_of, check_restream, failure
from infinipotv.data.frames import FrameSource, SourcesAhead
from infinipotv.data.loading import benchmark_class
from infinipotv.data.scoring import gate_counts
from infinipotv.data.subset import describe, select
from infinipotv.data.video import FramePlan
from infinipotv.factory import Parts, build_benchmark, build_parts
from infinipotv.models.base import ModelAdapter, resize_frames
from infinipotv.progress import Progress
from infinipotv.runs import (
    MEMORY,
    METRICS,
    PREDICTIONS,
    PROVENANCE,
    check_ours,
    claim,
    cut_last_line,
    cut_step,
    is_number,
    parse_line,
    read_jsonl,
    recorded_metrics,
    rewrite,
    sort_predictions,
    trace_steps,
    unwritable,
    warn_cut,
)
from infinipotv.runs.provenance import earlier_sittings, now, provenance, sitting
from infinipotv.stream.session import Answer, StreamingSession


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """A run's prediction records (the readable lines of ``predictions.jsonl``)."""
    return read_jsonl(path)[0]


class _Appender:
    """Append JSON lines, each written whole and fsynced (a SIGKILL loses at most the line being written). A write
    the system refuses (a full disk, the file-size limit) is rolled back to the last whole line and stops the job
    with one line (:func:`infinipotv.runs.unwritable`): everything written before is kept. ``before_first`` runs
    once, before the first line (the answers' provenance goes down before them)."""

    def __init__(self, path: Path, before_first: Callable[[], None] | None = None) -> None:
        self.path = path
        self.before_first = before_first
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise unwritable(path, err) from None

    def write(self, record: dict) -> None:
        if self.before_first is not None:
            self.before_first()
            self.before_first = None
        data = (json.dumps(record) + "\n").encode()
        end = os.fstat(self.fd).st_size
        try:
            while data:
                data = data[os.write(self.fd, data) :]
            os.fsync(self.fd)
        except OSError as err:
            try:
                os.ftruncate(self.fd, end)
            except OSError:
                pass  # a cut last line is dropped when the run resumes (infinipotv.runs.cut_last_line)
            raise unwritable(self.path, err) from None

    def close(self) -> None:
        os.close(self.fd)


def sample_frames(sample: VideoSample, cfg: RunConfig, adapter: ModelAdapter) -> FrameSource:
    """The frames to stream and their time stamps: a fixed count (uniform) or the model's rate capped at max_frames,
    decoded chunk by chunk in the background at the model's input size."""
    m = cfg.model
    plan = (
        FramePlan.uniform(sample.path, m.num_frames)
        if m.num_frames
        else FramePlan.rate(sample.path, m.fps, m.max_frames)
    )
    duration = plan.info.duration_s
    fps = len(plan) / duration if duration else m.fps  # the real rate of what is streamed

    def resize(frames: np.ndarray) -> np.ndarray:
        return resize_frames(frames, adapter.frame_size(frames.shape[1], frames.shape[2]))

    return FrameSource(plan, fps, cfg.eval.chunk_frames, resize)


def _record(
    bench: Benchmark,
    sample: VideoSample,
    q: Question,
    answer: Answer | None,
    error: str | None,
    frames_seen: int | None = None,
) -> dict:
    output = answer.text if answer else ""
    parsed = bench.parse(output, q) if answer else None
    rec = {
        "benchmark": bench.name,
        "question_id": q.qid,
        "video_id": sample.video_id,
        "categories": q.categories,
        "prompt": q.prompt,
        "options": q.options,
        "output": output,
        "parsed": parsed,
        "gold": q.gold,
        "correct": error is None and parsed == q.gold,
        "error": error,
        "time_s": q.time_s,
        "frames_seen": frames_seen,  # the frames the question saw: streamed, or prefilled with it (streaming)
        # accelerator bytes while answering: the stores, the method's own and the view's (retrieved blocks)
        "accelerator_bytes": answer.accelerator_bytes if answer else None,
        "host_bytes": answer.host_bytes if answer else None,  # the method's host memory meanwhile
        "video_tokens_read": round(answer.video_tokens_read, 3) if answer else None,  # per layer and KV head
    }
    if answer is not None and answer.gate is not None:  # an answer-time branch: which ran, and why (WeaveTime)
        rec["gate"] = answer.gate
    if answer is not None and answer.needle is not None:  # what the answer read of its evidence (stream.needles)
        rec["needle"] = {k: round(v, 6) for k, v in answer.needle.items()}
    if answer is not None and answer.reference is not None:
        ref = answer.reference
        rec["reference"] = {
            "output": ref.text,
            "parsed": bench.parse(ref.text, q),
            "agree": bench.parse(ref.text, q) == parsed,
            "kl_first_token": float(torch.sum(ref.first_logprobs.exp() * (ref.first_logprobs - answer.first_logprobs))),
        }
    return rec


def evidence_frames(q: Question, times: np.ndarray) -> tuple[int, int] | None:
    """The streamed frames ``[first, end)`` whose times lie in the question's evidence seconds (a millisecond's
    tolerance for the annotation's rounding); None where none is released or no sampled frame falls in it."""
    if q.evidence_s is None:
        return None
    first, end = np.searchsorted(times, np.asarray(q.evidence_s) - 1e-3)
    return (int(first), int(end)) if end > first else None


def _error(err: BaseException) -> str:
    """An error record's cause: the exception's type and first line (``metrics.errors`` counts by type)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _stream(
    session: StreamingSession,
    sample: VideoSample,
    open_frames: Callable[[], FrameSource],
    todo: list[Question],
    cfg: RunConfig,
    bench: Benchmark,
    out: _Appender,
    memory: _Appender,
    progress: Progress,
    ttft: dict[str, float] | None = None,
) -> None:
    """Stream one video and answer its remaining questions (offline: after the whole video; streaming: in time).

    Chunk boundaries fall every ``eval.chunk_frames`` frames from the start, whoever asks what: a streaming question
    at time t is answered after the whole chunks that end by t, with the frames since the last boundary prefilled
    transiently (:meth:`StreamingSession.ask`), so a resume or a subset answers each question as the full run does.
    Frames are decoded as the stream reaches them (``open_frames``: a :class:`FrameSource`). An error while answering
    one question becomes its record; an error in the stream itself (decoding, a chunk) becomes the record of every
    question of the video still to answer."""
    asked = sorted(todo, key=lambda q: q.time_s) if bench.streaming else todo

    def fail(questions: list[Question], err: BaseException) -> None:
        for q in questions:
            out.write(_record(bench, sample, q, None, _error(err)))
        progress.answered(len(questions))

    try:
        frames = open_frames()
        session.start(sample.video_id)
    except Exception as err:  # noqa: BLE001 (the video's questions record why; the run goes on)
        return fail(asked, err)
    with frames:
        progress.start_video()
        chunk, n = cfg.eval.chunk_frames, len(frames)
        fed, finished, traced = 0, False, 0
        for i, q in enumerate(asked):
            try:
                seen = n
                if bench.streaming and q.time_s is not None:
                    seen = int(np.searchsorted(frames.times, q.time_s, side="right"))
                while fed + chunk <= seen:
                    session.feed(frames.read(fed, fed + chunk), frames.fps)
                    fed += chunk
                    progress.streamed(session)
                if seen == n and not bench.streaming and not finished:
                    if fed < n:
                        session.feed(frames.read(fed, n), frames.fps)
                    session.finish()
                    fed, finished = n, True
                    progress.streamed(session)
                tail = frames.read(fed, seen) if fed < seen else None  # read again when its chunk is fed
            except Exception as err:  # noqa: BLE001
                return fail(asked[i:], err)
            try:
                evidence = evidence_frames(q, frames.times)
                answer = session.ask(
                    q.prompt, cfg.eval.max_new_tokens or q.max_new_tokens, tail, frames.fps, q.stop, evidence, q.text
                )
                record = _record(bench, sample, q, answer, None, seen)
                if ttft is not None:  # a time, not a result: in metrics.json, so predictions stay byte-identical
                    ttft[q.qid] = answer.ttft_s
            except Exception as err:  # noqa: BLE001 (a bad question costs only itself)
                record = _record(bench, sample, q, None, _error(err), seen)
            for step in session.trace[traced:]:  # the trace of what was streamed goes down before the answer it led to
                memory.write(step.to_dict())
            traced = len(session.trace)
            out.write(record)
            progress.answered()


def _metrics(
    bench: Benchmark,
    records: list[dict],
    cfg: RunConfig,
    parts_info: dict,
    asked: list[str],
    elapsed_s: float,
    memory_path: Path,
) -> dict:
    steps = trace_steps(memory_path)
    passes = [s["compress"] for s in steps if s["compress"]]
    streamed: dict[str, int] = {}
    for s in steps:
        streamed[s["video_id"]] = max(streamed.get(s["video_id"], 0), s["frames_seen"])
    seen: dict[str, int] = {}
    for r in records:
        seen[r["video_id"]] = max(seen.get(r["video_id"], 0), _count(r.get("frames_seen")))
    refs = [r["reference"] for r in records if "reference" in r]
    metrics = {
        "benchmark": bench.name,
        "scores": bench.score(records),
        "subset": describe(cfg.benchmark),
        "n_questions": len(records),
        "n_expected": len(asked),
        "n_errors": sum(r["error"] is not None for r in records),
        "errors": dict(Counter(r["error"].split(":")[0] for r in records if r["error"] is not None)),
        "complete": len(records) == len(asked),
        "model": cfg.model.family,
        "checkpoint": cfg.model.checkpoint or ("tiny" if cfg.model.tiny else None),
        "policy": cfg.compress.name,
        "storage": cfg.quant.name,
        "bits": cfg.quant.bits,
        **parts_info,
        "memory": {
            "peak_cache_tokens": max((s["total_tokens"] for s in steps), default=0),
            "peak_video_tokens": max((s["video_tokens"] for s in steps), default=0),
            "peak_cache_bytes": max((s["cache_bytes"] for s in steps), default=0),
            "peak_memory_bytes": max((s["peak_memory_bytes"] for s in steps), default=0),
            # bytes by place, the same count for every method (the answers' retrieval buffers included)
            "peak_accelerator_bytes": max(
                [s.get("accelerator_bytes", 0) for s in steps] + [_count(r.get("accelerator_bytes")) for r in records],
                default=0,
            ),
            "peak_host_bytes": max((s.get("host_bytes", 0) for s in steps), default=0),
            # both places at once: a step's, or an answer's (its view included), the equal-memory tables' total
            "peak_total_bytes": max(
                [s.get("accelerator_bytes", 0) + s.get("host_bytes", 0) for s in steps]
                + [_count(r.get("accelerator_bytes")) + _count(r.get("host_bytes")) for r in records],
                default=0,
            ),
            # the vision tokens an answer read, per layer and KV head, mean over the answers
            "video_tokens_read": float(np.mean(read)) if (read := _numbers(records, "video_tokens_read")) else None,
            "frames": sum(streamed.values()),
            # frames a streaming question saw past the last chunk it was asked after: prefilled with the question,
            # transiently (they are in no trace step, nor in the peaks above), and never streamed into the memory
            "frames_with_questions_only": sum(max(0, n - streamed.get(v, 0)) for v, n in seen.items()),
        },
        "time": {
            "seconds": elapsed_s,
            "encode_seconds": sum(s["encode_seconds"] for s in steps),
            "compress_seconds": sum(p["seconds"] for p in passes),
            "compress_passes": len(passes),
            "byte_cap_passes": sum(p.get("passes", 1) - 1 for p in passes),  # further passes a byte cap asked for
        },
    }
    needles = [r["needle"] for r in records if isinstance(r.get("needle"), dict)]
    if needles:  # what the answers read of their evidence, averaged over the questions (stream.needles)
        metrics["needle"] = {k: float(np.mean([n[k] for n in needles])) for k in ("recall", "share")}
        metrics["needle"]["n"] = len(needles)
    gate = gate_counts(records)
    if gate is not None:  # the answers each branch of an answer-time gate gave (WeaveTime's retrieval share)
        metrics["gate"] = gate
    if refs:
        metrics["reference"] = {
            "agreement": 100.0 * sum(r["agree"] for r in refs) / len(refs),
            "kl_first_token": float(np.mean([r["kl_first_token"] for r in refs])),
            "n": len(refs),
        }
    metrics["question_ids"] = asked  # what the run asks: the aggregator counts answers to these alone
    why = failure(records)
    if why is not None:  # the aggregator skips such a run: its 0.0 is no score
        metrics["failed"] = why
    return metrics


def _numbers(records: list[dict], key: str) -> list[float]:
    """The records' numbers under ``key`` (records from before the key existed, or errors, have none)."""
    return [r[key] for r in records if is_number(r.get(key))]


def _count(value: Any) -> int | float:
    """A record's count (frames seen, bytes) as the metrics take it: 0 where it is none or not a number."""
    return value if is_number(value) else 0


def _drop_partial_traces(path: Path, restream: set[str]) -> None:
    """Videos that will be streamed again (some of their questions unanswered) record their trace anew: their steps
    leave the file, rewritten whole (:func:`infinipotv.runs.rewrite`), every other line kept as it was. A last
    line cut short is dropped, with one warning unless its video is streamed again."""
    cut = cut_step(path)
    if cut is not None and cut[1] not in restream:
        warn_cut(path, cut)
    cut_last_line(path)
    if not path.is_file():
        return
    lines = path.read_bytes().splitlines(keepends=True)
    kept = []
    for line in lines:
        step = parse_line(line)[0]
        if not (isinstance(step, dict) and isinstance(step.get("video_id"), str) and step["video_id"] in restream):
            kept.append(line)  # a step of a finished video, or one the metrics leave out (infinipotv.runs.trace_steps)
    if len(kept) < len(lines):
        rewrite(path, b"".join(kept))


def _todo(run_dir: Path, samples: list[VideoSample], questions: Asked, retry_errors: bool) -> set[str]:
    """The ids of the questions already answered: one record per question of this run is kept
    (:func:`infinipotv.runs.sort_predictions`: a second answer, a foreign id or an unreadable line is set aside,
    with one warning); with ``retry_errors`` the error records are dropped, so those questions run again. An answer
    the metrics cannot read, or to a question whose annotation or video changed since
    (:func:`infinipotv.data.answers.answer_again`), is set aside too, and the question answered again: the other answers
    stay valid, as each question leaves the memory as it found it."""
    path = run_dir / PREDICTIONS
    found = sort_predictions(path, questions, drop_errors=retry_errors, stale=lambda r: answer_again(r, questions))
    warning = found.warning(path)
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    done = {str(r["question_id"]) for r in found.kept}
    _drop_partial_traces(run_dir / MEMORY, {s.video_id for s in samples if any(q.qid not in done for q in s.questions)})
    return done


def run_job(cfg: RunConfig, run_dir: Path, finished: Callable[[RunConfig, Path, dict], None] | None = None) -> dict:
    """Run (or resume) one evaluation into ``run_dir``; returns the metrics.

    The run directory is held for this job alone and must hold this configuration (:func:`infinipotv.runs.claim`,
    :class:`RunDirError` otherwise, before anything is written). A run whose every answer is an error raises
    :class:`RunFailed` once its files are written. ``finished(cfg, run_dir, metrics)`` runs once the local files of
    a run with a result are written, while the directory is still held: run.py passes experiment tracking
    (:func:`infinipotv.results.tracking.track_run`), so the job itself depends on nothing above it."""
    cfg = as_run_config(cfg)  # the policy parameters that run are the ones recorded
    check_ours(run_dir)
    with claim(run_dir, OmegaConf.to_yaml(OmegaConf.structured(cfg)), _defaults(cfg)), _file_size_errors():
        metrics = _run(cfg, run_dir)
        if "failed" in metrics:
            raise RunFailed(f"{run_dir}: {metrics['failed']}; nothing scored (retry_errors=true answers them again)")
        if finished is not None:
            finished(cfg, run_dir, metrics)
        return metrics


def _defaults(cfg: RunConfig) -> str:
    """The schema's default of every field of ``cfg``'s sections, as YAML: what a run directory written before a
    field existed ran with (``???`` where a field has no default)."""
    defaults = OmegaConf.structured(RunConfig)
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            defaults[f.name] = OmegaConf.structured(type(value))
    defaults.benchmark.options = benchmark_class(cfg.benchmark.name).option_defaults
    return OmegaConf.to_yaml(defaults)


@contextmanager
def _file_size_errors() -> Iterator[None]:
    """A write past the file-size limit (``ulimit -f``) fails with EFBIG, which the job reports in one line, instead
    of raising SIGXFSZ, whose default kills the process. Signal handlers belong to the main thread: elsewhere the
    default stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGXFSZ, before)


def _run(cfg: RunConfig, run_dir: Path) -> dict:
    this = sitting(cfg.threads)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    bench = build_benchmark(cfg)
    samples = select(bench.samples(), cfg.benchmark)
    asked = [q.qid for s in samples for q in s.questions]
    questions = asked_of(samples)
    check_restream(run_dir, questions, cfg.retry_errors)
    done = _todo(run_dir, samples, questions, cfg.retry_errors)
    print(f"run directory: {run_dir}", file=sys.stderr, flush=True)  # the end summary repeats it
    if done:
        print(f"resumed: {len(done)} of {len(asked)} already answered", file=sys.stderr, flush=True)
    recorded = recorded_metrics(run_dir, asked) if done.issuperset(asked) else None
    if recorded is not None:  # finished before: its metrics and provenance stay as that run wrote them
        return recorded
    sittings = [*earlier_sittings(run_dir / PROVENANCE, answered=bool(done)), this]

    def record_sittings() -> None:
        rewrite(run_dir / PROVENANCE, json.dumps(provenance(cfg.seed, sittings), indent=2))

    parts: Parts | None = None
    out, memory = _Appender(run_dir / PREDICTIONS, before_first=record_sittings), _Appender(run_dir / MEMORY)
    streamed = [s for s in samples if s.error is None and any(q.qid not in done for q in s.questions)]
    following = dict(zip((s.video_id for s in streamed), streamed[1:]))  # the video that streams after each
    ahead = SourcesAhead(lambda s: sample_frames(s, cfg, session.adapter))
    progress = Progress(len(streamed), sum(q.qid not in done for s in samples for q in s.questions))
    ttft: dict[str, float] = {}
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
            _stream(
                session,
                sample,
                lambda: ahead.open(sample, following.get(sample.video_id)),
                todo,
                cfg,
                bench,
                out,
                memory,
                progress,
                ttft,
            )
    finally:
        progress.close()
        ahead.close()
        out.close()
        memory.close()
    records = read_predictions(run_dir / PREDICTIONS)
    parts_info = {
        "budget_tokens": parts.budget if parts else cfg.compress.budget,
        "budget_bytes": parts.budget_bytes if parts else None,
    }
    metrics = _metrics(bench, records, cfg, parts_info, asked, time.perf_counter() - t0, run_dir / MEMORY)
    if ttft:  # the questions this process answered (a resumed run times only its own)
        times = sorted(ttft.values())
        metrics["time"]["ttft_s"] = {"mean": float(np.mean(times)), "median": float(np.median(times)), "n": len(times)}
        metrics["time"]["ttft_s_by_question"] = ttft
    rewrite(run_dir / METRICS, json.dumps(metrics, indent=2))
    this["end"] = now()
    record_sittings()
    return metrics


def summary(metrics: dict) -> str:
    """A short markdown table of what a run did."""
    s, m, t = metrics["scores"], metrics["memory"], metrics["time"]
    rows = [
        ("benchmark", metrics["benchmark"]),
        ("model", metrics["model"] + (f" ({metrics['checkpoint']})" if metrics["checkpoint"] else "")),
        ("policy / storage", f"{metrics['policy']} / {metrics['storage']}"),
        ("budget |M| (tokens)", metrics["budget_tokens"]),
        ("accuracy", "n/a" if s["overall"] is None else f"{s['overall']:.1f}"),
        ("questions", f"{metrics['n_questions']} ({metrics['n_errors']} failed)"),
        ("frames streamed", m["frames"]),
        *_with_questions(m),
        ("peak cache tokens", m["peak_cache_tokens"]),
        ("peak cache bytes", f"{m['peak_cache_bytes']:,}"),
        ("compression passes", t["compress_passes"]),
        ("time (s)", f"{t['seconds']:.1f}"),
    ]
    if "reference" in metrics:
        rows.append(("agreement with full cache", f"{metrics['reference']['agreement']:.1f}"))
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def _with_questions(memory: dict) -> list[tuple[str, str]]:
    """The row for frames a streaming question saw that the stream had not reached yet (asked before the chunk
    holding them ended): prefilled with the question and dropped with it, so they count in no streamed frame or peak
    above; without the row a StreamingBench run reads as one that saw no video."""
    n = memory.get("frames_with_questions_only", 0)
    if not n:
        return []
    return [("frames prefilled with questions", f"{n} (transiently, with each question; not in the peaks below)")]
