"""The rule of a method that retrieves at question time (ReKV, LiveVLM): a window on the accelerator, the rest of
the stream offloaded in blocks, and the blocks a question's queries pick copied back for its answer.

A :class:`RetrievalPolicy` is the tensor side of a registered policy whose parameters subclass
:class:`.params.retrieval.RetrievalParams` (``compress=NAME`` and its knobs are generated from their fields);
:mod:`infinipotv.stream.retrieval` streams with it. The rule is tensor functions only,
so a transcription test can hold each against the paper's formula:

- :meth:`~RetrievalPolicy.keep`: the window, the most recent ``n_keep`` tokens (every head the same tokens), so the
  parametrized policy test covers it;
- :meth:`~RetrievalPolicy.block_keys`: one row per block of pre-RoPE keys, heads concatenated;
- :meth:`~RetrievalPolicy.select`: the blocks a question's pre-RoPE queries pick, ascending (time order);
- :meth:`~RetrievalPolicy.compact`: which offloaded tokens the host memory keeps when it is bounded (LiveVLM's
  vision-sink buckets; ReKV keeps all).

Memory: ``compress.budget`` |M| is the accelerator's video tokens per KV head, shared by the window (|C| =
``c_ratio`` * |M|, trimmed after every chunk) and the retrieval buffer (|M| - |C| tokens copied back for an answer),
so the accelerator never holds more than |M| video tokens, the answer included, like every other method at the same
budget. A chunk holds fewer than |M| - |C| tokens (the shared check), so the window plus a chunk stays under |M|.
"""

from __future__ import annotations

import torch

from .base import Policy
from .layout import FrameLayout
from .params import retrieval as params

POSITIONS = ("contiguous", "original")


def block_means(keys: torch.Tensor, block: int) -> torch.Tensor:
    """``[ceil(T / block), H * D]``: the mean of each run of ``block`` tokens of ``keys [H, T, D]`` (the last run may
    be shorter), heads concatenated, in fp32."""
    heads, n_tokens, dim = keys.shape
    n_blocks = -(-n_tokens // block)
    sums = torch.zeros(heads, n_blocks, dim, dtype=torch.float32, device=keys.device)
    which = torch.arange(n_tokens, device=keys.device) // block
    sums.index_add_(1, which, keys.float())
    counts = torch.bincount(which, minlength=n_blocks).clamp(min=1).to(sums.dtype)
    return (sums / counts.view(1, -1, 1)).transpose(0, 1).reshape(n_blocks, heads * dim)


def mean_query(queries: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """``[kv_heads * D]``: the question's queries ``[H_q, N, D]`` averaged over tokens, each KV head's group of query
    heads summed, heads concatenated: ``q̄ · k̄`` over the GQA-expanded keys (ReKV's query heads each meet their KV
    head's key) equals this row times the un-expanded key row."""
    q = queries.float().mean(dim=1)  # [H_q, D]
    group = q.shape[0] // kv_heads
    return q.view(kv_heads, group, -1).sum(dim=1).reshape(-1)


class RetrievalPolicy(params.RetrievalParams, Policy):
    """The tensor code of :class:`.params.retrieval.RetrievalParams`."""

    def block_keys(self, keys: torch.Tensor, block: int) -> torch.Tensor:
        """``[B, H * D]`` rows a question's query is scored against, from pre-RoPE ``keys [H, T, D]``: the mean key
        of each block, heads concatenated (ReKV's representative, LiveVLM's page key)."""
        return block_means(keys, block)

    def select(self, queries: torch.Tensor, block_keys: torch.Tensor, n_select: int) -> torch.Tensor:
        """Ascending indices ``[n_select]`` of the blocks a question reads. ``queries``: ``[H_q, N, D]`` pre-RoPE, of
        the retrieval forward (one layer: the text ``query`` names); ``block_keys``: ``[B, H_kv * D]``."""
        raise NotImplementedError

    def compact(self, keys: torch.Tensor, queries: torch.Tensor, n_keep: int, tokens_per_frame: int) -> torch.Tensor:
        """Ascending indices ``[n_keep]`` of the offloaded tokens a bounded host memory keeps. ``keys``: ``[H, T, D]``
        after RoPE; ``queries``: ``[H_q, r, D]`` of the newest vision tokens, after RoPE."""
        raise NotImplementedError(f"{type(self).__name__} keeps every offloaded token")

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        """The window: the most recent ``n_keep`` tokens, the same in every head."""
        n_tokens = keys.shape[1]
        return torch.arange(n_tokens - n_keep, n_tokens, device=keys.device).expand(keys.shape[0], n_keep)


def top_blocks(scores: torch.Tensor, n_select: int) -> torch.Tensor:
    """The ``n_select`` highest ``scores [B]``, ascending (sorted by time); ties broken by ``torch.topk``."""
    return torch.topk(scores, n_select).indices.sort().values
