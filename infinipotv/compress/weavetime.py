"""WeaveTime's inference: a ReKV memory, an uncertainty gate at a question, coarse-to-fine retrieval when unsure."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from .params import weavetime as params
from .retrieval import RetrievalPolicy, top_blocks


def top_entropy(logits: torch.Tensor, top: int = 10) -> float:
    """The entropy of the softmax of the ``top`` largest ``logits`` (the last token's, ``[V]`` or ``[1, V]``),
    divided by ``log(top)``: 0 when one token takes all the mass, 1 when the top ones are equal
    (``mixins.py:455-482``)."""
    z = torch.topk(logits.float().reshape(-1), min(top, logits.numel())).values
    p = torch.softmax(z, dim=0)
    return float(-(p * torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))).sum() / math.log(top))


def kv_queries(queries: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """``[N, kv_heads * D]``: pre-RoPE queries ``[H_q, N, D]`` averaged over each KV head's group of query heads,
    heads concatenated (``_project_query_to_kv_dim``, ``kv_cache_manager.py:1244-1267``): the H_kv space the
    blocks' keys live in."""
    h_q, n, dim = queries.shape
    grouped = queries.float().view(kv_heads, h_q // kv_heads, n, dim).mean(dim=1)  # [H_kv, N, D]
    return grouped.transpose(0, 1).reshape(n, kv_heads * dim)


def coarse_to_fine(
    q_kv: torch.Tensor,
    block_keys: torch.Tensor,
    n_select: int,
    detailed: Callable[[torch.Tensor], Iterable[torch.Tensor]],
    prefilter: int = 3,
) -> torch.Tensor:
    """Ascending indices ``[n_select]`` of the blocks WeaveTime reads (``_select_topk_blocks``,
    ``kv_cache_manager.py:1301-1319``; ``_calc_hybrid_similarity``, ``:1278-1299``).

    ``q_kv [N, H_kv * D]``: the question's queries in KV-head space; ``block_keys [B, H_kv * D]``: each block's mean
    pre-RoPE key; ``detailed(indices)``: the candidate blocks' pre-RoPE keys for ``indices`` (ascending), fetched
    only for the candidates, as consecutive batches ``[n_i, T_b, H_kv * D]`` (one batch alive at a time). Coarse:
    ``avg_j = mean_t(q_kv) . block_k_j``; the top ``prefilter * n_select`` blocks by it are the candidates; fine: a
    candidate's score becomes ``max_{t, s} q_kv[t] . k_j[s]``, every other block keeps its coarse score; the top
    ``n_select`` by the result, sorted by time."""
    coarse = block_keys.float() @ q_kv.float().mean(dim=0).to(block_keys.device)
    candidates = torch.topk(coarse, min(prefilter * n_select, coarse.numel())).indices.sort().values  # time order
    q = q_kv.float()
    fine = torch.cat([torch.einsum("td,psd->pts", q, k.float()).flatten(1).amax(dim=1) for k in detailed(candidates)])
    refined = coarse.clone()
    refined[candidates] = fine.to(refined.device)
    return top_blocks(refined, n_select)


class WeaveTime(params.WeaveTime, RetrievalPolicy):
    """The tensor code of :class:`.params.weavetime.WeaveTime`."""
