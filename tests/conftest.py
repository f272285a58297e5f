"""Shared fixtures: tiny models built once per session, small real videos, fast torch settings."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from infinipotv.config import ModelConfig

torch.set_num_threads(min(2, os.cpu_count() or 1))

TINY_QWEN2VL = dict(family="qwen2vl", tiny=True, dtype="float32", min_pixels=56 * 56, max_pixels=112 * 112,
                    options={"num_layers": 2, "hidden_size": 128, "num_heads": 4, "num_kv_heads": 2, "seed": 0})


@pytest.fixture(scope="session")
def tiny_qwen2vl():
    from infinipotv.models.qwen2vl import Qwen2VLAdapter

    return Qwen2VLAdapter.load(ModelConfig(**TINY_QWEN2VL))


@pytest.fixture
def frames() -> np.ndarray:
    """12 raw frames, 56 x 84 (3 x 2 model tokens... wider than tall), with structure a policy can see."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, size=(3, 56, 84, 3))
    return np.repeat(base, 4, axis=0).astype(np.uint8) + rng.integers(0, 3, size=(12, 56, 84, 3)).astype(np.uint8)
