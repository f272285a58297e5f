"""Fixtures of the sweep tests: a running Slurm cluster (or a clear skip), and the benchmark videos made ahead of the
jobs.

The videos are generated here, once, because the jobs of an array would otherwise all generate them at the same
time into the same folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.helpers import ROOT

# The job the sweeps run: the default benchmark streamed by the tiny Qwen2-VL (seeded random weights) into a full
# cache, a few seconds per job (the default model and policy take minutes on a CPU).
JOB = ("model=tiny_qwen2vl", "compress=full", "compress.budget=null", "eval.chunk_frames=8")
N_VIDEOS = 12  # big enough that a job is still mid-benchmark several seconds after its first answers


def _cluster_problem() -> str | None:
    """Why no usable cluster is here (None: sinfo and sacct answer)."""
    if shutil.which("sinfo") is None:
        return "no Slurm client here (sinfo is not on PATH)"
    for cmd in (["sinfo", "-h", "-o", "%P %a"], ["sacct", "-n", "-X", "-j", "1"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` did not answer in 20 s"
        if out.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {(out.stderr.strip().splitlines() or [f'exit {out.returncode}'])[-1]}"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A running cluster with accounting (submitit needs sacct); skip without one, unless CI=true: then fail."""
    problem = _cluster_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            f"CI=true but no usable Slurm cluster: {problem}. .ci/run must start one with "
            f"slurm/start_slurm.sh before the tests",
            pytrace=False,
        )
    pytest.skip(f"no usable Slurm cluster: {problem}. Start one with `sudo slurm/start_slurm.sh` (see slurm/README.md)")


@dataclass
class BenchmarkData:
    """Videos under ``data`` (the INFINIPOTV_DATA of a sweep) and the overrides that describe them."""

    data: Path
    overrides: tuple[str, ...]
    n_questions: int


def make_benchmark(data: Path, *overrides: str) -> BenchmarkData:
    """Generate the (generated-on-first-use) benchmark the job config reads, composed exactly as the job composes it."""
    from infinipotv.config import as_run_config, register_configs
    from infinipotv.factory import build_benchmark

    register_configs()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFINIPOTV_DATA", str(data))
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = as_run_config(compose("config", overrides=list(overrides)))
        n_questions = sum(len(s.questions) for s in build_benchmark(cfg).samples())
    return BenchmarkData(data, tuple(overrides), n_questions)


@pytest.fixture(scope="session")
def big_data(tmp_path_factory) -> BenchmarkData:
    """The default benchmark with more videos (the default few are all answered before a cancel lands)."""
    return make_benchmark(tmp_path_factory.mktemp("big_data"), *JOB, f"benchmark.options.n_videos={N_VIDEOS}")
