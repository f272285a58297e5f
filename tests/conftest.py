"""Shared fixtures: the tiny Qwen2-VL built once per session; torch threads and xdist groups.

Under pytest-xdist (``-n``, in pyproject's addopts) each worker gets its share of the cores, for torch here and for
the processes tests start (OMP_NUM_THREADS), so that workers never oversubscribe the machine. A test file is one
xdist group, and every Slurm test is in one group: they share one cluster. What a file's tests share is a
session-scoped fixture, built once per worker whatever order the worker runs its tests in.
"""

from __future__ import annotations

import os
from collections import Counter

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
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            mark = pytest.mark.xdist_group("slurm" if item.get_closest_marker("slurm") else item.nodeid.split("::")[0])
            item.add_marker(mark)
        groups[item] = mark.args[0]
    # The groups with the most slow tests first (xdist hands groups out in this order, --no-loadscope-reorder): the
    # Slurm group and the run guarantees start at once on their own workers instead of last, behind the fast ones.
    slow = Counter(groups[item] for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[groups[item]])


@pytest.fixture(scope="session")
def tiny_qwen2vl():
    from infinipotv.models.qwen2vl import Qwen2VLAdapter

    return Qwen2VLAdapter.load(ModelConfig(**TINY_QWEN2VL))
