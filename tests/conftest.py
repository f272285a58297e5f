"""Shared fixtures: the tiny Qwen2-VL built once per session, fast torch settings."""

from __future__ import annotations

import os

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
