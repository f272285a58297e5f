"""StreamingTOM's CTR (YIGE24/StreamingTOM@6c66b05, ``streamingtom/modules/ctr.py``): each frame's tokens cut to a
budget of G before the language model, as tensor functions its streaming method calls.

Per frame (``_classify_tokens``, ``_compress_single_frame``)::

    sim_i = cos(x_t[i], x_{t-1}[i]); static = sim > tau (the first frame of a video: all dynamic)
    k_s = int(G |S| / p), k_d = G - k_s (each clamped to its class's size, the other taking the rest)
    dynamic: the top k_d by saliency
    static: density-peak clustering (DPC: k nearest neighbours, rho = exp(-mean d^2) + 1e-6 noise, delta = the
            distance to the nearest LESS dense token, as upstream's mask has it (standard DPC: a denser one; see
            :func:`dpc_centres`), score rho * delta) -> k_s centres; each centre <- beta * centre +
            (1 - beta) * mean(tokens assigned to it)
    the G tokens in their original order

Upstream's saliency is the attention the vision tower's last kept layer pays each token, averaged over heads and
queries (``siglip_encoder.py``, ``_streaming_attention_with_importance``). A model whose adapter cannot give it
(the symbolic model's glyph reader has no attention) uses :func:`embedding_saliency` instead, declared in the
method's docs. The DPC noise comes from a generator seeded per frame, so a resumed run draws the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Policy
from .layout import FrameLayout
from .params import streamingtom as params
from .params.streamingtom import BETA, DPC_K, RETAIN, TAU

NOISE = 1e-6  # DPC's random tie-break on the density


def classify_static(frames: torch.Tensor, previous: torch.Tensor | None, tau: float = TAU) -> torch.Tensor:
    """``[F, p]`` True where a token of ``frames`` ``[F, p, hidden]`` is static: its cosine with the token at the
    same place of the frame before (``previous`` ``[p, hidden]`` for the first, None at the start of a video) is
    above ``tau``."""
    x = F.normalize(frames.float(), dim=-1)
    first = x[:1] if previous is None else F.normalize(previous.float(), dim=-1)[None]
    static = (x * torch.cat([first, x[:-1]])).sum(dim=-1) > tau
    if previous is None:
        static[0] = False
    return static


def budgets(n_static: int, n_tokens: int, retain: int) -> tuple[int, int]:
    """(k_s, k_d): the static and dynamic shares of ``retain`` tokens, upstream's rounding and clamps."""
    k_s = int(retain * n_static / n_tokens)
    k_d = retain - k_s
    if k_s > n_static:
        k_s, k_d = n_static, retain - n_static
    if k_d > n_tokens - n_static:
        k_d = n_tokens - n_static
        k_s = retain - k_d
    return k_s, k_d


def dpc_centres(x: torch.Tensor, n_clusters: int, k: int, noise: torch.Tensor) -> torch.Tensor:
    """The ``n_clusters`` top scores rho * delta of ``x`` ``[n, d]`` (ascending indices); ``noise`` ``[n]`` in [0, 1).

    Upstream's ``_dpc_cluster`` exactly, quirk included: its mask ``density[:, None] > density[None, :]`` makes delta
    the distance to the nearest token *less* dense than this one (the least dense token takes the largest distance),
    where standard density-peak clustering takes the nearest *denser* one, which makes centres the peaks of separate
    clusters. So the centres are dense tokens far from sparser ones, not one peak per cluster:
    ``x = [[-0.1], [0], [0.1], [3], [3.05]]``, 2 centres, k = 3, no noise gives [0, 2] (both in the first cluster)
    where the standard rule gives [1, 3] (tests/compress/test_streamingtom_dpc.py). Kept, as upstream runs it."""
    n, d = x.shape
    if n <= 1:
        return torch.arange(n, device=x.device)
    dist = torch.cdist(x.float(), x.float()) / d**0.5
    nearest = torch.topk(dist, min(k, n - 1), dim=-1, largest=False).values
    density = (-(nearest**2).mean(dim=-1)).exp() + noise.to(dist.device) * NOISE
    less_dense = density[:, None] > density[None, :]  # [i, j]: j is less dense than i (upstream's `higher`)
    to_less_dense = torch.where(less_dense, dist, dist.max()).min(dim=-1).values
    return torch.topk(density * to_less_dense, min(n_clusters, n)).indices.sort().values


