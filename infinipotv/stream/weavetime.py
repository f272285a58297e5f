"""WeaveTime's streaming: ReKV's memory, and at a question a gate between the window and coarse-to-fine retrieval.

While the video streams this is :class:`~infinipotv.stream.retrieval.Retrieval` with the
:class:`~infinipotv.compress.weavetime.WeaveTime` rule (every frame offloaded on arrival with its mean pre-RoPE key,
the cache keeping the prefix and the newest |C| video tokens). At a question the session prefills the answer
prompt on the stored memory, [prefix | window], capturing every layer's pre-RoPE queries, and hands its
next-token logits to :meth:`WeaveTimeRetrieval.reconsider`: a normalized top-10 entropy below the threshold
decodes from that cache; otherwise each layer picks its blocks coarse-to-fine with those queries, and the prompt is
prefilled again on [prefix | retrieved blocks] (re-rotated to contiguous positions after the prefix, as ReKV's)
and decoded. Nothing is written: the memory after the answer is the memory before it.

Accelerator memory: ReKV's, |C| window tokens while streaming and at most |M| while answering (the window stays
resident, the retrieval buffer is |M| - |C| tokens). The fine scoring copies the candidates' keys to the
accelerator a retrieval buffer at a time (``prefilter`` copies of at most |M| - |C| tokens per layer, freed before
the next), and the values with them (``HostStore.take``): a transient no larger than one layer's retrieved
blocks, taken before that layer's blocks are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from infinipotv.compress.weavetime import WeaveTime, coarse_to_fine, kv_queries, top_entropy
from infinipotv.kv.coded import full
from infinipotv.kv.host import HostStore
from infinipotv.stream.method import Asked, View, streaming_method
from infinipotv.stream.retrieval import Retrieval

if TYPE_CHECKING:
    from infinipotv.stream.session import VideoState

CACHE_ONLY, RETRIEVAL = "cache_only", "retrieval"  # the branches, as upstream names its strategies


@streaming_method("weavetime")
class WeaveTimeRetrieval(Retrieval):
    """Streams with the :class:`~infinipotv.compress.weavetime.WeaveTime` rule under |M| = ``budget``."""

    rule: WeaveTime
    capture_answer_queries = True

    def view(self, video: VideoState, asked: Asked) -> View | None:
        """The first pass reads what the cache stores, [prefix | window]; its forward is the answer prompt's
        (``WeaveTime.query``: the whole prompt, as upstream's shipped scripts)."""
        return None

    @torch.inference_mode()
    def reconsider(
        self, video: VideoState, logits: torch.Tensor, queries: list[torch.Tensor]
    ) -> tuple[View | None, dict | None]:
        entropy = top_entropy(logits, self.rule.top)
        retrieve = self.rule.retrieves(entropy)
        gate = {"branch": RETRIEVAL if retrieve else CACHE_ONLY, "entropy": round(entropy, 6)}
        if not retrieve or not len(video.host[0]):  # nothing offloaded yet: the window is the whole stream
            return None, gate
        return self.retrieved(video, queries), gate

    def select(
        self, host: HostStore, queries: torch.Tensor, rows: torch.Tensor, n_select: int, block: int
    ) -> torch.Tensor:
        """Coarse-to-fine over the layer's blocks: the candidates' keys come from the host store, RoPE stripped,
        at most ``n_select`` blocks (the retrieval buffer) on the accelerator at a time."""
        kv_heads = rows.shape[1] // queries.shape[-1]

        def detailed(candidates: torch.Tensor) -> Iterator[torch.Tensor]:
            for batch in candidates.to("cpu").split(n_select):
                got = host.take((batch.view(-1, 1) * block + torch.arange(block)).view(-1))
                positions = got.positions.long()
                keys = self.adapter.rerotate(full(got.keys), positions, torch.zeros_like(positions))
                h, _, dim = keys.shape  # [H_kv, n * block, D] -> per block, per token, heads concatenated
                yield keys.view(h, len(batch), block, dim).permute(1, 2, 0, 3).reshape(len(batch), block, h * dim)

        return coarse_to_fine(kv_queries(queries, kv_heads), rows, n_select, detailed, self.rule.prefilter)
