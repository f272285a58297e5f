"""A run whose every question ended in an error is a failure, not a 0.0: run.py exits 1 with one line naming the
cause, its files are kept, a sweep counts the job FAILED and the aggregator skips it; a run where only some
questions failed stays a result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infinipotv.data.answers import RunFailed
from infinipotv.data.rescore import SkippedInput
from infinipotv.job import run_job
from infinipotv.results.collect import load_runs
from tests.helpers import lines, run_py
from tests.hostile.run_helpers import toy_config
from tests.slurm.sweeps import sweep

SYMBOLIC = [
    "model=tiny_qwen2vl",
    "compress=full",
    "compress.budget=null",
    "benchmark=symbolic",
    "benchmark.options.n_videos=2",
    "benchmark.options.frames=48",
]


def _spoil(videos: list[Path]) -> None:
    for video in videos:
        video.write_bytes(b"not a video at all")


def test_a_run_whose_every_question_failed_raises_and_keeps_its_files(tmp_path):
    """Every question an error: the job raises RunFailed naming the cause; metrics.json says failed; a run where
    some questions failed stays a result"""
    config = toy_config(tmp_path / "data", "mlvu")
    videos = sorted((tmp_path / "data").rglob("*.mp4"))
    assert len(videos) > 1
    _spoil(videos[:1])
    partial = run_job(config, tmp_path / "partial")
    assert 0 < partial["n_errors"] < partial["n_questions"] and "failed" not in partial
    _spoil(videos)
    with pytest.raises(
        RunFailed, match=r"every one of the \d+ questions ended in an error \(VideoError: \d+.*\), the first"
    ):
        run_job(config, tmp_path / "failed")
    metrics = json.loads((tmp_path / "failed" / "metrics.json").read_text())
    assert metrics["failed"].startswith(f"every one of the {metrics['n_questions']} questions")
    assert len(lines(tmp_path / "failed" / "predictions.jsonl")) == metrics["n_questions"] > 0

    with pytest.warns(SkippedInput, match=r"failed.*the run failed: every one of"):
        runs = load_runs(tmp_path)
    assert [run.id for run in runs] == ["partial"]


def test_run_py_exits_1_naming_the_cause_when_every_question_failed(tmp_path):
    """run.py exits 1 with one error line when every question failed, and 0 when only some did"""
    data = tmp_path / "data"
    first = run_py(*SYMBOLIC, f"benchmark.root={data}", f"run_dir={tmp_path / 'good'}")
    assert first.returncode == 0, first.stderr
    _spoil(sorted(data.glob("*/videos/*.mp4")))
    out = run_py(*SYMBOLIC, f"benchmark.root={data}", f"run_dir={tmp_path / 'bad'}")
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert len(errors) == 1 and "every one of the" in errors[0] and "ended in an error" in errors[0], out.stderr
    assert (tmp_path / "bad" / "metrics.json").is_file()


@pytest.mark.slow
def test_a_sweep_counts_a_job_whose_every_question_failed_as_failed(tmp_path):
    """A sweep counts a job whose every question failed as FAILED (submitit's local launcher, as on Slurm)"""
    good, bad = tmp_path / "good", tmp_path / "bad"
    assert run_py(*SYMBOLIC, f"benchmark.root={bad}", f"run_dir={tmp_path / 'make'}").returncode == 0
    _spoil(sorted(bad.glob("*/videos/*.mp4")))
    out = sweep(
        tmp_path / "sweep",
        *SYMBOLIC,
        f"benchmark.root={good},{bad}",
        data=tmp_path,
        cluster="hydra/launcher=local",
        timeout=600,
    )
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-3000:]
    assert "sweep finished: 1 of 2 jobs done, 1 failed" in log, log[-3000:]
    assert "FAILED: error: " in log and "ended in an error" in log, log[-3000:]
