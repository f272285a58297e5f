"""The suite's xdist groups hold: a file's tests run on one worker, in order (tests/conftest.py). The suite's time
relies on it (a group's shared fixtures are built once), and it broke once without a sound: pytest 9.2 stopped
reading the group xdist 3.8 writes into a test's id (pytest-dev/pytest-xdist#1386), and every group was split."""

from __future__ import annotations

import os

import pytest

N = 6


@pytest.mark.parametrize("i", range(N))
def test_a_files_tests_run_on_one_worker_in_order(i: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("the suite runs this file under pytest-xdist (-n in pyproject's addopts)")
    log = tmp_path_factory.getbasetemp().parent / "xdist_group_check.txt"  # shared by this run's workers
    with log.open("a") as f:
        f.write(f"{i} {worker}\n")
    seen = [line.split() for line in log.read_text().splitlines()]
    assert [int(j) for j, _ in seen] == list(range(i + 1)) and {w for _, w in seen} == {worker}, (
        f"this file's tests ran as {seen}: the xdist groups of tests/conftest.py do not hold (is pytest >= 9.2 "
        f"installed? pyproject.toml's dev extra says why it must not be)"
    )
