"""Model adapters: one file per family, registered by name (see :class:`ModelAdapter`)."""

from infinipotv.models import (  # noqa: F401  (register the families)
    llava_ov,
    qwen2vl,
    qwen25vl,
    symbolic,  # noqa: F401  (registers the family)
)
from infinipotv.models.base import ADAPTERS, ModelAdapter, VisionChunk, register_adapter
from infinipotv.models.loading import MissingWeightsError
from infinipotv.models.settings import ModelError, ModelSettings

__all__ = [
    "ADAPTERS",
    "ModelAdapter",
    "ModelError",
    "ModelSettings",
    "VisionChunk",
    "register_adapter",
    "MissingWeightsError",
]
