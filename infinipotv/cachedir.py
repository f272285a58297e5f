"""The harness's cache folder (converted tokenizer and weights): one place, overridable."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where the harness caches converted artefacts (tokenizer, dequantized weights). ``INFINIPOTV_CACHE`` overrides."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    root = os.environ.get("INFINIPOTV_CACHE") or xdg / "infinipotv"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
