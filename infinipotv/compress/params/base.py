"""The policy's parameters, the registry, and the rules every policy's parameters follow; no tensor code.

A policy is registered as its parameters: a small frozen dataclass (:class:`PolicyParams`) whose fields are its
knobs and whose checks need no tensor. Its tensor code is a subclass of it and of
:class:`infinipotv.compress.base.Policy`, named by ``register(name, code)`` and imported when a policy is built
(:func:`build`): composing and checking a config reads the parameters alone, so a refused knob is refused before
torch loads. A policy registered whole (``code`` None, a Policy subclass) works the same, its module loaded with the
registry.

Parameters a variant fixes (``tar`` is ``tar_van_pool`` with alpha 1 and no pooling) are declared with
:func:`fixed`: they are not constructor arguments, so ``policy_params`` lists only what a user may set and the
config layer cannot silently override a variant's defining value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from importlib import import_module
from typing import Any, Callable, ClassVar, TypeVar

from infinipotv.registry import Registry

POLICIES: Registry[type["PolicyParams"]] = Registry("compression policy")

# Named bundles of defaults (precedence: :func:`resolve_params`); a preset value is only applied to a policy that
# declares that parameter. Under public_code the "uniform" baseline is uniform_tokens (the paper's
# "Uniform Select" is uniform_frames).
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "public_code": {"r_ratio": 0.25, "pooling": "none"},
}

P = TypeVar("P", bound=type["PolicyParams"])


def register(name: str, code: str | None = None) -> Callable[[P], P]:
    """Class decorator: make the policy buildable as ``build(name)``. ``code``: its tensor code as
    ``"module:Class"``, imported when the policy is built; None: the class registered is the whole policy."""

    def decorate(cls: P) -> P:
        POLICIES.add(name, cls)
        cls.name = name
        cls.code = code
        return cls

    return decorate


def fixed(value: Any) -> Any:
    """A field a registered variant pins: not a constructor argument, not listed by :func:`policy_params`."""
    return field(default=value, init=False)


def plain(value: Any) -> Any:
    """Config values arrive as str-Enums or OmegaConf lists: store plain Python values."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(plain(v) for v in value)
    return value


#: The text a retrieval forward reads (a retrieving policy's ``query`` knob; :class:`infinipotv.stream.method.Asked`):
#: the question's own text (no options, template or answer cue), or the answer's whole prompt.
QUERIES = ("question", "prompt")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is unknown; use one of {', '.join(choices)}")


def check_range(name: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    if not ((low < value if low_open else low <= value) and value <= high):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name}={value} must be in {bracket}{low}, {high}]")


def compressed_size(budget: int, c_ratio: float) -> int:
    """|C| = round(c_ratio * |M|): the tokens per head a compression pass keeps."""
    if budget < 2:
        raise ValueError(f"budget={budget} must be >= 2 vision tokens (e.g. budget=6000)")
    if not 0 < c_ratio < 1:
        raise ValueError(f"c_ratio={c_ratio} must be in (0, 1), e.g. c_ratio=0.75")
    n_keep = round(c_ratio * budget)
    if not 1 <= n_keep < budget:
        raise ValueError(f"c_ratio={c_ratio} with budget={budget} keeps {n_keep} tokens; choose c_ratio in (0, 1)")
    return n_keep


