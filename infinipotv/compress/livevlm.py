"""LiveVLM: vision-sink-bucket compression of the long-term memory, page retrieval at a question."""

from __future__ import annotations

import math

import torch

from .params import livevlm as params
from .retrieval import RetrievalPolicy, mean_query, top_blocks


def vsb_keep(scores: torch.Tensor, n_keep: int, n_sinks: int, bucket_size: int) -> torch.Tensor:
    """Vision-sink buckets over tokens in position order with attention ``scores [T]``: ``n_keep // bucket_size``
    buckets of ``bucket_size`` split the positions evenly; phase 1 keeps the top ``n_sinks`` tokens by score, each
    filling its bucket (a bucket may overflow); phase 2 scans the rest by descending score and keeps a token iff its
    bucket has room, until ``n_keep`` are kept. The buckets hold at least ``(n_keep // B) * B``: where B does not
    divide ``n_keep`` (the paper leaves it unsaid), the remaining slots go to the best-scoring tokens left, whatever
    their bucket. Ascending indices ``[n_keep]`` (``T >= n_keep``)."""
    n_tokens = scores.numel()
    n_buckets = max(1, n_keep // bucket_size)
    bucket = torch.arange(n_tokens, device=scores.device) * n_buckets // n_tokens
    order = torch.sort(scores, descending=True, stable=True).indices
    sinks, rest = order[:n_sinks], order[n_sinks:]
    load = torch.bincount(bucket[sinks], minlength=n_buckets)
    room = (bucket_size - load).clamp(min=0)
    rest_bucket = bucket[rest]
    by_bucket = torch.sort(rest_bucket, stable=True)  # within a bucket, still in descending score
    starts = torch.searchsorted(by_bucket.values, torch.arange(n_buckets, device=scores.device))
    rank = torch.empty_like(rest_bucket)
    rank[by_bucket.indices] = torch.arange(rest.numel(), device=scores.device) - starts[by_bucket.values]
    fits = rank < room[rest_bucket]
    eligible = rest[fits][: max(0, n_keep - n_sinks)]
    remainder = rest[~fits][: max(0, n_keep - n_sinks - eligible.numel())]  # still in descending score
    return torch.cat([sinks, eligible, remainder]).sort().values


class LiveVLM(params.LiveVLM, RetrievalPolicy):
    """The tensor code of :class:`.params.livevlm.LiveVLM`."""

    def select(self, queries: torch.Tensor, block_keys: torch.Tensor, n_select: int) -> torch.Tensor:
        kv_heads = block_keys.shape[1] // queries.shape[-1]
        scores = block_keys.float() @ mean_query(queries, kv_heads).to(block_keys.device)
        return top_blocks(scores, n_select)

    def compact(self, keys: torch.Tensor, queries: torch.Tensor, n_keep: int, tokens_per_frame: int) -> torch.Tensor:
        kv_heads, dim = keys.shape[0], keys.shape[-1]
        r = min(queries.shape[1], self.r_frames * tokens_per_frame)
        q = queries[:, -r:].float().reshape(kv_heads, -1, dim)  # each KV head's query heads' rows together
        attention = torch.softmax(q @ keys.float().transpose(1, 2) / math.sqrt(dim), dim=-1)  # [H_kv, g * r, T]
        scores = attention.mean(dim=(0, 1))
        return vsb_keep(scores, n_keep, round(self.sink_ratio * n_keep), self.bucket_size)
