"""Every policy's parameters, registered by name, with no tensor code: what composing and checking a config reads
(the ``compress=`` choices are generated from these dataclasses). Each module holds the parameters of the tensor
module of the same name one folder up."""

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
    PolicyParams,
    build,
    compressed_size,
    implementation,
    pinned_params,
    policy_params,
    register,
    resolve_params,
)
from .tar_van import FRAME_VIEWS, POOLINGS

__all__ = [
    "FRAME_VIEWS",
    "POLICIES",
    "POOLINGS",
    "PRESETS",
    "PolicyParams",
    "build",
    "compressed_size",
    "implementation",
    "pinned_params",
    "policy_params",
    "register",
    "resolve_params",
]
