"""Byte accounting of the kept KV cache: the analytic figure per token, budgets in bytes, and measured totals.

Analytic bytes per token per KV head (D = head_dim, G = group_size, s = scale/zero width in bytes):

- full precision (fp16/bf16, ``bits=16``): keys + values ``2 * D * 2``; fp32 (``bits=32``): ``2 * D * 4``.
- INT-b KIVI, full groups: codes ``2 * D * b / 8``; value scale+zero ``(D / G) * 2 * s`` (one pair per token per
  G channels); key scale+zero ``D * 2 * s / G`` (one row per channel per group of G tokens, amortised).

At D = 128, G = 32, s = 2: INT4 = 64 + 64 + 16 + 16 = 160 B, INT2 = 96 B, FP16 = 512 B, plus ``position_bytes``
(4 for one stored int32 id per token per head: 164 B and 100 B). The figure rests on 2-byte scale/zero, full key groups
(after eviction a group with n survivors costs ``D * 2 * s / n`` per survivor) and a residual window counted apart.
:func:`cache_bytes` and :func:`tokens_for_bytes` count that window at full precision; the measured side
(:func:`sum_parts` over ``store.nbytes()``) counts everything the tensors really occupy.

Every figure here multiplies the same per-part :class:`Rates` by counts (a :class:`Layout`): :func:`layout_bytes`
applies them to the counts a store really holds (``store.layout()``: thinned key groups, the window as it is), so
that the measured bytes minus the store's padding equal it part for part; :func:`cache_bytes` is the special case
of full key groups and the largest window, the published figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

import torch

from infinipotv.kv.quant import BITS

FULL_PRECISION_BITS = (16, 32)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


class StorageSettings(Protocol):
    """What the storage layer reads of a storage choice (the ``quant=`` config has these fields): the layer below
    the config names the interface, so it depends on nothing above it."""

    bits: int  # 16 = full precision; 2/4/8 = KIVI
    dtype: str  # auto | float16 | bfloat16 | float32
    group_size: int
    residual_length: int


@dataclass(frozen=True)
class Storage:
    """How one token of one KV head is stored.

    ``bits``: 16/32 = full precision, 2/4/8 = KIVI codes. ``scale_bytes``: width of one KIVI scale or zero (and of the
    residual window's elements); 2 for fp16/bf16. ``position_bytes``: the stored stream id per token per head
    (4 = int32, 0 to leave it out). ``group_count_bytes``: the store's survivors-per-key-group counter (2 in
    :class:`~infinipotv.kv.kivi.KiviStore`) and ``length_bytes``: its quantized-token count per head (8), both 0 by
    default because the published figure leaves them out (``store.storage()`` gives a store's own widths).
    """

    bits: int = 16
    group_size: int = 32
    residual_length: int = 128
    scale_bytes: int = 2
    position_bytes: int = 4
    group_count_bytes: int = 0
    length_bytes: int = 0

    def __post_init__(self) -> None:
        if self.bits not in BITS + FULL_PRECISION_BITS:
            raise ValueError(f"bits={self.bits}: use 16 (fp16/bf16), 32 (fp32) or KIVI's {BITS}")
        if self.group_size <= 0 or self.residual_length < 0:
            raise ValueError(
                f"group_size={self.group_size} must be > 0 and residual_length={self.residual_length} >= 0"
            )

    @property
    def quantized(self) -> bool:
        return self.bits in BITS

    @property
    def window(self) -> int:
        """Most tokens a head holds at full precision: KIVI's window never reaches R + G."""
        return self.residual_length + self.group_size - 1 if self.quantized else 0

    @classmethod
    def from_config(cls, quant: StorageSettings, model_dtype: torch.dtype, position_bytes: int = 4) -> "Storage":
        """From a storage choice (``bits``, ``dtype``, ``group_size``, ``residual_length``), the dtype resolved by
        :func:`storage_dtype`. Full precision stores keys/values at that dtype's width."""
        width = torch.empty(0, dtype=storage_dtype(quant, model_dtype)).element_size()
        bits = 8 * width if quant.bits in FULL_PRECISION_BITS else quant.bits
        return cls(bits, quant.group_size, quant.residual_length, width, position_bytes)


def storage_dtype(quant: StorageSettings, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype of the stored full-precision parts (keys/values; KIVI's scale/zero and residual window).

    ``quant.dtype: auto`` is the model's dtype, except that KIVI keeps 16-bit scale/zero and window when the model
    runs in float32 (CPU runs): the 2-byte scale/zero of the byte figures, and an equal-bytes comparison with
    ``quant=fp16`` that does not pay twice for INT4's window."""
    if quant.dtype != "auto":
        if quant.dtype not in DTYPES:
            raise ValueError(f"quant.dtype={quant.dtype!r}: use auto or one of {sorted(DTYPES)}")
        return DTYPES[quant.dtype]
    if quant.bits in BITS and model_dtype == torch.float32:
        return torch.float16
    return model_dtype


@dataclass(frozen=True)
class Rates:
    """Analytic bytes of each thing a store holds, per KV head: the one source every figure here multiplies.

    ``codes`` and ``value_scale_zero``: per token outside the full-precision window (under full precision ``codes``
    is the keys and values themselves); ``key_scale_zero`` and ``group_count``: per live key group (one row of D
    scales and D zeros, one survivor count); ``residual``: per token in KIVI's window (keys + values at the
    scale/zero width); ``position``: per token; ``length``: per head.
    """

    codes: float
    value_scale_zero: float
    key_scale_zero: float
    group_count: float
    residual: float
    position: float
    length: float


def rates(head_dim: int, storage: Storage) -> Rates:
    """The per-part rates of ``storage`` at ``head_dim`` (see the module docstring)."""
    d, s = head_dim, storage.scale_bytes
    if not storage.quantized:
        return Rates(2 * d * storage.bits / 8, 0.0, 0.0, 0.0, 2 * d * s, storage.position_bytes, storage.length_bytes)
    if d % storage.group_size:
        raise ValueError(
            f"head_dim={d} must be a multiple of group_size={storage.group_size} (values are grouped over channels)"
        )
    return Rates(
        codes=2 * d * storage.bits / 8,
        value_scale_zero=d / storage.group_size * 2 * s,
        key_scale_zero=d * 2 * s,
        group_count=storage.group_count_bytes,
        residual=2 * d * s,
        position=storage.position_bytes,
        length=storage.length_bytes,
    )


@dataclass(frozen=True)
class TokenBytes:
    """Analytic bytes per token per KV head, by part (full precision puts everything in ``codes``)."""

    codes: float
    value_scale_zero: float
    key_scale_zero: float
    positions: float
    key_groups: float

    @property
    def total(self) -> float:
        return self.codes + self.value_scale_zero + self.key_scale_zero + self.positions + self.key_groups


def bytes_per_token(head_dim: int, storage: Storage) -> TokenBytes:
    """Bytes per token per KV head under ``storage`` with full key groups: a group's rates shared by its G tokens."""
    r, g = rates(head_dim, storage), storage.group_size
    return TokenBytes(r.codes, r.value_scale_zero, r.key_scale_zero / g, r.position, r.group_count / g)


def full_precision_bytes_per_token(head_dim: int, storage: Storage) -> float:
    """A residual-window token: keys + values at the scale/zero width (the activation dtype), plus its position."""
    r = rates(head_dim, storage)
    return r.residual + r.position


@dataclass(frozen=True)
class Layout:
    """What a cache holds, counted over its heads (and layers): the counts that :func:`layout_bytes` multiplies.

    ``tokens``: tokens held (each with a position); ``residual``: those of them in KIVI's full-precision window (the
    rest are codes; 0 under full precision, where every token is stored as it is); ``key_groups``: live key groups;
    ``heads``: KV heads (per-head bookkeeping). :func:`full_groups` gives the counts the published figure assumes
    (fractional groups there: a group's rows amortised over its G tokens); a store's ``layout()``, the ones it holds.
    """

    tokens: float
    residual: float = 0
    key_groups: float = 0
    heads: int = 0

    def __add__(self, other: "Layout") -> "Layout":
        """Two stores' (layers') counts together."""
        return Layout(
            self.tokens + other.tokens,
            self.residual + other.residual,
            self.key_groups + other.key_groups,
            self.heads + other.heads,
        )


def full_groups(tokens: int, heads: int, storage: Storage) -> Layout:
    """The layout the published figure assumes for ``tokens`` per head in ``heads`` heads: KIVI's window at its
    largest (``min(tokens, R + G - 1)``) and every other token in a full key group."""
    fp = min(tokens, storage.window)
    groups = heads * (tokens - fp) / storage.group_size if storage.quantized else 0
    return Layout(heads * tokens, heads * fp, groups, heads)


def layout_bytes(layout: Layout, head_dim: int, storage: Storage) -> dict[str, float]:
    """Analytic bytes of ``layout`` by part, named as the store's ``nbytes()`` names them (less its ``padding``):
    :class:`~infinipotv.kv.kivi.KiviStore` under KIVI, :class:`~infinipotv.kv.store.FullPrecisionStore` otherwise.

    This is the spec's accounting applied to the counts a cache really holds: with a store's ``layout()`` and
    ``storage()`` it equals what the store's tensors occupy, padding excepted, so the two can only differ by waste."""
    r = rates(head_dim, storage)
    stored = layout.tokens - layout.residual  # codes under KIVI; keys and values as they are under full precision
    positions = layout.tokens * r.position
    if not storage.quantized:
        return {"keys": stored * r.codes / 2, "values": stored * r.codes / 2, "positions": positions}
    return {
        "key_codes": stored * r.codes / 2,
        "value_codes": stored * r.codes / 2,
        "key_scale_zero": layout.key_groups * r.key_scale_zero,
        "value_scale_zero": stored * r.value_scale_zero,
        "bookkeeping": layout.key_groups * r.group_count + layout.heads * r.length,
        "residual": layout.residual * r.residual,
        "positions": positions,
    }


def cache_bytes(tokens: int, n_layers: int, n_kv_heads: int, head_dim: int, storage: Storage) -> float:
    """Analytic bytes of a whole-model cache holding ``tokens`` per head per layer: :func:`layout_bytes` of
    :func:`full_groups` (under KIVI the newest ``min(tokens, R + G - 1)`` tokens at full precision, the rest at the
    full-group rate of :func:`bytes_per_token`)."""
    return sum(layout_bytes(full_groups(tokens, n_layers * n_kv_heads, storage), head_dim, storage).values())


def tokens_for_bytes(budget_bytes: float, n_layers: int, n_kv_heads: int, head_dim: int, storage: Storage) -> int:
    """|M|: the most tokens per head per layer whose :func:`cache_bytes` fits ``budget_bytes`` for the whole model.

    Included: codes, scales/zeros, positions (``storage.position_bytes``) and, for KIVI, a full-precision window of
    R + G - 1 tokens (its worst case). Not included: key groups left partial by eviction, padding between heads
    (both measured by the store's ``nbytes()``) and the transient question/answer tail.
    """
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes={budget_bytes} must be positive")
    heads = n_layers * n_kv_heads
    budget_bytes -= heads * rates(head_dim, storage).length
    fp_rate = full_precision_bytes_per_token(head_dim, storage)
    rate = bytes_per_token(head_dim, storage).total
    window = storage.window
    if budget_bytes <= heads * window * fp_rate:
        return int(budget_bytes // (heads * fp_rate))
    return window + math.floor((budget_bytes - heads * window * fp_rate) / (heads * rate))


def sum_parts(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Measured bytes by part summed over stores (e.g. ``store.nbytes()`` of every layer); ``total`` added."""
    out: dict[str, int] = {}
    for p in parts:
        for name, n in p.items():
            out[name] = out.get(name, 0) + n
    out["total"] = sum(out.values())
    return out
