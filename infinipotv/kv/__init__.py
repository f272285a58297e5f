"""KV storage: per-layer stores (full precision, KIVI), the Cache the model sees, byte accounting."""

from __future__ import annotations

from typing import Callable

import torch

from infinipotv.kv.accounting import Storage, StorageSettings, cache_bytes, storage_dtype, tokens_for_bytes
from infinipotv.kv.cache import StreamCache
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.store import FullPrecisionStore, KVStore

__all__ = [
    "StreamCache",
    "FullPrecisionStore",
    "KiviStore",
    "KVStore",
    "Storage",
    "StorageSettings",
    "make_store_factory",
    "cache_bytes",
    "tokens_for_bytes",
]


def make_store_factory(quant: StorageSettings, model_dtype: torch.dtype) -> tuple[Callable[[], KVStore], Storage]:
    """A zero-argument store constructor for the configured storage (one store per layer per video), and the
    :class:`Storage` that describes it for byte accounting."""
    storage = Storage.from_config(quant, model_dtype)
    dtype = storage_dtype(quant, model_dtype)
    if storage.quantized:
        return (lambda: KiviStore(quant.bits, quant.group_size, quant.residual_length, dtype)), storage
    return (lambda: FullPrecisionStore(dtype)), storage
