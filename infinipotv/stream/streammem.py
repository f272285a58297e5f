"""StreamMem's streaming (the rule and its choices: :class:`infinipotv.compress.streammem.StreamMem`).

Per chunk: near-duplicate frames are merged before the LLM (H3), the chunk is prefilled, the proxy text is
prefilled transiently after it with its queries captured (H4), and every layer keeps the best |M| tokens of old
memory and new clip by the proxy's attention, computed from the stored keys, then gains the new frames' prototypes
(H6: appended, ids ``-2 - frame``). The pass runs after every chunk (H7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from infinipotv.compress.streammem import (
    StreamMem,
    frame_prototypes,
    keep_top,
    merge_chunk,
    prototype_ids,
    proxy_scores,
)
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import StreamingMethod, held_bytes, streaming_method
from infinipotv.stream.schedule import ByteCap, Schedule
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.video_state import VideoState


@streaming_method("streammem")
class StreamMemMethod(StreamingMethod):
    """Proxy-attention selection with frame merging and prototypes, at every chunk, after its prefill: the paper
    scores old memory and new clip together (keep top-k of their union), so it selects after the clip, not before
    it as StreamingVLM evicts."""

    def __init__(
        self, policy: StreamMem, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.policy = policy
        self.adapter = adapter
        self.schedule = Schedule.per_chunk(budget, byte_cap)  # |M| + chunk -> |M|: c_ratio plays no part
        self.proxy_ids = adapter.tokenizer(policy.proxy, add_special_tokens=False).input_ids
        if not self.proxy_ids:
            raise ValueError(f"compress.proxy={policy.proxy!r} gives no tokens: give a proxy text")

    def check_chunk(self, tokens: int, frames: int) -> None:
        self.schedule.check_chunk(tokens, frames)
        if self.policy.prototypes and self.policy.prototypes_in_budget and frames >= self.schedule.budget:
            raise ValueError(
                f"a chunk of {frames} frames leaves no room in |M| = {self.schedule.budget} once its prototypes are "
                f"in: lower eval.chunk_frames or raise compress.budget"
            )

    def before_prefill(
        self, video: VideoState, chunk: VisionChunk, token_ids: torch.Tensor, transient: bool
    ) -> tuple[VisionChunk, torch.Tensor]:
        """Runs of near-duplicate frames averaged into their first frame, whose ids and positions they take."""
        if self.policy.merge_threshold >= 1:
            return chunk, token_ids
        embeds, kept = merge_chunk(chunk.embeds, chunk.tokens_per_frame, self.policy.merge_threshold)
        merged = VisionChunk(embeds, chunk.positions[:, kept], chunk.grid, chunk.n_frames)
        return merged, token_ids[kept.to(token_ids.device)]

    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        clock.bytes_before = held_bytes(video)
        per_frame = video.grid[0] * video.grid[1]
        with clock.timed():
            proxy = self.proxy_queries(video, int(chunk.positions.max()) + 1)
            target = self.schedule.budget
            frames = torch.unique_consecutive(token_ids.long() // per_frame) if self.policy.prototypes else None
            if frames is not None and self.policy.prototypes_in_budget:
                target -= len(frames)
            for layer, store in enumerate(video.cache.stores):
                self.update_layer(video, store, proxy[layer], target, token_ids, frames, per_frame)
        clock.passes += 1
        self.hold_byte_cap(video, clock, int(chunk.positions.max()) + 1)

    @torch.inference_mode()
    def proxy_queries(self, video: VideoState, start: int) -> list[torch.Tensor]:
        """Per layer, the proxy's queries ``[H_q, q, D]`` rotated at its positions (after the chunk): a transient
        forward over the memory, so the stored memory does not change."""
        a = self.adapter
        positions = a.text_positions(start, len(self.proxy_ids))
        with a.capture_queries() as captured, video.cache.transient():
            a.forward(a.embed_text(self.proxy_ids), positions, video.cache, logits=False)
        return [a.rerotate(q[0], torch.zeros_like(positions), positions) for q in captured]

    def update_layer(
        self,
        video: VideoState,
        store,
        proxy: torch.Tensor,
        target: int,
        token_ids: torch.Tensor,
        frames: torch.Tensor | None,
        per_frame: int,
    ) -> None:
        """Keep the best ``target`` video tokens of one layer, then append the new frames' prototypes."""
        p = video.prefix_len
        keys, values = store.read()
        scores = proxy_scores(proxy, keys, self.policy.aggregate, self.policy.select)[:, p:]
        n_video, n_new = keys.shape[1] - p, len(token_ids)
        prototypes = None
        if frames is not None:
            local = torch.searchsorted(frames.to(token_ids.device), token_ids.long() // per_frame)
            new = slice(p + n_video - n_new, p + n_video)
            prototypes = frame_prototypes(
                keys[:, new], values[:, new], scores[:, n_video - n_new :], local, len(frames)
            )
        if n_video > target:
            kept = keep_top(scores, target)
            prefix = torch.arange(p, device=kept.device).expand(kept.shape[0], p)
            store.keep(torch.cat([prefix, kept + p], dim=1))
        if prototypes is not None:
            store.append(*prototypes, prototype_ids(frames).to(token_ids.device))

    def hold_byte_cap(self, video: VideoState, clock: PassClock, start: int) -> None:
        """Under a byte cap (KIVI's thinned key groups cost more than the formula), further passes keep fewer
        tokens by the proxy's scores, with no new prototypes."""
        if self.schedule.byte_cap is None:
            return
        held = held_bytes(video)
        while (n_keep := self.schedule.byte_pass(clock.passes, held, video.video_tokens)) is not None:
            with clock.timed():
                proxy = self.proxy_queries(video, start)
                empty = torch.empty(0, dtype=torch.long)
                for layer, store in enumerate(video.cache.stores):
                    self.update_layer(video, store, proxy[layer], n_keep, empty, None, 1)
                held = held_bytes(video)
            clock.passes += 1
