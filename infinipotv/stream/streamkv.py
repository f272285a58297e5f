"""StreamKV's streaming (the rule and its choices: :class:`infinipotv.compress.streamkv.StreamKV`).

ReKV's streaming (:class:`~infinipotv.stream.retrieval.Retrieval`: every frame offloaded to the host as it arrives,
a window of |C| tokens in the cache, blocks retrieved per layer at a question, re-rotated after the prefix), plus
after each chunk, frame by frame, the semantic segmentation of :class:`~infinipotv.compress.streamkv.Segmenter`:

- a frame joins the open segment (its block is already on the host, the last ones of every layer);
- past ``max_segment_size`` the two most similar adjacent frames are averaged in every layer's host store: their
  pre-RoPE keys and their values, at the first frame's positions and ids;
- a segment closes: one transient forward of [summary frame | guidance prompt] on what the cache holds (prefix and
  window) gives the summary's keys and values (its K/V, kept) and the prompt's pre-RoPE queries (its K/V, dropped);
  the prompt scores the segment's frame blocks per layer, each layer keeps its ``reserved`` top frames of the
  segment, and the summary is put after them, never evicted.

Accelerator memory is ReKV's: |C| window tokens while streaming (a close's forward is transient, as a question's:
the summary and prompt tokens are not stored there) and |M| at an answer. The host holds the kept frames and
summaries of every layer, plus the open segment's input embeddings (at most ``max_segment_size`` frames, for its
summary), counted in the host bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from infinipotv.compress.retrieval import block_means
from infinipotv.compress.streamkv import Segmenter, StreamKV
from infinipotv.kv.host import TOKEN_DIM, HostStore, Offloaded
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import streaming_method
from infinipotv.stream.retrieval import Retrieval
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.session import VideoState

SEGMENT = "streamkv_segment"  # VideoState.state key: the open segment (OpenSegment)


@dataclass
class OpenSegment:
    """The open segment: the segmenter's state, and per (merged) frame its input embeddings ``[T_f, hidden]`` on
    the host (for the summary), its positions ``[R, T_f]`` and its stream ids ``[T_f]``."""

    segmenter: Segmenter
    embeds: list[torch.Tensor] = field(default_factory=list)
    positions: list[torch.Tensor] = field(default_factory=list)
    ids: list[torch.Tensor] = field(default_factory=list)

    def restart(self) -> None:
        self.embeds, self.positions, self.ids = [], [], []


@streaming_method("streamkv")
class StreamKVMethod(Retrieval):
    """Streams with a :class:`~infinipotv.compress.streamkv.StreamKV` rule under |M| = ``budget``."""

    rule: StreamKV

    def __init__(
        self, policy: StreamKV, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        super().__init__(policy, adapter, budget, c_ratio, byte_cap)
        self.guidance_ids = adapter.tokenizer(policy.guidance, add_special_tokens=False).input_ids
        if not self.guidance_ids:
            raise ValueError(f"compress.guidance={policy.guidance!r} gives no tokens: give a guidance text")

    def start(self, video: VideoState) -> None:
        super().start(video)
        r = self.rule
        video.state[SEGMENT] = OpenSegment(Segmenter(r.min_segment_size, r.max_segment_size, r.segment_theta))

    def host_bytes(self, video: VideoState) -> int:
        return super().host_bytes(video) + sum(e.nbytes for e in video.state[SEGMENT].embeds)

    @torch.inference_mode()
    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        super().after_chunk(video, chunk, token_ids, clock, queries)  # every frame offloaded, the window trimmed
        per_frame, seg = chunk.tokens_per_frame, video.state[SEGMENT]
        for f in range(chunk.n_frames):
            rows = slice(f * per_frame, (f + 1) * per_frame)
            embeds = chunk.embeds[rows]
            action = seg.segmenter.push(embeds.float().mean(dim=0))
            if action == "close":  # the segment ended before frame f: f and the rest of the chunk follow it
                self._close(video, seg, per_frame, after=chunk.n_frames - f, end=int(chunk.positions.max()) + 1)
                seg.restart()
            seg.embeds.append(embeds.to("cpu", copy=True))
            seg.positions.append(chunk.positions[:, rows])
            seg.ids.append(token_ids[rows])
            if isinstance(action, int):
                self._merge(video, seg, action, per_frame, after=chunk.n_frames - f - 1)

    def _segment_start(self, host: HostStore, per_frame: int, n_frames: int, after: int) -> int:
        """The block index of a segment of ``n_frames`` frames followed by ``after`` frames in ``host`` (every
        layer holds the open segment and the frames after it last, whatever it kept of older segments)."""
        return len(host) // per_frame - after - n_frames

    def _merge(self, video: VideoState, seg: OpenSegment, i: int, per_frame: int, after: int) -> None:
        """Frames ``i`` and ``i + 1`` of the open segment averaged into frame ``i``'s place, in every layer."""
        a = self.adapter
        for host in video.host:
            b = self._segment_start(host, per_frame, len(seg.ids), after) + i
            span = slice(b * per_frame, (b + 2) * per_frame)
            keys = host.stored("keys")[:, span].to(a.device)
            positions = host.stored("positions")[:, span].to(a.device)
            pre_rope = a.rerotate(keys, positions, torch.zeros_like(positions)).float()
            first, second = pre_rope[:, :per_frame], pre_rope[:, per_frame:]
            where = positions[:, :per_frame]
            merged_k = a.rerotate(((first + second) / 2).to(keys.dtype), torch.zeros_like(where), where)
            values = host.stored("values")[:, span].float()
            merged_v = ((values[:, :per_frame] + values[:, per_frame:]) / 2).to(keys.dtype)
            ids = host.stored("ids")[span][:per_frame]
            host.splice(span.start, span.stop, Offloaded(merged_k, merged_v, ids, where))
        seg.embeds[i] = ((seg.embeds[i].float() + seg.embeds[i + 1].float()) / 2).to(seg.embeds[i].dtype)
        for part in (seg.embeds, seg.positions, seg.ids):
            del part[i + 1]

    def _close(self, video: VideoState, seg: OpenSegment, per_frame: int, after: int, end: int) -> None:
        """The open segment closes with ``after`` frames behind it in the host stores: its summary and the
        guidance prompt's scores in one transient forward, then each layer keeps its top frames and the summary."""
        r, a, cache = self.rule, self.adapter, video.cache
        if not (r.use_segment_summary or r.compresses):
            return
        n_frames = len(seg.ids)
        parts_e, parts_p, n_summary = [], [], 0
        if r.use_segment_summary:
            summary = torch.stack([e.float() for e in seg.embeds]).mean(dim=0)
            parts_e.append(summary.to(a.device, seg.embeds[0].dtype))
            parts_p.append(seg.positions[-1])
            n_summary = per_frame
        if r.compresses:
            parts_e.append(a.embed_text(self.guidance_ids))
            parts_p.append(a.text_positions(max(video.next_position, end), len(self.guidance_ids)))
        embeds = torch.cat([e.to(parts_e[-1].dtype) for e in parts_e])
        with a.capture_queries() as captured, cache.transient():
            a.forward(embeds, torch.cat(parts_p, dim=1), cache, logits=False)
            summaries = [
                Offloaded(layer.tail[0][:, :n_summary], layer.tail[1][:, :n_summary], seg.ids[-1], seg.positions[-1])
                for layer in cache.layers
            ]
        starts = [self._segment_start(host, per_frame, n_frames, after) for host in video.host]
        if r.compresses:
            scores = [
                r.guidance_scores(captured[layer][0][:, n_summary:], self._frame_rows(host, start, n_frames, per_frame))
                for layer, (host, start) in enumerate(zip(video.host, starts))
            ]
            reserved = r.reserved(scores)
        n_tokens = n_frames * per_frame
        for layer, (host, start) in enumerate(zip(video.host, starts)):
            span = slice(start * per_frame, start * per_frame + n_tokens)
            kept = Offloaded(*(host.stored(name).narrow(dim, span.start, n_tokens) for name, dim in TOKEN_DIM.items()))
            if r.compresses:
                frames = torch.topk(scores[layer], int(reserved[layer])).indices.sort().values.cpu()
                tokens = (frames.view(-1, 1) * per_frame + torch.arange(per_frame)).view(-1)
                kept = Offloaded(
                    kept.keys.index_select(1, tokens),
                    kept.values.index_select(1, tokens),
                    kept.ids.index_select(0, tokens),
                    kept.positions.index_select(1, tokens),
                )
            if n_summary:
                s = summaries[layer]
                kept = Offloaded(
                    *(
                        torch.cat([mine, theirs.to(mine.device, mine.dtype)], dim=1 if mine.dim() > 1 else 0)
                        for mine, theirs in zip(kept.tensors(), s.tensors())
                    )
                )
            host.splice(span.start, span.stop, kept)

    def _frame_rows(self, host: HostStore, start: int, n_frames: int, per_frame: int) -> torch.Tensor:
        """``[F, H_kv * D]``: the mean pre-RoPE key of each frame of a segment (upstream's ``block_k``)."""
        span = slice(start * per_frame, (start + n_frames) * per_frame)
        keys = host.stored("keys")[:, span].to(self.adapter.device)
        positions = host.stored("positions")[:, span].to(self.adapter.device)
        return block_means(self.adapter.rerotate(keys, positions, torch.zeros_like(positions)), per_frame)
