"""The family registry as a fixture: every test that takes ``adapter`` runs once per model family (tiny config)."""

from __future__ import annotations

import numpy as np
import pytest

from infinipotv.stream.reference import FAMILIES, tiny_adapter


@pytest.fixture(scope="session", params=FAMILIES)
def adapter(request):
    return tiny_adapter(request.param)


@pytest.fixture
def video() -> np.ndarray:
    """12 raw frames, 56 x 84 (wider than tall), three scenes of four near-identical frames: structure TaR can see."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, size=(3, 56, 84, 3))
    return (np.repeat(base, 4, axis=0) + rng.integers(0, 3, size=(12, 56, 84, 3))).clip(0, 255).astype(np.uint8)
