"""StreamMem (arXiv 2508.15717, no public code): what it keeps, as tensor functions its streaming method calls.

The paper's step, per clip (spec/peers.md section 3)::

    filter: merge consecutive frames with cos(emb_t, emb_{t-1}) > delta = 0.95 by averaging
    prefill the clip; append the proxy tokens (the chat template's assistant turn), transiently
    per layer: A = softmax(Q_proxy K^T / sqrt d)  [q x n], aggregated over the q rows -> s_j
    keep the top of (old memory + new clip) by s_j (old tokens re-scored every clip)
    per new frame: K = sum_j a_j K_j, V = sum_j a_j V_j, a = s normalised over the frame's tokens

The attention of the proxy queries is computed here from the stored keys (:func:`proxy_scores`), so the model's
own attention stays SDPA (FlashAttention on a GPU). Where the paper is silent, the choice is a parameter:

- ``aggregate``: how the proxy rows (and the query heads sharing a KV head) become one score per token, ``mean``
  or ``max``. A sum ranks tokens as the mean does and weighs a frame's tokens in the same proportions, so it is not
  offered separately.
- ``select``: ``head`` (each KV head keeps its own tokens, as every policy of the harness) or ``layer`` (the
  scores averaged over the layer's KV heads: every head keeps the same tokens).
"""

from __future__ import annotations

import math

import torch

from .base import Policy, top_indices
from .layout import FrameLayout
from .params import streammem as params
from .params.streammem import MERGE_THRESHOLD


def proxy_scores(
    queries: torch.Tensor, keys: torch.Tensor, aggregate: str = "mean", select: str = "head"
) -> torch.Tensor:
    """Scores ``[H_kv, T]`` (fp32) of the stored keys ``[H_kv, T, D]`` under the proxy queries ``[H_q, q, D]``.

    Both are rotated as the model rotated them (keys at their stream positions, queries at the proxy's), so
    ``q . k`` is the logit the model's attention computes. The softmax runs over the ``T`` keys given: the caller
    passes the whole committed memory (prefix included) and reads the region it ranks. Query head ``h`` reads KV
    head ``h // (H_q / H_kv)`` (grouped-query attention)."""
    heads_q, rows, dim = queries.shape
    heads_kv, n_tokens, _ = keys.shape
    if heads_q % heads_kv:
        raise ValueError(f"{heads_q} query heads cannot share {heads_kv} KV heads evenly")
    q = queries.float().reshape(heads_kv, heads_q // heads_kv * rows, dim)
    probs = torch.softmax(q @ keys.float().transpose(1, 2) / math.sqrt(dim), dim=-1)  # [H_kv, group * q, T]
    score = probs.mean(dim=1) if aggregate == "mean" else probs.amax(dim=1)
    if select == "layer":
        score = score.mean(dim=0, keepdim=True).expand(heads_kv, n_tokens)
    return score


def merge_runs(frames: torch.Tensor, threshold: float = MERGE_THRESHOLD) -> torch.Tensor:
    """The first frame of each run of near-duplicates among ``frames`` ``[F, p, hidden]``: frame t joins the run of
    frame t - 1 when the cosine of their flattened embeddings exceeds ``threshold``. ``[F']`` ascending, starting
    with 0."""
    flat = frames.float().flatten(1)
    similar = torch.nn.functional.cosine_similarity(flat[1:], flat[:-1], dim=1) > threshold
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.nonzero(~similar).flatten().cpu() + 1])


def merge_frames(frames: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Each run (``starts`` from :func:`merge_runs`) averaged into one frame: ``[F', p, hidden]``."""
    bounds = torch.cat([starts, torch.tensor([frames.shape[0]])]).tolist()
    return torch.stack([frames[a:b].mean(dim=0) for a, b in zip(bounds[:-1], bounds[1:])])


def frame_prototypes(
    keys: torch.Tensor, values: torch.Tensor, scores: torch.Tensor, frame: torch.Tensor, n_frames: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One key and one value per frame and head, ``[H, n_frames, D]``: the means of the frame's keys and values
    ``[H, T, D]`` weighted by their scores ``[H, T]`` normalised over the frame (``frame`` ``[T]``: each token's
    frame in ``0..n_frames-1``). A frame whose scores are all zero takes plain means."""
    heads, _, dim = keys.shape
    w = scores.float()
    index = frame.to(keys.device).long().expand(heads, -1)
    total = w.new_zeros(heads, n_frames).scatter_add_(1, index, w)
    count = w.new_zeros(heads, n_frames).scatter_add_(1, index, torch.ones_like(w))
    flat = total.gather(1, index) == 0  # a frame of zero scores: uniform weights
    alpha = torch.where(flat, 1.0 / count.gather(1, index), w / total.gather(1, index).clamp_min(1e-30))

    def weighted(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(heads, n_frames, dim, dtype=torch.float32)
        return out.scatter_add_(1, index.unsqueeze(-1).expand(-1, -1, dim), alpha.unsqueeze(-1) * x.float())

    return weighted(keys).to(keys.dtype), weighted(values).to(values.dtype)


def keep_top(scores: torch.Tensor, n_keep: int) -> torch.Tensor:
    """``[H, n_keep]`` ascending: the ``n_keep`` best-scored tokens of each head (old memory and new clip alike)."""
    return top_indices(scores, n_keep).sort(dim=1).values


def prototype_ids(frames: torch.Tensor) -> torch.Tensor:
    """Stream ids of frame prototypes: ``-2 - frame`` (text is -1, vision tokens their index in the video), so a
    prototype is counted, evicted and traced as any token yet never mistaken for one of its frame's tokens."""
    return -2 - frames


def merge_chunk(
    embeds: torch.Tensor, tokens_per_frame: int, threshold: float = MERGE_THRESHOLD
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-LLM filter of a clip's tokens ``[F * p, hidden]``: each run of near-duplicate frames averaged into
    its first frame. ``(embeds [F' * p, hidden], kept [F' * p])``, ``kept`` the indices into the clip of the tokens
    whose ids and positions the merged frames take (their run's first frame). Runs stop at the clip's edges: the
    frame before the clip is already in the memory."""
    frames = embeds.view(-1, tokens_per_frame, embeds.shape[-1])
    starts = merge_runs(frames, threshold)
    kept = (starts[:, None] * tokens_per_frame + torch.arange(tokens_per_frame)).flatten().to(embeds.device)
    return merge_frames(frames, starts).reshape(-1, embeds.shape[-1]), kept


class StreamMem(params.StreamMem, Policy):
    """The tensor code of :class:`.params.streammem.StreamMem`."""

    def keep(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, n_keep: int, layer: int, n_layers: int
    ) -> torch.Tensor:
        raise NotImplementedError(
            "StreamMem scores with its proxy queries: it is streamed by infinipotv.stream.streammem, not called alone"
        )
