"""H8, a side prefill: run the language model on a block of tokens over the system prefix alone, outside the stream.

MuKV encodes every block of the video on its own, right after the prefix, and never keeps a streaming context
(spec/field2.md 2.3). :func:`side_prefill` does that on the session's own cache in its transient mode with a view of
the prefix only, so the stored memory is neither read past the prefix nor written: what the block's forward added
(its tail) is read out before the transient block ends and drops it. It returns every layer's keys and values of
the block (keys after RoPE at the positions given) and, when asked, the last layer's attention weights, computed
here from the captured queries and the keys the forward attended: the forward itself keeps its fast attention
kernel (SDPA, flash), which never materialises the weights (upstream needs eager attention for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infinipotv.kv.cache import StreamCache
from infinipotv.models.base import ModelAdapter


@dataclass
class SideOutput:
    """One side prefill: per layer ``keys``/``values`` ``[H_kv, N, D]`` of the block (keys after RoPE), and
    ``attention [H_q, N, prefix + N]`` of the last layer (softmax weights in fp32) when asked for."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    attention: torch.Tensor | None = None


@torch.inference_mode()
def side_prefill(
    adapter: ModelAdapter,
    cache: StreamCache,
    prefix_len: int,
    embeds: torch.Tensor,
    positions: torch.Tensor,
    attention: bool = True,
) -> SideOutput:
    """The block ``embeds [N, hidden]`` at ``positions [R, N]`` prefilled over the first ``prefix_len`` stored tokens
    of every layer of ``cache`` (the system prefix), which is left as it was."""
    prefix = []
    for store in cache.stores:
        keys, values = store.read()
        prefix.append((keys[:, :prefix_len], values[:, :prefix_len]))
    with cache.transient(view=prefix):
        if attention:
            with adapter.capture_queries() as captured:
                adapter.forward(embeds, positions, cache, logits=False)
        else:
            adapter.forward(embeds, positions, cache, logits=False)
        tails = [layer.tail for layer in cache.layers]
    out = SideOutput(keys=[k for k, _ in tails], values=[v for _, v in tails])
    if attention:
        query = captured[-1][0]  # the last layer's pre-RoPE queries [H_q, N, D]
        rotated = adapter.rerotate(query, torch.zeros_like(positions), positions)
        out.attention = last_layer_attention(adapter, rotated, torch.cat([prefix[-1][0], out.keys[-1]], dim=1))
    return out


def last_layer_attention(adapter: ModelAdapter, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``[H_q, N, T]``: causal softmax attention of the block's last ``N`` positions over ``keys [H_kv, T, D]``
    (queries ``[H_q, N, D]`` after RoPE; each KV head serves its group of query heads), at the layer's own scale."""
    layer = adapter.attention_layers()[-1]
    scale = float(getattr(layer, "scaling", queries.shape[-1] ** -0.5))
    group = queries.shape[0] // keys.shape[0]
    expanded = keys.float().repeat_interleave(group, dim=0)
    logits = queries.float() @ expanded.transpose(1, 2) * scale  # [H_q, N, T]
    n, t = queries.shape[1], keys.shape[1]
    future = torch.arange(t, device=keys.device).view(1, -1) > torch.arange(t - n, t, device=keys.device).view(-1, 1)
    return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1)
