"""The policy contract, the registry, and the selection every policy shares.

A policy is a small frozen dataclass registered under its name. It either scores tokens
(``score(keys, values, layout, layer, n_layers) -> [H, T]``, higher = keep) or, for positional and whole-frame
baselines, picks them (``keep(...) -> [H, n_keep]``). Everything else lives here, once: input checks, fp32
conversion, top-|C| per head, sorting (so each head's tokens stay in time order), output checks.

Parameters a variant fixes (``tar`` is ``tar_van_pool`` with alpha 1 and no pooling) are declared with
:func:`fixed`: they are not constructor arguments, so ``policy_params`` lists only what a user may set and the
config layer cannot silently override a variant's defining value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from typing import Any, Callable, ClassVar, TypeVar

import torch

from infinipotv.registry import Registry

from .layout import FrameLayout

POLICIES: Registry[type["Policy"]] = Registry("compression policy")

# Named bundles of defaults (precedence: :func:`resolve_params`); a preset value is only applied to a policy that
# declares that parameter. Under public_code the "uniform" baseline is uniform_tokens (the paper's
# "Uniform Select" is uniform_frames).
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "public_code": {"r_ratio": 0.25, "pooling": "none"},
}

P = TypeVar("P", bound=type["Policy"])
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # what a ``reads_any_float`` policy may be given


def register(name: str) -> Callable[[P], P]:
    """Class decorator: make the policy buildable as ``build(name)``."""

    def decorate(cls: P) -> P:
        POLICIES.add(name, cls)
        cls.name = name
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


def top_indices(score: torch.Tensor, n_keep: int) -> torch.Tensor:
    """The ``n_keep`` highest-scoring token indices per head, ``[H, n_keep]`` (any order): ``torch.topk``'s (where
    scores tie across the n_keep-th place, it picks among them)."""
    return torch.topk(score, n_keep, dim=1, sorted=False).indices


@dataclass(frozen=True)
class Policy:
    """Base of every compression policy. Subclasses implement :meth:`score` or override :meth:`keep`."""

    name: ClassVar[str] = ""
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

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        """``[H, T]`` scores in fp32, higher = keep."""
        raise NotImplementedError(f"{type(self).__name__} must implement score() or keep()")

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        """``[H, n_keep]`` indices to keep, any order: by default the top ``n_keep`` of :meth:`score`."""
        return top_indices(self.score(keys, values, layout, layer, n_layers), n_keep)

    def __call__(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        """Indices ``[H, n_keep]`` (LongTensor, ascending per head) of the tokens each head keeps."""
        if keys.dim() != 3 or values.shape[:2] != keys.shape[:2]:
            raise ValueError(
                f"keys and values must be [H, T, D] with the same H and T, got {tuple(keys.shape)} and "
                f"{tuple(values.shape)}"
            )
        heads, n_tokens = keys.shape[:2]
        if tuple(layout.token_ids.shape) != (heads, n_tokens):
            raise ValueError(
                f"layout.token_ids is {tuple(layout.token_ids.shape)}, expected [H, T] = {(heads, n_tokens)}"
            )
        if not 1 <= n_keep <= n_tokens:
            raise ValueError(f"n_keep={n_keep} must be in [1, T={n_tokens}]")
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer={layer} must be in [0, n_layers={n_layers})")
        if not self.evicts and n_keep < n_tokens:
            raise ValueError(
                f"policy {self.name!r} never evicts: do not compress with it (n_keep={n_keep} < T={n_tokens})"
            )
        layout = FrameLayout(layout.token_ids.to(keys.device), layout.grid)
        if not (self.reads_any_float and keys.dtype in FLOAT_DTYPES and values.dtype in FLOAT_DTYPES):
            keys, values = keys.float(), values.float()
        kept = self.keep(keys, values, layout, n_keep, layer, n_layers).long()
        if kept.shape != (heads, n_keep):
            raise RuntimeError(
                f"policy {self.name!r} returned indices of shape {tuple(kept.shape)}, expected {(heads, n_keep)}"
            )
        return ascending(kept, n_tokens, self.name)


def check_on_device(ok: torch.Tensor, message: str) -> None:
    """Raise ``message`` unless ``ok`` (a bool tensor) holds, without waiting for the device: on a CPU it raises
    here (RuntimeError), on a GPU the check runs in the stream and a failure stops it at the next synchronisation.
    Reading ``ok`` back (``bool(ok)``) would make every layer of a pass wait for its kernels."""
    torch._assert_async(ok, message)


def ascending(kept: torch.Tensor, n_tokens: int, name: str) -> torch.Tensor:
    """``kept`` (distinct indices in ``[0, n_tokens)``, any order) sorted per head, by marking them in ``[H, T]``
    and reading the marks back in order: a few passes over the region instead of a sort (the same result: distinct
    integers have one ascending order). An index outside the region, or a repeated one (fewer marks than
    indices), is the policy's fault."""
    outside = f"policy {name!r} returned indices outside [0, {n_tokens})"
    repeated = f"policy {name!r} returned a token twice for some head"
    check_on_device(((kept >= 0) & (kept < n_tokens)).all(), outside)
    heads, n_keep = kept.shape
    marks = torch.zeros(heads, n_tokens, dtype=torch.bool, device=kept.device).scatter_(1, kept, True)
    check_on_device((marks.sum(dim=1) == n_keep).all(), repeated)
    slot = torch.where(marks, marks.cumsum(dim=1) - 1, n_keep)  # unmarked tokens go to a spare last column
    positions = torch.arange(n_tokens, device=kept.device).expand(heads, n_tokens)
    return kept.new_empty(heads, n_keep + 1).scatter_(1, slot, positions)[:, :n_keep]


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


def build(name: str, preset: str = "paper", **kwargs: Any) -> Policy:
    """The policy registered as ``name``, with parameters as :func:`resolve_params` sets them."""
    return _policy_class(name)(**resolve_params(name, preset, kwargs))


def _policy_class(name: str) -> type[Policy]:
    if name not in POLICIES:
        raise ValueError(f"unknown compression policy {name!r}; valid: {', '.join(sorted(POLICIES))}")
    return POLICIES[name]
