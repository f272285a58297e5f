"""KIVI codes for tokens that leave the cache: a retrieval method's host store, MuKV's blocks, a retrieved view.

Under ``quant=int2|int4|int8`` every store a method keeps is KIVI-coded with the quantizer of
:mod:`infinipotv.kv.quant` (no second one): values per token over groups of G channels, keys per channel over
groups of tokens, scale and zero in the storage dtype. What differs from :class:`~infinipotv.kv.kivi.KiviStore`
is only how keys are grouped, so that a group fits retrieval:

- **Key groups never straddle a block.** Tokens are coded as they are offloaded, a piece at a time, with the
  method's retrieval block ``B`` (a frame for ReKV, StreamKV and WeaveTime; a MuKV block; LiveVLM's whole piece,
  its pages are cut only at a question): each block's keys are grouped per channel over runs of G tokens from its
  first token, and its last ``B mod G`` tokens (a block is rarely a whole number of groups) are one smaller group
  with its own scale and zero, where KIVI would hold them in its full-precision residual until a group fills. A
  block that is offloaded is complete, so the host keeps no full-precision window: the newest tokens are in the
  cache, whose :class:`~infinipotv.kv.kivi.KiviStore` keeps KIVI's own.
- **So a block is self-contained**: retrieving it copies exactly its codes and its ``ceil(B / G)`` key rows, and
  any set of whole blocks moves (to the accelerator, out of a segment, into a splice) without being quantized
  again. A subset of tokens (LiveVLM's buckets) keeps a key row while any of its tokens survives, as KIVI's
  eviction does.

Byte cost, per token per KV head (D = head_dim, s = 2-byte scale/zero): codes ``2 D b / 8`` and value scale/zero
``2 s D / G`` as KIVI; key scale/zero ``2 s D ceil(B / G) / B`` against KIVI's ``2 s D / G``, plus a 4-byte
group index per token shared by the heads. At D = 128, G = 32, INT4 (KIVI's 160 B): a 200-token frame (Qwen2-VL's
at ~1 frame a second) costs 161.9 B (+1.2%), a 196-token frame 162.3 B (+1.4%), the symbolic model's 12-token frame
(D = 64: KIVI's 80 B) 93.3 B (+16.7%): a group per frame, the price of blocks smaller than a group.

Error against KIVI's own grouping: each element is within half its group's scale of its value, and a group here
holds at most G tokens, so the bound is KIVI's; where B is a multiple of G and offloading starts on a group, the
groups are KIVI's and so are the codes, bit for bit (``tests/kv/test_coded.py`` holds both on planted tensors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import dequantize_grouped, quantize, unpack_codes
from infinipotv.kv.rotary import RotaryStore
from infinipotv.kv.store import KVStore

GROUP_DTYPE = torch.int32  # each token's key row: bookkeeping, counted


@dataclass(frozen=True)
class Coding:
    """KIVI's settings for offloaded tokens: ``bits``, ``group_size`` G (tokens per key group, channels per value
    group), scale/zero and dequantized ``dtype``."""

    bits: int
    group_size: int
    dtype: torch.dtype


@dataclass(frozen=True)
class CodedKeys:
    """Keys ``[H, N, D]`` as codes ``[H, N, D * b / 8]`` (token-major), per-channel scale and zero rows
    ``[H, groups, D]`` and each token's row ``group [N]`` (the same in every head: host tokens are whole tokens).

    The few tensor operations :class:`~infinipotv.kv.host.HostStore` moves tokens with (``index_select``,
    ``narrow``, ``to``, ``nbytes``) keep codes as they are; a selection keeps only the rows its tokens use."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    group: torch.Tensor
    bits: int

    PARTS: ClassVar[tuple[str, ...]] = ("key_codes", "key_scale_zero", "bookkeeping")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.codes.shape[:2], self.codes.shape[2] * 8 // self.bits))

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.codes, self.scale, self.zero, self.group))

    def parts(self) -> dict[str, int]:
        return {
            "key_codes": self.codes.nbytes,
            "key_scale_zero": self.scale.nbytes + self.zero.nbytes,
            "bookkeeping": self.group.nbytes,
        }

    def index_select(self, dim: int, index: torch.Tensor) -> "CodedKeys":
        """The tokens at ``index`` (``dim`` 1, any order), with the key rows they use, renumbered."""
        used, group = torch.unique(self.group.index_select(0, index.to(self.group.device)), return_inverse=True)
        return CodedKeys(
            self.codes.index_select(1, index.to(self.codes.device)),
            self.scale.index_select(1, used.to(self.scale.device)),
            self.zero.index_select(1, used.to(self.zero.device)),
            group.to(GROUP_DTYPE),
            self.bits,
        )

    def narrow(self, dim: int, start: int, length: int) -> "CodedKeys":
        return self.index_select(dim, torch.arange(start, start + length, device=self.group.device))

    def to(self, device: torch.device, non_blocking: bool = False) -> "CodedKeys":
        move = [t.to(device, non_blocking=non_blocking) for t in (self.codes, self.scale, self.zero, self.group)]
        return CodedKeys(*move, self.bits)

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "CodedKeys":
        """Every tensor through ``fn`` (pinning, cloning into tensors of their own)."""
        return CodedKeys(*(fn(t) for t in (self.codes, self.scale, self.zero, self.group)), self.bits)

    def dequantize(self) -> torch.Tensor:
        """``[H, N, D]`` in the scale's dtype: each token's codes times its row's scale, plus its zero."""
        out = unpack_codes(self.codes, self.bits, self.scale.dtype)
        group = self.group.to(self.scale.device, torch.long)
        return out.mul_(self.scale.index_select(1, group)).add_(self.zero.index_select(1, group))

    @staticmethod
    def cat(parts: list["CodedKeys"]) -> "CodedKeys":
        """Runs of tokens one after the other (each keeps its rows)."""
        groups, at = [], 0
        for p in parts:
            groups.append(p.group + at)
            at += p.scale.shape[1]
        return CodedKeys(
            torch.cat([p.codes for p in parts], dim=1),
            torch.cat([p.scale for p in parts], dim=1),
            torch.cat([p.zero for p in parts], dim=1),
            torch.cat(groups).to(GROUP_DTYPE),
            parts[0].bits,
        )


