"""A store whose tokens move without their keys being touched: positions shift, keys are rotated on read.

StreamingVLM's ``pos_mode=shrink`` renumbers its memory after every eviction. Re-rotating the stored keys there
rounds them to the store's dtype at every eviction, and a key that survives many drifts from RoPE at its position
(``python -m bench.svlm_rounding``). Upstream caches keys before RoPE and rotates the whole cache at every forward
(streaming_vlm/inference/qwen2_5/language_forward.py L193-200). :class:`RotaryStore` does the same with the keys the
forward gives a store (after RoPE at the positions they were prefilled at): it keeps them as they came and, per
token, the shift from that position to the token's position now; an eviction only adds to the shifts, and
:meth:`RotaryStore.read` rotates every key by its shift in fp32 and rounds once to the store's dtype. So a key read
back carries the forward's rounding and one more, however many evictions it survived.

The rotation is injected (``adapter.rerotate``: RoPE is the model's), so this module depends on nothing above
``kv/``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from infinipotv.kv.accounting import Layout, Storage
from infinipotv.kv.store import POSITION_DTYPE, KVStore

#: ``rotate(keys [H, N, D], old [R, N], new [R, N])``: keys cached after RoPE at ``old`` as RoPE at ``new`` makes
#: them, computed in fp32 and returned in the keys' dtype (:meth:`~infinipotv.models.base.ModelAdapter.rerotate`).
Rotate = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class RotaryStore(KVStore):
    """``inner``'s tokens, each with its shift ``[R]`` (int32: R = 3 for M-RoPE, 1 for plain RoPE) from the position
    its stored key was rotated at to its position now. One set of tokens for every head (a shift is per token, as
    upstream's positions are), so :meth:`keep` takes the same indices in every head.

    Wraps a store that already holds tokens (the system prefix): they, and every token appended, start with a
    shift of 0 (the forward rotated them where they are)."""

    def __init__(self, inner: KVStore, rotate: Rotate, rows: int) -> None:
        self.inner = inner
        self.rotate = rotate
        device = inner.token_ids().device if len(inner) else None
        self._shift = torch.zeros(rows, len(inner), dtype=POSITION_DTYPE, device=device)
        self._moved = False  # any shift not 0: read() rotates (else it gives the stored tensors themselves)

    def _grow(self, device: torch.device) -> None:
        """Shifts of 0 for the tokens ``inner`` holds past the known ones (those just appended)."""
        new = torch.zeros(self._shift.shape[0], len(self.inner) - self._shift.shape[1], dtype=POSITION_DTYPE)
        self._shift = torch.cat([self._shift.to(device), new.to(device)], dim=1)

    def append(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> None:
        """``keys`` after RoPE where the tokens sit now (a forward's own), so with a shift of 0."""
        self.inner.append(keys, values, token_ids)
        self._grow(keys.device)

    def commit(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """As :meth:`KVStore.commit`: the stored tokens as :meth:`read` gives them, then the forward's own; with no
        shift yet, ``inner``'s own commit (no copy of the cache)."""
        if self._moved:
            return super().commit(keys, values, token_ids)
        out = self.inner.commit(keys, values, token_ids)
        self._grow(keys.device)
        return out

    def keep(self, indices: torch.Tensor) -> None:
        if indices.shape[0] > 1 and not torch.equal(indices, indices[:1].expand_as(indices)):
            raise ValueError(
                "RotaryStore keeps one set of tokens in every head (a shift is per token): got per-head sets"
            )
        self.inner.keep(indices)
        self._shift = self._shift[:, indices[0].to(self._shift.device)]
        self._moved = bool(self._shift.any())

    def move(self, by: torch.Tensor) -> None:
        """Every token moves by ``by [R, T]`` positions (the tokens in store order): the shifts add up, the keys are
        not touched."""
        if by.shape != self._shift.shape:
            raise ValueError(f"move by {tuple(by.shape)} for a store of shifts {tuple(self._shift.shape)}")
        self._shift = self._shift + by.to(device=self._shift.device, dtype=POSITION_DTYPE)
        self._moved = bool(self._shift.any())

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys rotated by their shifts (fp32 arithmetic, one rounding to the store's dtype; a shift of 0 leaves a
        key as stored), values as stored. A new tensor per call once any token moved: made per layer as a forward
        reads it, never held for the whole model (as KIVI's dequantized read)."""
        keys, values = self.inner.read()
        if not self._moved:
            return keys, values
        return self.rotate(keys, torch.zeros_like(self._shift), self._shift), values

    def read_from(self, start: int, by: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the tokens from ``start`` on, as :meth:`read` would give them had they moved by
        ``by [R, n]`` more; the store unchanged. A transient view of a pruned memory (StreamingVLM's question that
        brings frames): only those keys are rotated, and rounded once, as every read."""
        keys, values = self.inner.read()
        shift = self._shift[:, start:] + by.to(device=self._shift.device, dtype=POSITION_DTYPE)
        return self.rotate(keys[:, start:], torch.zeros_like(shift), shift), values[:, start:]

    def token_ids(self) -> torch.Tensor:
        return self.inner.token_ids()

    def nbytes(self) -> dict[str, int]:
        """``inner``'s parts, the shifts counted in ``positions`` beside the stream ids."""
        parts = dict(self.inner.nbytes())
        parts["positions"] = parts.get("positions", 0) + self._shift.nbytes
        return parts

    def layout(self) -> Layout:
        return self.inner.layout()

    def storage(self) -> Storage:
        """``inner``'s widths, with the shifts in ``position_bytes``: R int32 per token shared by the heads, so
        ``4 R / heads`` more per token per head (fractional when the heads do not divide it)."""
        storage = self.inner.storage()
        heads = self.inner.layout().heads
        if not heads:
            return storage
        extra = self._shift.shape[0] * POSITION_DTYPE.itemsize / heads
        return replace(storage, position_bytes=storage.position_bytes + extra)

    def __len__(self) -> int:
        return len(self.inner)