@dataclass(frozen=True)
class PolicyParams:
    """Base of every policy's parameters: what the session and the config layer read of a policy before any tensor
    (its class constants, its knobs and their checks)."""

    name: ClassVar[str] = ""
    code: ClassVar[str | None] = None  # its tensor code, "module:Class" (register); None: the class itself
    evicts: ClassVar[bool] = True  # False only for ``full``: the session never compresses with it
    # The streaming method that drives the policy (infinipotv.stream.method): "compression" = a pass keeps the top
    # |C| when the video part reaches |M| and questions read the whole memory; "retrieval" = compress.retrieval.
    streaming: ClassVar[str] = "compression"
    # Under "compression": True = a pass after every chunk past |M|, back to |M| (Schedule.per_chunk, H7).
    every_chunk: ClassVar[bool] = False
    # True: keys/values reach keep()/score() in the store's dtype and the policy computes in fp32 itself (without
    # an fp32 copy of a half-precision cache); False: they are converted to fp32 first.
    reads_any_float: ClassVar[bool] = False
    # True: every head keeps the same tokens (a positional or whole-frame rule, whole tokens retrieved); False: each
    # head chooses its own, which the parametrized policy contract checks on a fresh region.
    head_shared: ClassVar[bool] = False
    # |C| / |M| when compress.c_ratio is not given: the method's own split scaled to |M| (InfiniPot-V's 0.75,
    # paper Sec. 4); a method whose upstream splits its memory otherwise declares its proportion and its source.
    # A method that holds |M| whole (StreamingVLM, StreamMem, StreamingTOM) never reads it.
    default_c_ratio: ClassVar[float] = 0.75

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))

    def validate(self, n_keep: int, tokens_per_frame: int, n_tokens: int) -> None:
        """Fail at startup on a combination that cannot work. ``n_tokens``: the most tokens the region holds when
        a pass runs (|M| plus one chunk); frame-based rules are checked there, where r is largest."""
        if tokens_per_frame < 1:
            raise ValueError(f"tokens_per_frame={tokens_per_frame} must be >= 1")
        if not 1 <= n_keep <= n_tokens:
            raise ValueError(f"n_keep={n_keep} must be in [1, {n_tokens}] (the tokens in the region)")

    def check_chunk(self, chunk_frames: int, frames_per_step: int) -> None:
        """Fail at startup on a chunk the policy cannot stream: ``chunk_frames`` raw frames (``eval.chunk_frames``),
        ``frames_per_step`` raw frames to a model frame (Qwen2.5-VL merges 2). Default: any."""

    def check_storage(self, quantized: bool, contiguous_positions: bool) -> None:
        """Fail at startup on a storage the policy cannot stream on: ``quantized`` (KIVI codes: ``quant.bits`` < 16),
        on a model whose keys may move to new positions (``contiguous_positions``: 1-D RoPE). Default: any."""

    def check_stream(self, chunk_frames: int, tokens_per_frame: int, budget: int, n_keep: int) -> None:
        """Fail at startup on a stream the policy cannot cut: chunks of ``chunk_frames`` model frames of up to
        ``tokens_per_frame`` tokens under |M| = ``budget`` and |C| = ``n_keep`` (a method's blocks). Default: any."""


def policy_params(name: str) -> dict[str, Any]:
    """The parameters ``name`` declares, with their defaults (what the config layer may pass to :func:`build`)."""
    cls = _policy_class(name)
    params = {}
    for f in fields(cls):
        if f.init:
            params[f.name] = f.default if f.default is not MISSING else f.default_factory()
    return params


def pinned_params(name: str) -> dict[str, Any]:
    """The parameters a registered variant pins (``tar`` pins alpha = 1): named when a config tries to set them."""
    return {f.name: f.default for f in fields(_policy_class(name)) if not f.init}


def resolve_params(name: str, preset: str = "paper", given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every parameter of ``name``, by the one precedence rule of the harness: a value given (not None) wins, then
    the preset's value for a parameter the policy declares, then the policy's own default.

    The config layer and :func:`build` both go through here, so ``compress.preset=public_code compress.r_ratio=0.2``
    runs 0.2 whichever way the policy is made, and the run records the values that ran."""
    params = policy_params(name)
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r} is unknown; use one of {', '.join(PRESETS)}")
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(given) - set(params))
    if unknown:
        pins = pinned_params(name)
        pinned = [f"{k}={pins[k]!r}" for k in unknown if k in pins]
        valid = ", ".join(params) or "none"
        raise TypeError(
            f"compression policy {name!r} has no parameter {', '.join(unknown)}"
            f"{' (it pins ' + ', '.join(pinned) + ')' if pinned else ''}; its parameters: {valid}"
        )
    params.update({k: v for k, v in PRESETS[preset].items() if k in params})
    params.update(given)
    return params


def build(name: str, preset: str = "paper", **kwargs: Any) -> Any:
    """The policy registered as ``name`` (its tensor code, imported now), with parameters as :func:`resolve_params`
    sets them: an :class:`infinipotv.compress.base.Policy`."""
    return implementation(name)(**resolve_params(name, preset, kwargs))


def implementation(name: str) -> type[PolicyParams]:
    """The class that runs ``name``: its registered ``code``, or the registered class itself."""
    cls = _policy_class(name)
    if cls.code is None:
        return cls
    module, attr = cls.code.split(":")
    return getattr(import_module(module), attr)


def _policy_class(name: str) -> type[PolicyParams]:
    if name not in POLICIES:
        raise ValueError(f"unknown compression policy {name!r}; valid: {', '.join(sorted(POLICIES))}")
    return POLICIES[name]
