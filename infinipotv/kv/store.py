"""The store contract: one layer's committed tokens (system prefix + video memory), per KV head.

Every head holds the same number of tokens but its own set of them (a policy keeps a different set per head), in
stream order. A store never sees questions or answers: those live in the cache's transient tail (see
:mod:`infinipotv.kv.cache`), so the video memory cannot depend on what was asked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from infinipotv.kv.accounting import Layout, Storage
from infinipotv.kv.ragged import flat_rows, take_rows

POSITION_DTYPE = torch.int32  # one stored id per token per head: the "4 B pos" of the byte accounting
Rows = tuple[torch.Tensor, torch.Tensor]  # keys and values ``[H, N, D]``


class KVStore(ABC):
    """One layer's kept keys/values. Shapes are per head: ``[heads, tokens, head_dim]`` (batch size 1)."""

    @abstractmethod
    def append(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> None:
        """Commit new tokens at the end of every head.

        ``keys``/``values``: ``[H, N, D]`` (keys after RoPE). ``token_ids``: ``[N]`` int, the tokens' ids in the
        stream (vision tokens: their global index in the video, -1 for text), stored per head so that a policy can
        tell where each kept token came from.
        """

    @abstractmethod
    def keep(self, indices: torch.Tensor) -> None:
        """Keep only ``indices`` (``[H, n]``, sorted ascending, into the current token order) in each head."""

    @abstractmethod
    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[H, T, D]`` in the store's dtype, as attention and the policies read them: the stored
        tensors themselves where the store keeps them as they are, else built from what it keeps (KIVI dequantizes
        its codes)."""

    def commit(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> Rows:
        """Append a committing forward's tokens (``append``'s arguments) and return what that forward attends,
        ``[H, T + N, D]`` in the store's dtype: the tokens stored before it as :meth:`read` gives them, then its own
        as they are, rounded to the store's dtype only (``spec/kivi.md``: KIVI's prefill attends its own keys and
        values unquantized and packs them afterwards). The store holds exactly what :meth:`append` makes of them.
        A store whose :meth:`read` is lossy builds the output in one allocation where it can (KIVI)."""
        if not len(self):
            self.append(keys, values, token_ids)
            dtype = self.read()[0].dtype
            return keys.to(dtype), values.to(dtype)
        stored_k, stored_v = self.read()
        out = (
            torch.cat([stored_k, keys.to(stored_k.dtype)], dim=1),
            torch.cat([stored_v, values.to(stored_v.dtype)], dim=1),
        )
        self.append(keys, values, token_ids)
        return out

    @abstractmethod
    def token_ids(self) -> torch.Tensor:
        """``[H, T]`` stream ids of the kept tokens, per head."""

    @abstractmethod
    def nbytes(self) -> dict[str, int]:
        """Bytes the store's tensors really occupy, by part (e.g. ``keys``, ``values``, ``positions``)."""

    @abstractmethod
    def layout(self) -> Layout:
        """The counts the store holds (tokens, window, live key groups, heads), read on the host: priced at
        :meth:`storage` by :func:`~infinipotv.kv.accounting.layout_bytes`, they give :meth:`nbytes` less its
        padding, so the two differ by nothing but the waste of the store's layout."""

    @abstractmethod
    def storage(self) -> Storage:
        """How this store holds a token (its widths, bookkeeping included), once its dtype is known."""

    @abstractmethod
    def __len__(self) -> int:
        """Tokens per head."""


class FullPrecisionStore(KVStore):
    """Keys and values kept as they are, in the model's dtype (fp16/bf16 on GPU, fp32 in CPU tests)."""

    def __init__(self, dtype: torch.dtype | None = None) -> None:
        self.dtype = dtype
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._ids: torch.Tensor | None = None

    def append(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> None:
        dtype = self.dtype or keys.dtype
        keys, values = keys.to(dtype), values.to(dtype)
        ids = token_ids.to(device=keys.device, dtype=POSITION_DTYPE).expand(keys.shape[0], -1)
        if self._keys is None:
            self._keys, self._values, self._ids = keys.contiguous(), values.contiguous(), ids.contiguous()
        else:
            self._keys = torch.cat([self._keys, keys], dim=1)
            self._values = torch.cat([self._values, values], dim=1)
            self._ids = torch.cat([self._ids, ids], dim=1)

    def keep(self, indices: torch.Tensor) -> None:
        assert self._keys is not None, "keep() on an empty store"
        flat = flat_rows(indices, self._keys.shape[1])  # one row index for keys and values
        self._keys, self._values = take_rows(self._keys, flat), take_rows(self._values, flat)
        self._ids = self._ids.gather(1, indices)

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self._keys is not None and self._values is not None, "read() on an empty store"
        return self._keys, self._values

    def commit(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> Rows:
        """Append, then the stored tensors themselves: what this store reads back is what it was given (in its
        dtype), so the forward's own tokens are at full precision with no copy of the cache."""
        self.append(keys, values, token_ids)
        return self.read()

    def token_ids(self) -> torch.Tensor:
        assert self._ids is not None, "token_ids() on an empty store"
        return self._ids

    def nbytes(self) -> dict[str, int]:
        if self._keys is None:
            return {"keys": 0, "values": 0, "positions": 0}
        return {
            "keys": self._keys.nbytes,
            "values": self._values.nbytes,
            "positions": self._ids.nbytes,
        }

    def layout(self) -> Layout:
        return (
            Layout(0)
            if self._keys is None
            else Layout(self._keys.shape[0] * self._keys.shape[1], heads=self._keys.shape[0])
        )

    def storage(self) -> Storage:
        dtype = self.dtype if self._keys is None else self._keys.dtype
        if dtype is None:
            raise RuntimeError("storage() on a FullPrecisionStore with no dtype yet: pass dtype or append tokens first")
        return Storage(8 * dtype.itemsize, scale_bytes=dtype.itemsize, position_bytes=POSITION_DTYPE.itemsize)

    def __len__(self) -> int:
        return 0 if self._keys is None else self._keys.shape[1]
