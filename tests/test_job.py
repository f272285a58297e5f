"""The job: resumable at question level, bad input recorded per sample, configs validated before any work."""

from __future__ import annotations

import json

import pytest

from tests.helpers import lines, run_py

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
