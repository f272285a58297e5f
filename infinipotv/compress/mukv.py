"""MuKV: blocks at three granularities, each prefilled alone over the system prefix, compressed by attention plus a
high-pass FFT signal, and reranked against coarse context at a question (the rule; :mod:`infinipotv.stream.mukv`
streams with it).

The tensor functions here are the upstream ones, transcribed from ``IMBALDY/MuKV@2127b87`` (spec/field2.md section
2, anchors file:line) and held against the spec's vectors (``tests/compress/test_mukv.py``):

- :func:`attention_importance`, :func:`fft_importance`, :func:`token_importance`, :func:`kept_tokens`: the
  dual-signal compression of one block (``mukv_dualsignal_compression.py:193-399``, ``:517-537``);
- :func:`representative`: a block's row, the mean last-layer key of its kept tokens (``:561-563``);
- :func:`pick`: the candidates, the context-aware rerank and the final picks (``mukv_rerank.py:85-156``,
  ``:208-270``).
"""

from __future__ import annotations

import torch

from .base import Policy
from .params import mukv as params
from .params.mukv import GRAINS

EPS = 1e-8  # upstream's min-max denominator
OVER_RETRIEVE = 2  # candidates per retrieved block (``mukv_rerank.py:210``)


def minmax(x: torch.Tensor) -> torch.Tensor:
    """``(x - min) / (max - min + 1e-8)``, upstream's normalisation."""
    return (x - x.min()) / (x.max() - x.min() + EPS)


def attention_importance(attention: torch.Tensor, prefix: int) -> torch.Tensor:
    """``[g]``: the attention each block token receives from the block's own queries, from the last layer's
    weights ``attention [H_q, g, prefix + g]``: mean over heads, sum over queries, the prefix's columns dropped
    (``:343,351``). Causal, so earlier tokens are favoured, as upstream."""
    return attention.float().mean(dim=0).sum(dim=0)[prefix:]


def fft_importance(keys: torch.Tensor) -> torch.Tensor:
    """``[g]`` in [0, 1]: the high-pass magnitude of the last layer's post-RoPE keys ``[H_kv, g, D]`` along the tokens
    (``_compute_fft_importance``, method ``fft``, ``:193-301``): the heads' mean key, its rFFT per channel, the bins
    from ``max(1, bins // 2)`` on kept with their phase, back to tokens, mean ``|.|`` over channels, min-max."""
    signal = keys.float().mean(dim=0).T  # [D, g]
    spectrum = torch.fft.rfft(signal, dim=-1)
    magnitude = spectrum.abs()
    high = torch.zeros_like(magnitude)
    start = max(1, magnitude.shape[-1] // 2)
    high[:, start:] = magnitude[:, start:]
    component = torch.fft.irfft(high * torch.exp(1j * torch.angle(spectrum)), n=signal.shape[-1], dim=-1)
    return minmax(component.abs().mean(dim=0))


def token_importance(attention: torch.Tensor, keys: torch.Tensor, prefix: int, alpha: float) -> torch.Tensor:
    """``alpha * minmax(attention) + (1 - alpha) * fft`` (``:386-391``)."""
    return alpha * minmax(attention_importance(attention, prefix)) + (1 - alpha) * fft_importance(keys)


def kept_tokens(importance: torch.Tensor, n_keep: int) -> torch.Tensor:
    """Ascending indices of the ``n_keep`` most important tokens of a block (``:517-537``; dedup off, as the
    shipped scripts run), the same for every layer and head."""
    return torch.topk(importance, n_keep).indices.sort().values


def representative(last_keys: torch.Tensor) -> torch.Tensor:
    """``[H_kv * D]``: the mean over a block's kept tokens of the last layer's post-RoPE keys ``[H_kv, s, D]``, heads
    concatenated (``:561-563``), in fp32."""
    return last_keys.float().mean(dim=1).reshape(-1)


def cosine(query: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``[B]``: the cosine of ``query [K]`` with each of ``rows [B, K]`` (``F.cosine_similarity``)."""
    return torch.nn.functional.cosine_similarity(rows.float(), query.float().view(1, -1), dim=-1)


def pick(
    query: torch.Tensor,
    rows: dict[str, torch.Tensor],
    topk: dict[str, int],
    top_n: int,
    rerank: dict[str, float],
) -> dict[str, torch.Tensor]:
    """Per granularity, the indices of its retrieved blocks in score order (``mukv_rerank.py:208-270``).

    ``query [K]``: the question's last-layer key; ``rows[g] [B_g, K]``: the blocks' representatives. The top
    ``2 * topk[g]`` blocks by cosine are the candidates; the context is the mean representative of the ``top_n``
    best segment candidates; a patch or frame candidate's score becomes ``(1 - w) * s + w * cos(row, context)``
    with ``w = rerank[g]`` (segments keep theirs); the top ``topk[g]`` by the result, best first. Without segment
    candidates there is no context and no rerank."""
    scores, candidates = {}, {}
    for grain in GRAINS:
        s = cosine(query, rows[grain]) if rows[grain].numel() else torch.empty(0)
        top = torch.topk(s, min(OVER_RETRIEVE * topk[grain], s.numel()))
        scores[grain], candidates[grain] = top.values, top.indices
    context = None
    if candidates["segment"].numel():
        context = rows["segment"][candidates["segment"][:top_n]].float().mean(dim=0)
    out = {}
    for grain in GRAINS:
        s = scores[grain]
        if context is not None and grain in rerank:
            s = (1 - rerank[grain]) * s + rerank[grain] * cosine(context, rows[grain][candidates[grain]])
        order = torch.sort(s, descending=True, stable=True).indices[: topk[grain]]
        out[grain] = candidates[grain][order]
    return out


class MuKV(params.MuKV, Policy):
    """The tensor code of :class:`.params.mukv.MuKV`."""
