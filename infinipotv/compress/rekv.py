"""ReKV: a sliding window while the video streams, every frame offloaded, per-layer block retrieval at a question."""

from __future__ import annotations

import torch

from .params import rekv as params
from .retrieval import RetrievalPolicy, mean_query, top_blocks


class ReKV(params.ReKV, RetrievalPolicy):
    """The tensor code of :class:`.params.rekv.ReKV`."""

    def select(self, queries: torch.Tensor, block_keys: torch.Tensor, n_select: int) -> torch.Tensor:
        kv_heads = block_keys.shape[1] // queries.shape[-1]
        scores = block_keys.float() @ mean_query(queries, kv_heads).to(block_keys.device)
        return top_blocks(scores, n_select)
