"""The reference a retrieval method's answer is held to on a one-layer model: a cache prefilled afresh with
[prefix | the chosen frames in time order | question] at contiguous positions (a key there depends on its embedding
and position only, so re-rotated retrieved blocks must give the same first-token log-probabilities)."""

from __future__ import annotations

import numpy as np
import torch

from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.cache import StreamCache
from infinipotv.models.base import ModelAdapter


def fresh_prefill_logprobs(
    adapter: ModelAdapter, video: np.ndarray, chosen: list[int], video_start: int, prompt: str
) -> torch.Tensor:
    """First-token log-probabilities ``[V]`` of ``prompt`` after the prefix and the frames ``chosen`` of ``video``,
    placed one after the other from ``video_start`` (fp32 storage)."""
    cache = StreamCache(adapter.n_layers, lambda: FullPrecisionStore(torch.float32))
    ids = adapter.prefix_ids()
    cache.commit(torch.full((len(ids),), -1))
    adapter.forward(adapter.embed_text(ids), adapter.text_positions(0, len(ids)), cache, logits=False)
    position = video_start
    for f in chosen:
        chunk = adapter.encode_frames(video[f : f + 1], f, 2.0, video_start)
        n = chunk.embeds.shape[0]
        cache.commit(torch.arange(n))
        adapter.forward(chunk.embeds, adapter.text_positions(position, n), cache, logits=False)
        position += n
    q = adapter.question_ids(prompt)
    with cache.transient():
        logits = adapter.forward(adapter.embed_text(q), adapter.text_positions(position, len(q)), cache)
    return torch.log_softmax(logits[-1], dim=-1)
