"""StreamingVLM's streaming (the rule: :class:`infinipotv.compress.streamingvlm.StreamingVLM`): before every chunk
that would take the video memory past |M|, keep the prefix and the newest whole frames that leave room for it; under
``pos_mode="shrink"`` on a 1-D RoPE model, chunks are prefilled right after the memory and the survivors of an
eviction are re-rotated to follow the prefix, so the memory always sits at positions ``video_start ..`` in stream
order and a question continues from its end.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from infinipotv.compress.streamingvlm import StreamingVLM, window_keep
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import StreamingMethod, View, held_bytes, streaming_method
from infinipotv.stream.schedule import ByteCap, Schedule
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.session import VideoState


@streaming_method("streamingvlm")
class StreamingVLMMethod(StreamingMethod):
    """Sink + recent frames, evicted before every chunk that would take the memory past |M| (H7, upstream's
    order), contiguous positions by re-rotation (H5)."""

    def __init__(
        self, policy: StreamingVLM, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.policy = policy
        self.adapter = adapter
        self.schedule = Schedule.per_chunk(budget, byte_cap)  # |M| + chunk -> |M|: c_ratio plays no part
        self.shrink = policy.pos_mode == "shrink" and adapter.contiguous_positions

    def start(self, video: VideoState) -> None:
        if self.shrink and not isinstance(video.cache.stores[0], FullPrecisionStore):
            raise ValueError(
                "compress=streamingvlm with compress.pos_mode=shrink re-rotates stored keys, which KIVI codes cannot "
                "take without re-quantizing: use quant=fp16 (or bf16) or compress.pos_mode=original"
            )

    def check_chunk(self, tokens: int, frames: int) -> None:
        self.schedule.check_chunk(tokens, frames)

    def window_frames(self, per_frame: int) -> int:
        """W: the whole frames |M| holds (a chunk's forward reads at most these, itself included)."""
        return max(1, self.schedule.budget // per_frame)

    def before_chunk(self, video: VideoState, chunk: VisionChunk, clock: PassClock) -> None:
        """Upstream's order: the cache is pruned (``inference.py:L319-328``, eviction ``L141-160``), then the chunk
        is prefilled (``L45``). So the memory keeps its newest W - (chunk's frames) frames first, the chunk's
        forward reads exactly the window (itself included), and the video memory never holds more than |M|."""
        per_frame = chunk.tokens_per_frame
        room = self.window_frames(per_frame) - chunk.n_frames  # check_chunk: a chunk is at most |M|, so >= 0
        if video.video_tokens <= room * per_frame:
            return
        clock.bytes_before = held_bytes(video)
        with clock.timed():
            self.evict(video, room)
        clock.passes += 1

    def before_prefill(
        self, video: VideoState, chunk: VisionChunk, token_ids: torch.Tensor, transient: bool
    ) -> tuple[VisionChunk, torch.Tensor]:
        """Shrink: a chunk is prefilled right after the memory (its own layout kept). Frames prefilled with a
        question are moved by the session with the question's view."""
        if not self.shrink or transient:
            return chunk, token_ids
        shift = video.video_start + video.video_tokens - int(chunk.positions.min())
        return replace(chunk, positions=chunk.positions + shift), token_ids

    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        """Nothing: the memory was pruned before the chunk."""

    @torch.inference_mode()
    def evict(self, video: VideoState, frames: int) -> None:
        """Keep the newest ``frames`` whole frames in every layer and head (one set: the stores' ids agree)."""
        p = video.prefix_len
        per_frame = video.grid[0] * video.grid[1]
        ids = video.cache.stores[0].token_ids()[0, p:]
        n_video = len(ids)
        first = n_video if frames < 1 else int(window_keep(ids.long() // per_frame, frames)[0])
        n = n_video - first  # the window is a suffix of the memory
        device = ids.device
        kept = torch.arange(first, n_video, device=device)
        for store in video.cache.stores:
            heads = store.token_ids().shape[0]
            prefix = torch.arange(p, device=device).expand(heads, p)
            if not self.shrink or not n:
                store.keep(torch.cat([prefix, (kept + p).expand(heads, n)], dim=1))
                continue
            keys, values = store.read()
            k, v, own = keys[:, p + first :], values[:, p + first :], store.token_ids()[0, p + first :]
            old = (video.video_start + first + torch.arange(n, device=device)).view(1, n)
            moved = self.adapter.rerotate(k, old, old - first)
            store.keep(prefix)
            store.append(moved, v, own)

    def view(self, video: VideoState, question_ids: list[int]) -> View | None:
        """Shrink: the whole memory, the question right after it (its end moves back at every eviction)."""
        if not self.shrink:
            return None
        layers = [store.read() for store in video.cache.stores]  # the stored tensors themselves: no new bytes
        return View(layers, start=video.video_start + video.video_tokens, nbytes=0)
