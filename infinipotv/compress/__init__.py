"""Compression policies: which vision tokens each KV head keeps when the video memory reaches its budget.

    policy = build("tar_van_pool", alpha=0.5, r_ratio=0.125, pooling="layer_quartile")
    kept = policy(keys, values, layout, n_keep, layer, n_layers)  # LongTensor [H, n_keep], ascending per head

A policy scores tokens (higher = keep) or picks them; top-|C| selection, sorting and checks are shared
(:mod:`.base`). Policies: full, uniform_frames, uniform_tokens, swa, random, knorm, tar, van, van_pool, tar_van,
tar_van_pool (InfiniPot-V), tar_reversed, van_reversed, tar_frame; the field's streaming methods rekv, livevlm,
streammem, streamingvlm, streamingtom, streamkv, weavetime, mukv (each driven by its own streaming method,
:mod:`infinipotv.stream`).
"""

from . import (  # noqa: F401  (registers the policies)
    baselines,
    frames,
    livevlm,
    mukv,
    rekv,
    streamingtom,
    streamingvlm,
    streamkv,
    streammem,
    tar_van,
    weavetime,
)
from .base import (
    POLICIES,
    PRESETS,
    Policy,
    build,
    compressed_size,
    pinned_params,
    policy_params,
    register,
    resolve_params,
)
from .layout import FRAME_VIEWS, FrameLayout
from .pooling import POOLINGS

__all__ = [
    "FRAME_VIEWS",
    "POLICIES",
    "POOLINGS",
    "PRESETS",
    "FrameLayout",
    "Policy",
    "build",
    "compressed_size",
    "pinned_params",
    "policy_params",
    "register",
    "resolve_params",
]
