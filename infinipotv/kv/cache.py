"""The transformers Cache the model sees: one :class:`StoreLayer` per decoder layer, delegating to a KV store.

Tokens prefilled while the cache is *committing* (system prefix, video chunks) go into the stores; their own forward
attends them as they are and the tokens stored before them as the store reads them
(:meth:`~infinipotv.kv.store.KVStore.commit`: KIVI's prefill attends its own tokens unquantized). Tokens prefilled
inside :meth:`StreamCache.transient` (a question and its answer) go into a full-precision tail that is dropped when
the block ends: the video memory that the next question or the next frames see cannot depend on what was asked.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Protocol

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from infinipotv.kv.store import KVStore


class Run(Protocol):
    """A run of a view's tokens ``[H, N, D]`` made as a forward reads it (KIVI codes dequantized:
    :class:`~infinipotv.kv.coded.CodedRun`), so that the view holds what the run is made from, not its copy."""

    shape: torch.Size

    def materialize(self) -> torch.Tensor: ...


Parts = tuple[torch.Tensor | Run, ...]  # runs of tokens ``[H, N_i, D]`` read one after the other


def joined(stored: torch.Tensor | Parts, tail: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``stored`` (a tensor, or runs of tokens in order) then ``tail`` along the tokens, in ``dtype``: one copy,
    converting on the way (a conversion then a concatenation would copy the whole cache twice at every decode step).
    A :class:`Run` is made here, one at a time, and copied into its place.

    Not cached across decode steps on purpose: a view kept for the whole answer would hold a full-precision copy
    of every layer at once, the memory the compressed (and KIVI) cache exists to save; made per layer, only one
    layer's copy is alive at a time."""
    parts = (*(stored if isinstance(stored, tuple) else (stored,)), tail)
    out = torch.empty(tail.shape[0], sum(p.shape[1] for p in parts), tail.shape[2], dtype=dtype, device=tail.device)
    at = 0
    for part in parts:
        out[:, at : at + part.shape[1]].copy_(part if isinstance(part, torch.Tensor) else part.materialize())
        at += part.shape[1]
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
        # H1: what a transient forward reads before its own tokens instead of the store (a retrieval method's view)
        self.view: tuple[Parts, Parts] | None = None
        # Tokens this layer's view reads fewer than the longest layer's (a view of per-layer lengths): the layer
        # reports the longest length, so one mask fits every layer, and :func:`right_align_mask` cuts it to this
        # layer's.
        self.shortfall = 0

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
            keys, values = self.store.commit(k, v, self.token_ids)
            return keys.unsqueeze(0).to(self.dtype), values.unsqueeze(0).to(self.dtype)
        if self.view is not None:
            keys, values = self.view
        else:
            keys, values = self.store.read() if len(self.store) else (k[:, :0], v[:, :0])
        keys, values = joined(keys, self.tail[0], self.dtype), joined(values, self.tail[1], self.dtype)
        return keys.unsqueeze(0).to(self.dtype), values.unsqueeze(0).to(self.dtype)

    def read_length(self) -> int:
        """Tokens a forward reads before its own: the store's, or the view's."""
        return len(self.store) if self.view is None else sum(p.shape[1] for p in self.view[0])

    def get_seq_length(self) -> int:
        """The longest layer's length (transformers sizes the one mask of a forward, and its cache positions, from
        it): :attr:`shortfall` more than this layer reads."""
        return self.read_length() + self.shortfall + (0 if self.tail is None else self.tail[0].shape[1])

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1


def right_align_mask(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook of a decoder layer's attention module (``layer_idx``): under a view whose layers read
    different lengths, the forward's one mask is sized for the longest layer; this layer's keys are its own tokens
    then the forward's, so only the mask's last columns are its (the causal part is last, whatever the layer's
    length). Neither sdpa nor eager attention slices a mask wider than the keys, and flash attention, given no mask,
    aligns causality to the newest key already. Otherwise (and when applied twice) a no-op."""
    cache, mask = kwargs.get("cache"), kwargs.get("attention_mask")
    if mask is None or not isinstance(cache, StreamCache):
        return None
    layer = cache.layers[module.layer_idx]
    if not layer.shortfall:
        return None
    width = layer.get_seq_length() - layer.shortfall + kwargs["hidden_states"].shape[1]
    if mask.shape[-1] <= width:
        return None
    return args, {**kwargs, "attention_mask": mask[..., -width:]}


class StreamCache(Cache):
    """A Cache over per-layer stores, with a transient mode for questions and answers."""

    def __init__(self, n_layers: int, make_store: Callable[[], KVStore]) -> None:
        super().__init__(layers=[StoreLayer(make_store()) for _ in range(n_layers)])

    @property
    def stores(self) -> list[KVStore]:
        return [layer.store for layer in self.layers]

    def commit(self, token_ids: torch.Tensor) -> None:
        """Declare the stream ids of the tokens the next forward adds to the stores (-1 for text)."""
        for layer in self.layers:
            layer.token_ids = token_ids

    @contextmanager
    def transient(self, view: list[tuple[Parts | torch.Tensor, Parts | torch.Tensor]] | None = None) -> Iterator[None]:
        """Everything prefilled or generated inside the block is dropped when it ends.

        ``view``: per layer, the keys and the values the block's forwards read before their own tokens, instead of
        the store, each as runs ``[H, N_i, D]`` read in order (a retrieval method's [prefix | retrieved | window]:
        runs of the stored tensors are read in place, not copied; a single tensor is one run). The totals may differ
        between layers (StreamKV's layer-adaptive retrieval): each layer then reads its own tokens, right-aligned
        against the longest (:func:`right_align_mask`). The stores are not touched either way."""
        if view is not None and len(view) != len(self.layers):
            raise ValueError(f"a view of {len(view)} layers for a cache of {len(self.layers)}")
        for i, layer in enumerate(self.layers):
            layer.transient = True
            layer.view = (
                None if view is None else tuple(runs if isinstance(runs, tuple) else (runs,) for runs in view[i])
            )
        longest = max(layer.read_length() for layer in self.layers)
        for layer in self.layers:
            layer.shortfall = longest - layer.read_length()
        try:
            yield
        finally:
            for layer in self.layers:
                layer.transient, layer.tail, layer.view, layer.shortfall = False, None, None, 0

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
