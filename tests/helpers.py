"""Helpers shared by the tests that drive ``run.py`` in a subprocess and read run directories."""

from __future__ import annotations

import json
from pathlib import Path

from tests.launch import ROOT
from tests.launch import run as run_py

__all__ = ["ROOT", "TINY_QWEN2VL", "lines", "run_py"]

# The tiny Qwen2-VL of the in-process tests: random weights, real transformers classes, a few megabytes.
TINY_QWEN2VL = dict(
    family="qwen2vl",
    tiny=True,
    dtype="float32",
    min_pixels=56 * 56,
    max_pixels=112 * 112,
    options={"num_layers": 2, "hidden_size": 128, "num_heads": 4, "num_kv_heads": 2, "seed": 0},
)


def lines(path: Path) -> list[dict]:
    """The JSON lines of a predictions or memory file (empty if it does not exist yet)."""
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
