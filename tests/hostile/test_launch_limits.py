"""What the machine cannot give a run is refused in one line, not a traceback: a Slurm sweep where no Slurm is
installed, a thread count far past the cores this process may run on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infinipotv.config import ConfigError
from infinipotv.threads import PER_CORE, use_threads
from tests.helpers import run_py


def sweep_without_slurm(tmp_path: Path, launcher: str) -> subprocess.CompletedProcess[str]:
    """run.py -m with ``launcher`` (the override choosing Slurm), on a PATH without srun or sbatch, whatever this
    machine has installed; the sweep's folder would be ``tmp_path/sweep``."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return run_py(
        "-m",
        launcher,
        "model=tiny_qwen2vl",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        env={"PATH": str(empty)},
        timeout=120,
    )


def test_a_slurm_sweep_without_slurm_says_how_to_start_one(tmp_path):
    """A Slurm sweep (+cluster=ci) on a machine without sbatch or srun: one line saying how to start the single-node
    Slurm, nothing submitted"""
    out = sweep_without_slurm(tmp_path, "+cluster=ci")
    said = [line for line in out.stderr.splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert said == [
        "no Slurm found here (sbatch and srun not on PATH): start the single-node one with "
        "`sudo slurm/start_slurm.sh` (slurm/README.md), or run the sweep on this machine with hydra/launcher=local "
        "in place of +cluster="
    ], out.stderr


def test_a_submitit_slurm_sweep_without_slurm_is_the_same_one_line(tmp_path):
    """A sweep on hydra-submitit-launcher's own submitit_slurm without sbatch or srun: the +cluster= sweep's one line,
    naming this override, before Hydra starts; nothing submitted"""
    out = sweep_without_slurm(tmp_path, "hydra/launcher=submitit_slurm")
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: no Slurm found here (sbatch and srun not on PATH): start the single-node one with "
        "`sudo slurm/start_slurm.sh` (slurm/README.md), or run the sweep on this machine with hydra/launcher=local "
        "in place of hydra/launcher=submitit_slurm"
    ], out.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_thread_count_far_past_the_cores_is_one_line(tmp_path):
    """threads=100000 is refused in one line naming the cores this process may run on"""
    run_dir = tmp_path / "run"
    out = run_py("model=tiny_qwen2vl", "threads=100000", f"run_dir={run_dir}", timeout=120)
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith("error: threads=100000 is more than 4 threads per core of the "), errors
    assert not run_dir.exists()


def test_the_thread_limit_is_per_core_of_this_process(monkeypatch):
    monkeypatch.setattr("infinipotv.threads.available_cores", lambda: 2)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)
    assert use_threads(2 * PER_CORE) == 2 * PER_CORE
    with pytest.raises(ConfigError, match=rf"threads={2 * PER_CORE + 1} is more .* a count up to {2 * PER_CORE}"):
        use_threads(2 * PER_CORE + 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")
    with pytest.raises(ConfigError, match=r"OMP_NUM_THREADS=100000 \(threads=auto\) is more"):
        use_threads("auto")
