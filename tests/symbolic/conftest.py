"""Fixtures of the symbolic family's tests: the real SmolLM2-135M (converted and cached on first use, ~1 minute;
then a few seconds), glyph frames of real token ids, and Hydra-composed run configs."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from infinipotv.config import ModelConfig, RunConfig, as_run_config, register_configs
from infinipotv.models import glyphs
from tests.helpers import ROOT

MODEL = dict(family="symbolic", max_pixels=3072, use_chat_template=False)  # as conf/model/symbolic.yaml


@pytest.fixture(scope="session")
def symbolic():
    from infinipotv.models.symbolic import SymbolicAdapter

    return SymbolicAdapter.load(ModelConfig(**MODEL))


def text_frames(adapter, lines: list[str], grid: tuple[int, int] = (3, 4)) -> tuple[np.ndarray, np.ndarray]:
    """Glyph frames showing one line each (padded with newlines, as the benchmark does) and their ids [F, h, w]."""
    p = grid[0] * grid[1]
    newline = adapter.tokenizer("\n", add_special_tokens=False).input_ids
    rows = []
    for line in lines:
        ids = adapter.tokenizer(f" {line}", add_special_tokens=False).input_ids
        rows.append(ids + newline * (p - len(ids)))
    ids = np.array(rows).reshape(len(lines), *grid)
    return glyphs.encode(ids), ids


def compose_run(*overrides: str) -> RunConfig:
    """The RunConfig ``python run.py OVERRIDES`` would run (composed exactly as run.py composes it)."""
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return as_run_config(compose("config", overrides=list(overrides)))
