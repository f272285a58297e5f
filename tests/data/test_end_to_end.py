"""Each benchmark end to end on the tiny Qwen2-VL: fixture data in the released format (the Hub's and, for MLVU
and EgoSchema, the official release's) -> run_job -> scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infinipotv.config import CompressConfig, EvalConfig, ModelConfig, QuantConfig, RunConfig
from infinipotv.data.toy import BUILDERS
from infinipotv.job import read_predictions, run_job
from infinipotv.stream.session import StreamingSession
from tests.helpers import TINY_QWEN2VL


def run_config(bench, compress: str = "tar_van_pool") -> RunConfig:
    return RunConfig(
        model=ModelConfig(**TINY_QWEN2VL),
        compress=CompressConfig(name=compress, budget=40),
        quant=QuantConfig(),
        benchmark=bench,
        eval=EvalConfig(chunk_frames=2),
    )


@pytest.mark.parametrize(
    "name, fmt", [(name, None) for name in sorted(BUILDERS)] + [("mlvu", "official"), ("egoschema", "official")]
)
def test_benchmark_runs_end_to_end(name: str, fmt: str | None, tmp_path: Path) -> None:
    bench = BUILDERS[name](tmp_path / "data", **({"fmt": fmt} if fmt else {}))
    metrics = run_job(run_config(bench), tmp_path / "run")
    records = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert metrics["complete"] and len(records) == metrics["n_questions"]
    errors = [r for r in records if r["error"]]
    assert errors, "the fixtures hold a missing video and a malformed row"
    assert metrics["n_errors"] == len(errors) and metrics["scores"]["n_errors"] == len(errors)
    answered = [r for r in records if not r["error"]]
    assert answered and all(isinstance(r["categories"], dict) and r["prompt"] and r["gold"] for r in answered)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["scores"]["overall"] is not None


def test_streaming_questions_are_answered_before_later_frames(tmp_path: Path, monkeypatch) -> None:
    bench = BUILDERS["streamingbench"](tmp_path / "data")
    seen: list[tuple[str, int, float]] = []
    ask = StreamingSession.ask

    def spy(self, prompt, max_new_tokens, frames=None, fps=None, stop=None, evidence=None, question=None):
        # the frames streamed, and those since the last chunk boundary prefilled with the question
        seen.append((prompt, self.video.frames_seen + (0 if frames is None else len(frames)), fps or self.video.fps))
        return ask(self, prompt, max_new_tokens, frames, fps, stop, evidence, question)

    monkeypatch.setattr(StreamingSession, "ask", spy)
    run_job(run_config(bench), tmp_path / "run")
    stamps = [float(p.split("at 00:00:0")[1][0]) for p, _, _ in seen]
    assert len(stamps) == 3  # the one whole video's questions (the other's video is missing, one row is bad)
    assert stamps == sorted(stamps), "questions of a video are asked in time order"
    n_frames = 6  # the fixture video: 3 s sampled at the model's 2 fps, frames at 0, 0.5, ... 2.5 s
    for (prompt, frames_seen, fps), t in zip(seen, stamps):
        assert frames_seen == min(int(t * fps) + 1, n_frames), f"{prompt!r}: {frames_seen} frames fed before t={t}s"


def test_a_video_that_breaks_mid_stream_keeps_the_answers_before_the_break(tmp_path: Path, monkeypatch) -> None:
    """Frames decode as the stream goes: a decoding error in the third chunk fails only the questions after it."""
    import threading

    from infinipotv import job
    from infinipotv.data.video import VideoError

    chunks: dict[str, int] = {}
    resize = job.resize_frames

    def breaks_third_chunk(frames, size):
        name = threading.current_thread().name  # each video decodes in its own background thread
        chunks[name] = chunks.get(name, 0) + 1
        if chunks[name] == 3:
            raise VideoError("corrupt packet in the third chunk")
        return resize(frames, size)

    monkeypatch.setattr(job, "resize_frames", breaks_third_chunk)
    bench = BUILDERS["streamingbench"](tmp_path / "data")
    run_job(run_config(bench), tmp_path / "run")
    records = [r for r in read_predictions(tmp_path / "run" / "predictions.jsonl") if r["video_id"] == "sample_1_real"]
    assert len({r["question_id"] for r in records}) == len(records) == 3, "each question recorded once"
    for r in records:  # chunks of 2 frames at 2 fps: the third holds the frames at 2.0 and 2.5 s
        assert (r["error"] is not None) == (r["time_s"] >= 2.0), r
    assert all("third chunk" in r["error"] for r in records if r["error"])


def test_the_caller_hears_of_the_finished_run(tmp_path: Path) -> None:
    """run_job hands the finished run to the caller's hook (run.py passes experiment tracking) once its local files
    are written: the job itself depends on nothing above it."""
    bench = BUILDERS["videomme"](tmp_path / "data")
    heard = []

    def finished(cfg, run_dir: Path, metrics: dict) -> None:
        heard.append((cfg.compress.name, run_dir, metrics, json.loads((run_dir / "metrics.json").read_text())))

    metrics = run_job(run_config(bench), tmp_path / "run", finished=finished)
    [(name, run_dir, got, saved)] = heard
    assert name == "tar_van_pool" and run_dir == tmp_path / "run" and got is metrics
    assert saved == json.loads(json.dumps(metrics))
