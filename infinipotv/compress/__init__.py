"""Compression policies: which vision tokens each KV head keeps when the video memory reaches its budget.

    policy = build("tar_van_pool", alpha=0.5, r_ratio=0.125, pooling="layer_quartile")
    kept = policy(keys, values, layout, n_keep, layer, n_layers)  # LongTensor [H, n_keep], ascending per head

A policy scores tokens (higher = keep) or picks them; top-|C| selection, sorting and checks are shared
(:mod:`.base`). Policies: full, uniform_frames, uniform_tokens, swa, random, knorm, tar, van, van_pool, tar_van,
tar_van_pool (InfiniPot-V), tar_reversed, van_reversed, tar_frame; the field's streaming methods rekv, livevlm,
streammem, streamingvlm, streamingtom, streamkv, weavetime, mukv (each driven by its own streaming method,
:mod:`infinipotv.stream`).

Each policy's parameters are registered without tensor code (:mod:`.params`), and its tensor code is imported when
it is built: importing this package, registering the ``compress=`` choices and checking a config load no torch.
:class:`Policy` and :class:`FrameLayout`, the tensor side's contract, load on first use.
"""

from typing import Any

from .params import (
    FRAME_VIEWS,
    POLICIES,
    POOLINGS,
    PRESETS,
    PolicyParams,
    build,
    compressed_size,
    pinned_params,
    policy_params,
    register,
    resolve_params,
)


def __getattr__(name: str) -> Any:
    """The tensor side's names, imported (with torch) when first asked for."""
    if name == "Policy":
        from .base import Policy

        return Policy
    if name == "FrameLayout":
        from .layout import FrameLayout

        return FrameLayout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FRAME_VIEWS",
    "POLICIES",
    "POOLINGS",
    "PRESETS",
    "FrameLayout",
    "Policy",
    "PolicyParams",
    "build",
    "compressed_size",
    "pinned_params",
    "policy_params",
    "register",
    "resolve_params",
]
