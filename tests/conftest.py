"""Shared fixtures: the tiny Qwen2-VL built once per session; torch threads and xdist groups.

Under pytest-xdist (``-n``, in pyproject's addopts) each worker gets its share of the cores, for torch here and for
the processes tests start (OMP_NUM_THREADS), so that workers never oversubscribe the machine. A test file is one
xdist group, and every Slurm test is in one group: they share one cluster. What a file's tests share is a
session-scoped fixture, built once per worker whatever order the worker runs its tests in. (A CI run of b481adf still
built the Slurm sweep fixture on both workers: the Slurm group was split between them, a cause not found yet.)
"""

from __future__ import annotations

import os

import pytest
import torch

from infinipotv.config import ModelConfig
from tests.helpers import TINY_QWEN2VL

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
if _WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = str(_THREADS)
torch.set_num_threads(_THREADS)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            group = "slurm" if item.get_closest_marker("slurm") else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def tiny_qwen2vl():
    from infinipotv.models.qwen2vl import Qwen2VLAdapter

    return Qwen2VLAdapter.load(ModelConfig(**TINY_QWEN2VL))
