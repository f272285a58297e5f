"""``bench.threads --wait`` runs every OpenMP wait policy idle and beside one busy process, each run under exactly
its policy's variables, and the report states its claims from the rounds (performance is never asserted here)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from bench import threads
from bench.report import render


@pytest.fixture(autouse=True)
def _restore_threads():
    count = torch.get_num_threads()
    yield
    torch.set_num_threads(count)


@pytest.mark.slow  # seven run.py processes, three beside a spinning one: 302 s on the shared 2-core VM at load 10
def test_wait_smoke_runs_each_policy_idle_and_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the bench's own setting never reaches a run
    seen: list[tuple[dict[str, str | None], int | None]] = []
    spinners: list[int] = []
    one_run, busy = threads.one_run, threads.busy_process

    def recording_run(overrides, env, run_dir):
        seen.append(
            ({v: env.get(v) for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}, spinners[-1] if spinners else None)
        )
        return one_run(overrides, env, run_dir)

    def recording_busy():
        with busy() as pid:
            os.kill(pid, 0)  # it runs
            spinners.append(pid)
            yield pid
        spinners.pop()

    monkeypatch.setattr(threads, "one_run", recording_run)
    monkeypatch.setattr(threads, "busy_process", threads.contextmanager(recording_busy))
    data = threads.main(["--wait", "--smoke", "--threads", "1", "--out", str(tmp_path)])

    assert seen[0] == ({"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}, None)  # the warm-up: run.py's default
    policies = [env for env, _ in seen[1:]]
    assert policies == [{"OMP_WAIT_POLICY": p, "GOMP_SPINCOUNT": s} for p, s in threads_env()] * 2
    assert [pid is not None for _, pid in seen[1:]] == [False] * 3 + [True] * 3  # idle, then beside a busy process
    assert set(data["runs"]) == {"idle", "loaded"} and data["same_answers"]
    assert all(len(runs) == 1 and runs[0]["cpu_seconds"] > 0 for by in data["runs"].values() for runs in by.values())
    result = json.loads((tmp_path / "threads_wait.json").read_text())
    assert result["bench"] == "threads_wait" and result["smoke"] is True
    report = render(tmp_path).read_text()
    assert "## 11. How OpenMP threads wait" in report and "run.py's default on idle cores within 10%" in report


def threads_env() -> list[tuple[str | None, str | None]]:
    return [(env.get("OMP_WAIT_POLICY"), env.get("GOMP_SPINCOUNT")) for env in threads.WAIT_POLICIES.values()]