def dpc_merge(
    x: torch.Tensor, n_clusters: int, k: int, beta: float, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """DPC centres of ``x`` ``[n, hidden]`` (indices, ascending) and their merged features: each centre moved to
    ``beta * centre + (1 - beta) * mean of the other tokens nearest to it``."""
    centres = dpc_centres(x, n_clusters, k, noise)
    n, d = x.shape
    if len(centres) == n:
        return x[centres], centres
    others = torch.ones(n, dtype=torch.bool, device=x.device)
    others[centres] = False
    dist = torch.cdist(x.float(), x.float()) / d**0.5
    nearest = dist[others][:, centres].argmin(dim=1)
    rest = x[others].float()
    sums = rest.new_zeros(len(centres), d).index_add_(0, nearest, rest)
    counts = torch.bincount(nearest, minlength=len(centres)).to(rest.dtype)
    merged = beta * x[centres].float() + (1 - beta) * sums / counts.clamp_min(1)[:, None]
    merged = torch.where(counts[:, None] > 0, merged, x[centres].float())
    return merged.to(x.dtype), centres


def reduce_frame(
    x: torch.Tensor,
    saliency: torch.Tensor,
    static: torch.Tensor,
    retain: int = RETAIN,
    k: int = DPC_K,
    beta: float = BETA,
    noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One frame ``x`` ``[p, hidden]`` cut to ``retain`` tokens: ``(tokens [G, hidden], slots [G])``, the slots
    (places in the frame) ascending. ``noise`` ``[n_static]`` in [0, 1) for DPC (zeros when None)."""
    p = x.shape[0]
    if not 1 <= retain <= p:
        raise ValueError(f"retain={retain} must be in [1, {p}] (the frame's tokens)")
    n_static = int(static.sum())
    k_s, k_d = budgets(n_static, p, retain)
    slots, tokens = [], []
    if k_s > 0:
        where = torch.nonzero(static).flatten()
        merged, centres = dpc_merge(
            x[where], k_s, k, beta, noise if noise is not None else torch.zeros(n_static, device=x.device)
        )
        slots.append(where[centres])
        tokens.append(merged)
    if k_d > 0:
        where = torch.nonzero(~static).flatten()
        top = torch.topk(saliency[where], k_d).indices
        slots.append(where[top])
        tokens.append(x[where[top]])
    slot, token = torch.cat(slots), torch.cat(tokens)
    order = torch.argsort(slot)
    return token[order], slot[order]


def embedding_saliency(frame: torch.Tensor) -> torch.Tensor:
    """The stand-in saliency ``[p]`` where no vision-tower attention exists: how far each token's embedding points
    from its frame's mean, ``1 - cos(x_i, mean_j x_j)`` (a token unlike the rest of its frame scores high)."""
    x = frame.float()
    return 1 - F.cosine_similarity(x, x.mean(dim=0, keepdim=True), dim=-1)


def reduce_chunk(
    frames: torch.Tensor,
    saliency: torch.Tensor,
    previous: torch.Tensor | None,
    first_frame: int,
    retain: int = RETAIN,
    tau: float = TAU,
    k: int = DPC_K,
    beta: float = BETA,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CTR over a chunk's frames ``[F, p, hidden]`` (``saliency`` ``[F, p]``; ``previous`` ``[p, hidden]``: the
    last frame of the chunk before, unreduced, None at the start of a video; ``first_frame``: the video's index of
    ``frames[0]``, which seeds each frame's DPC noise). ``(tokens [F * G, hidden], slots [F, G])``: each frame's
    G tokens in their original order and their places in the frame."""
    static = classify_static(frames, previous, tau)
    tokens, slots = [], []
    for f in range(frames.shape[0]):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + first_frame + f)
        noise = torch.rand(int(static[f].sum()), generator=generator).to(frames.device)
        kept, slot = reduce_frame(frames[f], saliency[f], static[f], retain, k, beta, noise)
        tokens.append(kept)
        slots.append(slot)
    return torch.cat(tokens), torch.stack(slots)


class StreamingTOM(params.StreamingTOM, Policy):
    """The tensor code of :class:`.params.streamingtom.StreamingTOM`."""

    def keep(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, n_keep: int, layer: int, n_layers: int
    ) -> torch.Tensor:
        raise NotImplementedError(
            "StreamingTOM keeps every token in OQM and retrieves at a question: it is streamed by "
            "infinipotv.stream.streamingtom, not called alone"
        )
