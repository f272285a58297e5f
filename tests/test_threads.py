"""``threads=``: auto takes one thread per core this process may run on (or keeps OMP_NUM_THREADS), a count is taken
as given, a bad value fails with the fix, and a resume may change it (the user's choice)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from infinipotv.config import ConfigError
from infinipotv.runs import CONFIG, config_conflict
from infinipotv.threads import available_cores, resolve, use_threads
from tests.helpers import run_py


def test_auto_takes_a_thread_per_core_of_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("infinipotv.threads.available_cores", lambda: 2)  # an idle 2-core VM: the fastest there
    assert resolve("auto") == 2
    monkeypatch.setattr("infinipotv.threads.available_cores", lambda: 1)
    assert resolve("auto") == 1


def test_auto_keeps_the_users_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert resolve("auto") == 3
    assert resolve(2) == 2  # an explicit count wins over the environment


def test_counts_and_bad_values() -> None:
    assert resolve("4") == 4 and 1 <= available_cores()
    for bad in ("0", "-1", "many", "1.5"):
        with pytest.raises(ConfigError, match="threads=.*auto"):
            resolve(bad)


def test_use_threads_sets_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    try:
        assert use_threads("1") == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_resume_may_change_threads(tmp_path: Path) -> None:
    (tmp_path / CONFIG).write_text("seed: 0\nthreads: auto\n")
    assert config_conflict(tmp_path, "seed: 0\nthreads: '1'\n") is None
    assert "seed" in (config_conflict(tmp_path, "seed: 1\nthreads: auto\n") or "")


def test_run_py_refuses_a_bad_thread_count_before_loading() -> None:
    done = run_py("model=tiny_qwen2vl", "threads=many", timeout=120)
    assert done.returncode == 2 and "threads='many'" in done.stderr, done.stderr[-2000:]
