"""The transformers Cache the model sees: one :class:`StoreLayer` per decoder layer, delegating to a KV store.

Tokens prefilled while the cache is *committing* (system prefix, video chunks) go into the stores. Tokens prefilled
inside :meth:`StreamCache.transient` (a question and its answer) go into a full-precision tail that is dropped when
the block ends: the video memory that the next question or the next frames see cannot depend on what was asked.
Inside :meth:`StreamCache.after_attention`, a function runs on each layer as soon as the forward is done with it
(the session's compression pass, without reading the stores a second time).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from infinipotv.kv.store import KVStore


def joined(stored: torch.Tensor, tail: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``stored`` then ``tail`` along the tokens, in ``dtype``: one copy, converting ``stored`` on the way (a
    conversion then a concatenation would copy the whole cache twice at every decode step).

    Not cached across decode steps on purpose: a view kept for the whole answer would hold a full-precision copy
    of every layer at once, the memory the compressed (and KIVI) cache exists to save; made per layer, only one
    layer's copy is alive at a time."""
    out = torch.empty(
        stored.shape[0], stored.shape[1] + tail.shape[1], stored.shape[2], dtype=dtype, device=tail.device
    )
    out[:, : stored.shape[1]].copy_(stored)
    out[:, stored.shape[1] :].copy_(tail)
    return out


class StoreLayer(CacheLayerMixin):
    """One layer: committed tokens in a store, plus an optional transient full-precision tail."""

    is_sliding = False
    is_croppable = False

    def __init__(self, store: KVStore) -> None:
        super().__init__()
        self.store = store
        self.token_ids: torch.Tensor | None = None  # ids of the tokens the next committing forward adds
        self.transient = False
        self.tail: tuple[torch.Tensor, torch.Tensor] | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device, self.dtype = key_states.device, key_states.dtype
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        k, v = key_states[0], value_states[0]  # batch size 1: [H, N, D]
        if self.transient:
            self.tail = (
                (k, v) if self.tail is None else (torch.cat([self.tail[0], k], 1), torch.cat([self.tail[1], v], 1))
            )
        else:
            if self.token_ids is None or self.token_ids.numel() != k.shape[1]:
                raise RuntimeError(
                    "StreamCache: token ids for the committed tokens were not set (use cache.commit(ids))"
                )
            self.store.append(k, v, self.token_ids)
        keys, values = self.store.read() if len(self.store) else (k[:, :0], v[:, :0])
        if self.tail is not None:
            keys, values = joined(keys, self.tail[0], self.dtype), joined(values, self.tail[1], self.dtype)
        return keys.unsqueeze(0).to(self.dtype), values.unsqueeze(0).to(self.dtype)

    def get_seq_length(self) -> int:
        return len(self.store) + (0 if self.tail is None else self.tail[0].shape[1])

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1


class StreamCache(Cache):
    """A Cache over per-layer stores, with a transient mode for questions and answers."""

    def __init__(self, n_layers: int, make_store: Callable[[], KVStore]) -> None:
        super().__init__(layers=[StoreLayer(make_store()) for _ in range(n_layers)])
        self._after: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None
        # inside after_attention: the layer updated last, with the keys and values its attention read
        self._held: tuple[int, torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self._after is None:
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)
        last = self._last_layer()
        if layer_idx != (0 if last is None else last + 1):
            raise RuntimeError(
                f"after_attention: layer {layer_idx} updated after layer {last} (one "
                "committing forward per block, its layers in order)"
            )
        self._release()
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        self._held = layer_idx, keys[0], values[0]
        return keys, values

    def _last_layer(self) -> int | None:
        return None if self._held is None else self._held[0]

    def _release(self) -> None:
        """Hand the layer updated last (attention is done with it) to the block's function; drop its tensors."""
        if self._held is not None:
            held, self._held = self._held, None
            self._after(*held)

    @contextmanager
    def after_attention(self, fn: Callable[[int, torch.Tensor, torch.Tensor], None]) -> Iterator[None]:
        """Run ``fn(layer, keys, values)`` on every layer of the one committing forward made inside the block, with
        the keys and values that layer's attention read (``[H, T, D]``, the store's content in the model's dtype),
        once the forward is done with the layer: when the next layer updates, and for the last layer when the block
        ends.

        A forward never reads a layer again after its attention, so a store that ``fn`` compresses is exactly what
        a pass over every layer after the forward would leave (the spec's order), without dequantizing the stores
        a second time; and only one layer's keys and values are alive at a time."""
        if self._after is not None:
            raise RuntimeError("after_attention blocks do not nest")
        self._after = fn
        try:
            yield
            if self._last_layer() != len(self.layers) - 1:
                raise RuntimeError(
                    f"after_attention: the forward stopped after layer {self._last_layer()} of "
                    f"{len(self.layers)} (one committing forward must run every layer)"
                )
            self._release()
        finally:
            self._after, self._held = None, None

    @property
    def stores(self) -> list[KVStore]:
        return [layer.store for layer in self.layers]

    def commit(self, token_ids: torch.Tensor) -> None:
        """Declare the stream ids of the tokens the next forward adds to the stores (-1 for text)."""
        for layer in self.layers:
            layer.token_ids = token_ids

    @contextmanager
    def transient(self) -> Iterator[None]:
        """Everything prefilled or generated inside the block is dropped when it ends."""
        for layer in self.layers:
            layer.transient = True
        try:
            yield
        finally:
            for layer in self.layers:
                layer.transient, layer.tail = False, None

    def committed_length(self) -> int:
        return len(self.layers[0].store)

    def nbytes_by_layer(self) -> list[dict[str, int]]:
        """Bytes each layer's store occupies, by part (one pass over the stores for both sums below)."""
        return [store.nbytes() for store in self.stores]

    def nbytes(self, by_layer: list[dict[str, int]] | None = None) -> dict[str, int]:
        """Bytes the stores' tensors occupy, by part, summed over layers (the transient tail is not memory)."""
        total: dict[str, int] = {}
        for parts in by_layer if by_layer is not None else self.nbytes_by_layer():
            for part, n in parts.items():
                total[part] = total.get(part, 0) + n
        return total

    def layer_nbytes(self, by_layer: list[dict[str, int]] | None = None) -> list[int]:
        return [sum(parts.values()) for parts in (by_layer if by_layer is not None else self.nbytes_by_layer())]
