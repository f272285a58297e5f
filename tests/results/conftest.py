"""The example sweep (run directories with the INT4 study's figures), written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.results import load_experiment, load_published, load_runs
from infinipotv.results.example import write_example_sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    write_example_sweep(root)
    return root


@pytest.fixture(scope="session")
def runs(sweep_dir: Path) -> list:
    return load_runs(sweep_dir)


@pytest.fixture(scope="session")
def published():
    return load_published()


@pytest.fixture(scope="session")
def int4_spec():
    return load_experiment(REPO / "experiments" / "int4_vs_fp16.yaml")[1]
