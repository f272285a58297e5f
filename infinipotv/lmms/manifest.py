"""The ``lmms_eval.models`` entry point: lmms-eval 0.7.3 calls :func:`manifest` when it builds its model registry.

Kept apart from the plugin so that lmms-eval's start-up imports nothing heavy of ours: the plugin module (torch, the
model adapters) is imported only when ``--model infinipotv`` is asked for.
"""

from __future__ import annotations

MODEL_ID = "infinipotv"


def manifest():
    """Our registration: a "simple" lmms-eval model (it gets the task's prompt text and its video path)."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id=MODEL_ID, simple_class_path="infinipotv.lmms.plugin.InfiniPotV")
