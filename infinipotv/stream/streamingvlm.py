"""StreamingVLM's streaming (the rule: :class:`infinipotv.compress.streamingvlm.StreamingVLM`): before every chunk
that would take the video memory past |M|, keep the prefix and the newest whole frames that leave room for it; under
``pos_mode="shrink"`` the memory always sits where a fresh session fed only its frames would put them (the model's
own rule, ``adapter.frame_positions``: ``video_start ..`` in stream order on a 1-D RoPE, a video's (t, h, w) that
begins at the oldest survivor on M-RoPE), survivors of an eviction move there (their keys are rotated on read, by a
:class:`~infinipotv.kv.rotary.RotaryStore`: a key is stored once and rounded once more as it is read, however many
evictions it survives), the next chunk is prefilled right after them and a question continues from the memory's end.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from infinipotv.compress.streamingvlm import StreamingVLM, window_keep
from infinipotv.kv.rotary import RotaryStore
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import Asked, StreamingMethod, View, held_bytes, streaming_method
from infinipotv.stream.schedule import ByteCap, Schedule
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.session import VideoState


@streaming_method("streamingvlm")
class StreamingVLMMethod(StreamingMethod):
    """Sink + recent frames, evicted before every chunk that would take the memory past |M| (H7, upstream's
    order), contiguous positions by rotation on read (H5: every layer's store is a :class:`RotaryStore`)."""

    def __init__(
        self, policy: StreamingVLM, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.policy = policy
        self.adapter = adapter
        self.schedule = Schedule.per_chunk(budget, byte_cap)  # |M| + chunk -> |M|: c_ratio plays no part
        self.shrink = policy.pos_mode == "shrink"

    def start(self, video: VideoState) -> None:
        """Shrink: every layer's store (holding the prefix) becomes a :class:`RotaryStore` over it, rotating with
        the decoder's own RoPE (``adapter.rerotate``). Under KIVI the window is the KIVI store's: its keys, coded
        as the forward rotated them, are dequantized then rotated by their shifts on read."""
        if not self.shrink:
            return
        rows = self.adapter.text_positions(0, 1).shape[0]
        for layer in video.cache.layers:
            layer.store = RotaryStore(layer.store, self.adapter.rerotate, rows)

    def check_chunk(self, tokens: int, frames: int) -> None:
        self.schedule.check_chunk(tokens, frames)

    def window_frames(self, per_frame: int) -> int:
        """W: the whole frames |M| holds (a chunk's forward reads at most these, itself included)."""
        return max(1, self.schedule.budget // per_frame)

    def held_after(self, video: VideoState, incoming: int, per_frame: int) -> int:
        """Frames the memory holds when ``incoming`` model frames are prefilled: all of them, or the newest
        W - ``incoming`` (upstream prunes before a chunk's prefill, so its forward reads the window)."""
        return min(video.video_tokens // per_frame, max(0, self.window_frames(per_frame) - incoming))

    def held_positions(self, video: VideoState, frames: int) -> torch.Tensor:
        """Shrink: the positions of a memory of ``frames`` model frames, those a fresh session fed only them
        gives (a video that began at the oldest)."""
        return self.adapter.frame_positions(0, frames, video.grid, video.fps, video.video_start)

    def before_chunk(self, video: VideoState, chunk: VisionChunk, clock: PassClock) -> None:
        """Upstream's order: the cache is pruned (``inference.py:L319-328``, eviction ``L141-160``), then the chunk
        is prefilled (``L45``). So the memory keeps its newest W - (chunk's frames) frames first, the chunk's
        forward reads exactly the window (itself included), and the video memory never holds more than |M|."""
        per_frame = chunk.tokens_per_frame
        keep = self.held_after(video, chunk.n_frames, per_frame)
        if keep * per_frame == video.video_tokens:
            return
        clock.bytes_before = held_bytes(video)
        with clock.timed():
            self.evict(video, keep)
        clock.passes += 1

    def before_prefill(
        self, video: VideoState, chunk: VisionChunk, token_ids: torch.Tensor, transient: bool
    ) -> tuple[VisionChunk, torch.Tensor]:
        """Shrink: a chunk (or a question's frames since the boundary) is placed where a fresh session fed the
        memory's frames would place the frames after them: those it holds once pruned for the chunk
        (:meth:`held_after`; a question's view prunes as :meth:`view` says)."""
        if not self.shrink:
            return chunk, token_ids
        held = self.held_after(video, chunk.n_frames, chunk.tokens_per_frame)
        first = held * self.adapter.frames_per_step
        positions = self.adapter.frame_positions(first, chunk.n_frames, chunk.grid, video.fps, video.video_start)
        return replace(chunk, positions=positions), token_ids

    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        """Under a byte cap (``compress.budget_mib``), the oldest frames go until the stores hold at most the cap:
        KIVI's key groups thinned by eviction keep their scale/zero rows, so |M| tokens can occupy more bytes than
        the formula that turned the budget into |M| (full precision never does). Otherwise nothing: the memory was
        pruned before the chunk."""
        cap = self.schedule.byte_cap
        if cap is None:
            return
        per_frame = chunk.tokens_per_frame
        while (held := held_bytes(video)) > cap.cap and video.video_tokens:
            if not clock.passes:
                clock.bytes_before = held
            with clock.timed():
                self.evict(video, video.video_tokens // per_frame - 1)
            clock.passes += 1

    @torch.inference_mode()
    def evict(self, video: VideoState, frames: int) -> None:
        """Keep the newest ``frames`` whole frames in every layer and head (one set: the stores' ids agree); under
        shrink, the survivors move from their positions in the memory to those of a video that begins with them
        (:meth:`RotaryStore.move`: positions only, no key arithmetic)."""
        p = video.prefix_len
        per_frame = video.grid[0] * video.grid[1]
        ids = video.cache.stores[0].token_ids()[0, p:]
        n_video = len(ids)
        first = n_video if frames < 1 else int(window_keep(ids.long() // per_frame, frames)[0])
        n = n_video - first  # the window is a suffix of the memory
        device = ids.device
        kept = torch.cat([torch.arange(p, device=device), torch.arange(p + first, p + n_video, device=device)])
        for store in video.cache.stores:
            store.keep(kept.expand(store.token_ids().shape[0], -1))
        if not self.shrink or not n:
            return
        old = self.held_positions(video, n_video // per_frame)[:, first:]
        prefix = torch.zeros(old.shape[0], p, dtype=old.dtype, device=old.device)  # the sink never moves
        by = torch.cat([prefix, self.held_positions(video, n // per_frame) - old], dim=1)
        for store in video.cache.stores:
            store.move(by)

    def view(self, video: VideoState, asked: Asked) -> View | None:
        """Shrink: the whole memory as the stores read it (each layer's keys rotated as its forward reads them:
        no view of its own, so no new bytes), the question after it by the model's rule for text after a video
        (the largest position + 1); the frames since the boundary are placed by :meth:`before_prefill`.

        A question that brings frames since the boundary (``asked.frames``) reads the memory as upstream's would be
        once pruned for them (upstream prunes, then prefills that chunk, then the question): the prefix and the
        newest W - frames frames (:meth:`pruned`), the frames after them; the memory itself is unchanged."""
        per_frame = video.grid[0] * video.grid[1] if video.grid is not None else 0
        held = video.video_tokens // per_frame if per_frame else 0
        if held and self.held_after(video, asked.frames, per_frame) < held:
            return self.pruned(video, self.held_after(video, asked.frames, per_frame), per_frame)
        if not self.shrink:
            return None
        start = int(self.held_positions(video, held).max()) + 1 if held else video.video_start
        ids = [store.token_ids() for store in video.cache.stores]
        return View(None, start=start, nbytes=0, ids=ids, tail_placed=True)

    def pruned(self, video: VideoState, keep: int, per_frame: int) -> View:
        """[prefix | the newest ``keep`` frames], read in place (original positions), or with their keys rotated to
        where :meth:`evict` would move them (shrink: new tensors, counted as the view's bytes)."""
        p, held = video.prefix_len, video.video_tokens // per_frame
        first = p + (held - keep) * per_frame
        start, by = video.next_position, None
        if self.shrink:  # from where the kept frames sit now to where a memory of them alone puts them
            by = self.held_positions(video, keep) - self.held_positions(video, held)[:, first - p :]
            start = int(self.held_positions(video, keep).max()) + 1 if keep else video.video_start
        layers, ids, nbytes = [], [], 0
        for store in video.cache.stores:
            keys, values = (store.inner if self.shrink else store).read()  # the sink never moves: as stored
            kept = store.read_from(first, by) if self.shrink else (keys[:, first:], values[:, first:])
            nbytes += kept[0].nbytes if self.shrink else 0
            layers.append(((keys[:, :p], kept[0]), (values[:, :p], kept[1])))
            stored = store.token_ids()
            ids.append(torch.cat([stored[..., :p], stored[..., first:]], dim=-1))
        return View(layers, start=start, nbytes=nbytes, ids=ids, tail_placed=self.shrink)
