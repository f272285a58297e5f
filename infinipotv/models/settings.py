"""What the model layer reads of a model choice, and the error it raises for a setting that cannot work.

The layer below the config names its interface (the ``model=`` config, :class:`infinipotv.config.ModelConfig`,
has these fields), so models/ depends on nothing above it; the factory, at the edge, hands the config over and
reports a :class:`ModelError` as the config error users see.
"""

from __future__ import annotations

from typing import Any, Protocol


class ModelSettings(Protocol):
    """A model family's checkpoint and how frames become its input (see conf/model/*.yaml for the values)."""

    checkpoint: str | None  # HF id or local path; None with tiny
    tiny: bool  # a tiny configuration with seeded random weights
    revision: str | None
    dtype: str  # float32 | bfloat16 | float16
    device: str
    attn_implementation: str
    min_pixels: int
    max_pixels: int
    use_chat_template: bool
    options: dict[str, Any]  # family-specific (tiny sizes, image size...)


class ModelError(ValueError):
    """A model setting that cannot work. Its one-line message names the ``model.*`` option and how to fix it."""
