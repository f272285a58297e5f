"""Helpers for the sweep tests: launch ``run.py -m`` sweeps, find their jobs and run directories, ask Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.helpers import ROOT, lines

T = TypeVar("T")


def env_for(data: Path) -> dict[str, str]:
    """The environment of a sweep: one thread per job, Hydra's short error messages, videos under ``data``."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0", "INFINIPOTV_DATA": str(data)}


def sweep_args(sweep_dir: Path | str, overrides: tuple[str, ...], cluster: str) -> list[str]:
    return [sys.executable, "run.py", "-m", cluster, f"hydra.sweep.dir={sweep_dir}", *overrides]


def sweep(
    sweep_dir: Path | str, *overrides: str, data: Path, cluster: str = "+cluster=ci", timeout: float = 240
) -> subprocess.CompletedProcess:
    """``python run.py -m +cluster=ci hydra.sweep.dir=DIR OVERRIDES`` from the repository root, to the end."""
    return subprocess.run(
        sweep_args(sweep_dir, overrides, cluster),
        cwd=ROOT,
        env=env_for(data),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_sweep(sweep_dir: Path | str, *overrides: str, data: Path, log: Path) -> subprocess.Popen:
    """The same sweep in the background (the login-node process that waits on the jobs); output to ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            sweep_args(sweep_dir, overrides, "+cluster=ci"),
            cwd=ROOT,
            env=env_for(data),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_for(probe: Callable[[], T], timeout: float, what: str, every: float = 0.1) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_dirs(root: Path) -> list[Path]:
    """Every run directory under ``root``: where a job wrote predictions (Hydra's ``.hydra/`` folders aside)."""
    return sorted(p.parent for p in root.rglob("predictions.jsonl"))


def slurm_job_ids(sweep_dir: Path) -> list[str]:
    """Slurm ids of a sweep's jobs from submitit's folders: ``12_0``, ``12_1``... for an array (whose own folder
    ``12`` holds the submission), ``12`` for a lone job."""
    folder = sweep_dir / ".submitit"
    names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    return [n for n in names if "_" in n] or names


def sacct_states(job_id: str) -> list[str]:
    """Every accounting record of a job, oldest first (``-D``: a requeued job keeps its earlier runs)."""
    out = subprocess.run(
        ["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "State"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return [s.strip() for s in out.stdout.splitlines() if s.strip()]


def slurm(*args: str) -> str:
    """Run a Slurm command, fail the test if it fails; its stdout."""
    return subprocess.run(list(args), capture_output=True, text=True, check=True, timeout=30).stdout


def by_question(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["question_id"]: r for r in records}


def predictions(run_dir: Path) -> list[dict[str, Any]]:
    return lines(run_dir / "predictions.jsonl")


def metrics(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "metrics.json").read_text())


def comparable(m: dict[str, Any]) -> dict[str, Any]:
    """Metrics that must not depend on how a run was interrupted: all but wall times and the process's peak RSS."""
    memory = {k: v for k, v in m["memory"].items() if k != "peak_memory_bytes"}
    return {**{k: v for k, v in m.items() if k != "time"}, "memory": memory}
