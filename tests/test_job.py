"""The job: resumable at question level, bad input recorded per sample, configs validated before any work, and a
summary true to what ran (the resume line, no directory left by a failed start, frames prefilled with questions)."""

from __future__ import annotations

import json

import pytest

from infinipotv.config import CompressConfig, EvalConfig, ModelConfig, QuantConfig, RunConfig
from infinipotv.data.toy import BUILDERS
from infinipotv.job import read_predictions, run_job, summary
from infinipotv.runs import claim, discard_unused
from tests.helpers import TINY_QWEN2VL, lines, run_py

TINY = ["model=tiny_qwen2vl", "compress=full", "compress.budget=null", "quant=fp16", "benchmark=symbolic"]


def test_missing_and_corrupt_videos_are_recorded_and_the_run_goes_on(tmp_path):
    data = tmp_path / "data"
    small = [*TINY, f"benchmark.root={data}", "benchmark.options.n_videos=3", "benchmark.options.frames=48"]
    first = run_py(*small, f"run_dir={tmp_path / 'a'}")
    assert first.returncode == 0, first.stderr
    videos = sorted(data.glob("*/videos/*.mp4"))
    videos[0].unlink()
    videos[1].write_bytes(b"not a video at all")
    second = run_py(*small, f"run_dir={tmp_path / 'b'}")
    assert second.returncode == 0, second.stderr
    records = lines(tmp_path / "b" / "predictions.jsonl")
    failed = [r for r in records if r["error"]]
    assert {r["video_id"] for r in failed} == {videos[0].stem, videos[1].stem}
    assert all("not found" in r["error"] or "cannot" in r["error"] for r in failed)
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert metrics["n_errors"] == len(failed) and metrics["n_questions"] == len(records)


def test_a_model_setting_that_cannot_work_is_one_config_line(tmp_path):
    """models/ raises its own ModelError; the factory, at the edge, reports it as the config error run.py prints."""
    out = run_py(*TINY, "model.dtype=float64", f"run_dir={tmp_path / 'run'}", timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "error: model.dtype='float64' is not supported; use one of ['bfloat16', 'float16', 'float32']" in out.stderr


def test_composed_config_prints_with_every_group():
    out = run_py("model=qwen2vl", "compress=tar_van_pool", "quant=int4", "--cfg", "job", timeout=60)
    assert out.returncode == 0, out.stderr
    assert "name: tar_van_pool" in out.stdout and "bits: 4" in out.stdout and "family: qwen2vl" in out.stdout


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("compress=nonexistent", "compress"),
        ("compress.pooling=diagonal", "pooling"),
        ("compress.c_ratio=1.5", "compress.c_ratio"),
        ("quant.bits=3", "quant.bits"),
        ("eval.chunk_frames=3", "eval.chunk_frames"),
    ],
)
def test_bad_config_fails_before_any_work_with_one_clear_line(tmp_path, override, needle):
    policy = [] if override.startswith("compress=") else ["compress=tar_van_pool", "compress.budget=200"]
    base = [o for o in TINY if not o.startswith("compress")]
    out = run_py(*base, *policy, override, f"run_dir={tmp_path / 'run'}", timeout=60)
    assert out.returncode != 0
    assert needle in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def _toy_run(root, benchmark: str, chunk_frames: int = 2, policy: str = "tar_van_pool"):
    return RunConfig(
        model=ModelConfig(**TINY_QWEN2VL),
        compress=CompressConfig(name=policy, budget=96 if policy != "full" else None),
        quant=QuantConfig(),
        benchmark=BUILDERS[benchmark](root / benchmark),
        eval=EvalConfig(chunk_frames=chunk_frames),
    )


def test_a_resume_names_its_run_directory_and_what_was_already_answered(tmp_path, capsys):
    cfg, run_dir = _toy_run(tmp_path / "data", "videomme"), tmp_path / "run"
    first = run_job(cfg, run_dir)
    assert "resumed:" not in capsys.readouterr().err
    run_job(cfg, run_dir)
    err = capsys.readouterr().err.splitlines()
    n = first["n_expected"]
    assert f"run directory: {run_dir}" in err and f"resumed: {n} of {n} already answered" in err


def test_a_run_that_fails_before_its_first_question_leaves_no_directory(tmp_path):
    """Missing weights: the run directory Hydra made is removed; one holding earlier results is kept as it was."""
    new = tmp_path / "new"
    out = run_py("model=qwen2vl", "model.checkpoint=/nonexistent/weights", f"run_dir={new}", timeout=120)
    assert out.returncode == 2 and "error: weights" in out.stderr and not new.exists(), out.stderr
    earlier = tmp_path / "earlier"
    done = run_py(*TINY, f"benchmark.root={tmp_path / 'data'}", "benchmark.limit=1", f"run_dir={earlier}")
    assert done.returncode == 0, done.stderr
    before = {p: p.read_bytes() for p in earlier.iterdir() if p.is_file()}
    out = run_py("model=qwen2vl", "model.checkpoint=/nonexistent/weights", f"run_dir={earlier}", timeout=120)
    assert out.returncode == 2 and all(p.read_bytes() == b for p, b in before.items())


def test_a_failed_start_never_removes_a_directory_another_job_holds(tmp_path):
    recorded = "model: {}\ncompress: {}\nquant: {}\nbenchmark: {}\n"  # a run's sections: what a start records
    with claim(tmp_path / "run", recorded):  # a job loading its model: nothing answered yet
        assert not discard_unused(tmp_path / "run") and (tmp_path / "run" / "config.yaml").is_file()
    assert discard_unused(tmp_path / "run") and not (tmp_path / "run").exists()


def test_the_streaming_summary_counts_the_frames_prefilled_with_questions(tmp_path):
    """StreamingBench's questions come before the first chunk of 8 frames ends: no frame is streamed into the
    memory, every frame a question sees is prefilled with it, and the summary says so instead of '0 frames'."""
    cfg = _toy_run(tmp_path / "data", "streamingbench", chunk_frames=8, policy="full")
    metrics = run_job(cfg, tmp_path / "run")
    records = read_predictions(tmp_path / "run" / "predictions.jsonl")
    seen = {}
    for r in records:
        seen[r["video_id"]] = max(seen.get(r["video_id"], 0), r["frames_seen"] or 0)
    assert metrics["memory"]["frames"] == 0 and metrics["memory"]["frames_with_questions_only"] == sum(seen.values())
    assert sum(seen.values()) > 0
    assert f"| frames prefilled with questions | {sum(seen.values())} (transiently" in summary(metrics)