@dataclass(frozen=True)
class CodedValues:
    """Values ``[H, N, D]`` as KIVI stores them: codes per token, scale and zero ``[H, N, D / G]`` per token."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    group_size: int

    PARTS: ClassVar[tuple[str, ...]] = ("value_codes", "value_scale_zero")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.codes.shape[:2], self.codes.shape[2] * 8 // self.bits))

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.codes, self.scale, self.zero))

    def parts(self) -> dict[str, int]:
        return {"value_codes": self.codes.nbytes, "value_scale_zero": self.scale.nbytes + self.zero.nbytes}

    def index_select(self, dim: int, index: torch.Tensor) -> "CodedValues":
        return self.map(lambda t: t.index_select(1, index.to(t.device)))

    def narrow(self, dim: int, start: int, length: int) -> "CodedValues":
        return self.map(lambda t: t.narrow(1, start, length))

    def to(self, device: torch.device, non_blocking: bool = False) -> "CodedValues":
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "CodedValues":
        return CodedValues(fn(self.codes), fn(self.scale), fn(self.zero), self.bits, self.group_size)

    def dequantize(self) -> torch.Tensor:
        return dequantize_grouped(self.codes, self.scale, self.zero, self.bits, self.group_size, "value")

    @staticmethod
    def cat(parts: list["CodedValues"]) -> "CodedValues":
        first = parts[0]
        joined = [torch.cat([getattr(p, name) for p in parts], dim=1) for name in ("codes", "scale", "zero")]
        return CodedValues(*joined, first.bits, first.group_size)


Coded = CodedKeys | CodedValues


def _code_blocks(keys: torch.Tensor, block: int, bits: int, g: int) -> tuple[torch.Tensor, ...]:
    """Codes, scale and zero of ``keys [H, n * block, D]`` cut into ``n`` blocks: per block ``block // g`` groups of
    ``g`` tokens, then one group of the ``block % g`` left (each block's rows in order)."""
    h, t, d = keys.shape
    x = keys.reshape(h, t // block, block, d)
    whole = block // g * g
    pieces = []
    if whole:
        pieces.append(quantize(x[:, :, :whole], bits, g, "key"))
    if block - whole:
        pieces.append(quantize(x[:, :, whole:], bits, block - whole, "key"))
    codes, scale, zero = (torch.cat([getattr(q, name) for q in pieces], dim=2) for name in ("codes", "scale", "zero"))
    return codes.reshape(h, t, -1), scale.reshape(h, -1, d), zero.reshape(h, -1, d)


def code_keys(keys: torch.Tensor, block: int, coding: Coding) -> CodedKeys:
    """``keys [H, N, D]`` coded per channel in groups that never straddle a block of ``block`` tokens (the module
    docstring); a last block shorter than ``block`` (a video's last chunk) is grouped the same way."""
    keys = keys.to(coding.dtype)
    n, g = keys.shape[1], coding.group_size
    whole = n // block * block
    parts = []
    if whole:
        parts.append(_code_blocks(keys[:, :whole], block, coding.bits, g))
    if n - whole:
        parts.append(_code_blocks(keys[:, whole:], n - whole, coding.bits, g))
    codes, scale, zero = (torch.cat(items, dim=1) for items in zip(*parts))
    token = torch.arange(n, device=keys.device)
    per_block = -(-block // g)  # rows of a whole block: a partial last block has fewer, numbered the same way
    group = (token // block) * per_block + (token % block) // g
    return CodedKeys(codes, scale, zero, group.to(GROUP_DTYPE), coding.bits)


def code_values(values: torch.Tensor, coding: Coding) -> CodedValues:
    """``values [H, N, D]`` coded per token, as KIVI codes them."""
    q = quantize(values.to(coding.dtype), coding.bits, coding.group_size, "value")
    return CodedValues(q.codes, q.scale, q.zero, coding.bits, coding.group_size)


def full(part: torch.Tensor | Coded) -> torch.Tensor:
    """A part as attention and the rules read it: dequantized when coded, else as it is."""
    return part if isinstance(part, torch.Tensor) else part.dequantize()


@dataclass(frozen=True)
class CodedRun:
    """A run of a view's tokens held as codes on the accelerator and dequantized as a forward reads it
    (:func:`infinipotv.kv.cache.joined`), as a KIVI store's tokens are: the answer's view holds the codes, never a
    full-precision copy of every layer. Keys moved to new positions (a retrieval method's contiguous positions) are
    rotated after dequantizing, on every read (``rotate(keys, old, new)``, the decoder's RoPE), so they are rounded
    once, as :class:`~infinipotv.kv.rotary.RotaryStore`'s."""

    coded: Coded
    rotate: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    old: torch.Tensor | None = None
    new: torch.Tensor | None = None

    @property
    def shape(self) -> torch.Size:
        return self.coded.shape

    @property
    def nbytes(self) -> int:
        """The codes, their rows and, when the run moves, the positions it is rotated with."""
        moved = 0 if self.rotate is None else self.old.nbytes + self.new.nbytes
        return self.coded.nbytes + moved

    def materialize(self) -> torch.Tensor:
        out = self.coded.dequantize()
        return out if self.rotate is None else self.rotate(out, self.old, self.new)


def coding_of(store: KVStore) -> Coding | None:
    """The KIVI coding of a cache's store (None: full precision): what a method keeps beside its cache (offloaded
    tokens, blocks) is stored as the cache stores its own, ``quant=`` for every store."""
    inner = store.inner if isinstance(store, RotaryStore) else store
    if not isinstance(inner, KiviStore):
        return None
    return Coding(inner.bits, inner.group_size, inner.dtype)
