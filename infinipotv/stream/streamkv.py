"""StreamKV's streaming (the rule and its choices: :class:`infinipotv.compress.streamkv.StreamKV`).

ReKV's streaming (:class:`~infinipotv.stream.retrieval.Retrieval`: every frame offloaded to the host as it arrives,
a window of |C| tokens in the cache, blocks retrieved per layer at a question, re-rotated after the prefix), plus
after each chunk, frame by frame, the semantic segmentation of :class:`~infinipotv.compress.streamkv.Segmenter`:

- a frame joins the open segment (its block is already on the host with its row, the mean pre-RoPE key, as ReKV's:
  the open segment and the frames after it are the last blocks of every layer);
- past ``max_segment_size`` the two most similar adjacent frames are averaged in every layer's host store: their
  pre-RoPE keys and their values, at the first frame's positions and ids, and their rows;
- a segment closes: one transient forward of [summary frame | guidance prompt] on what the cache holds (prefix and
  window) gives the summary's keys and values (its K/V, kept) and the prompt's pre-RoPE queries (its K/V, dropped);
  the prompt scores the segment's frame blocks per layer, each layer keeps its ``reserved`` top frames of the
  segment, and the summary is put after them, never evicted.

At a question, with ``retrieve_temp`` > 0, each layer reads its own number of frames (the rule's layer-adaptive
counts, summing to the buffer's frames times the layers), right-aligned before the question.

Accelerator memory is ReKV's: |C| window tokens while streaming (a close's forward is transient, as a question's:
the summary and prompt tokens are not stored there) and |M| at an answer. The host holds the kept frames and
summaries of every layer, plus the open segment's input embeddings (at most ``max_segment_size`` frames, for its
summary), counted in the host bytes. Every splice (:meth:`HostStore.splice`) rewrites only the newest segments
and keeps the rows, so neither a close nor a question copies the stream: a question scores the cached rows on the
host, as ReKV's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from infinipotv.compress.retrieval import block_means
from infinipotv.compress.streamkv import Segmenter, StreamKV
from infinipotv.kv.host import TOKEN_DIM, HostStore, Offloaded, joined_tokens
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import streaming_method
from infinipotv.stream.retrieval import Retrieval
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.video_state import VideoState

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

    def counts(self, queries: list[torch.Tensor], candidates: list[tuple[torch.Tensor, int]]) -> list[int]:
        """The layer-adaptive counts (:meth:`StreamKV.retrieval_counts`) from each layer's question scores over all
        its candidate blocks (upstream's first question pass), summing to what every layer reading the buffer
        would: the accelerator holds the same bytes."""
        counts = super().counts(queries, candidates)
        if not self.rule.retrieve_temp:
            return counts
        scores = [self.rule.guidance_scores(q, rows) for q, (rows, _) in zip(queries, candidates)]
        return self.rule.retrieval_counts(scores, counts)

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
            start = (self._segment_start(host, per_frame, len(seg.ids), after) + i) * per_frame
            stop = start + 2 * per_frame
            keys = host.read("keys", start, stop).to(a.device)
            positions = host.read("positions", start, stop).to(a.device)
            pre_rope = a.rerotate(keys, positions, torch.zeros_like(positions)).float()
            mean = (pre_rope[:, :per_frame] + pre_rope[:, per_frame:]) / 2
            where = positions[:, :per_frame]
            values = host.read("values", start, stop).float()
            merged = Offloaded(
                a.rerotate(mean.to(keys.dtype), torch.zeros_like(where), where),
                ((values[:, :per_frame] + values[:, per_frame:]) / 2).to(values.dtype),
                host.read("ids", start, start + per_frame),
                where,
                block_means(mean, per_frame),
            )
            host.splice(start, stop, merged, per_frame)
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
            tails = [(layer.tail[0][:, :n_summary], layer.tail[1][:, :n_summary]) for layer in cache.layers]
        starts = [self._segment_start(host, per_frame, n_frames, after) for host in video.host]
        rows = [host.block_keys()[start : start + n_frames] for host, start in zip(video.host, starts)]
        if r.compresses:
            scores = [r.guidance_scores(captured[layer][0][:, n_summary:], rows[layer]) for layer in range(len(rows))]
            reserved = r.reserved(scores)
        for layer, (host, start) in enumerate(zip(video.host, starts)):
            first, stop = start * per_frame, (start + n_frames) * per_frame
            kept = host.cut(first, stop)  # as stored: KIVI codes move without being quantized again
            kept.block_keys = rows[layer]
            if r.compresses:
                frames = torch.topk(scores[layer], int(reserved[layer])).indices.sort().values.cpu()
                tokens = (frames.view(-1, 1) * per_frame + torch.arange(per_frame)).view(-1)
                kept = Offloaded(
                    *(
                        kept_part.index_select(dim, tokens)
                        for kept_part, dim in zip(kept.tensors(), TOKEN_DIM.values())
                    ),
                    block_keys=kept.block_keys.index_select(0, frames),
                )
            if n_summary:
                kept = self._with_summary(host, kept, tails[layer], seg)
            host.splice(first, stop, kept)

    def _with_summary(
        self, host: HostStore, kept: Offloaded, summary: tuple[torch.Tensor, torch.Tensor], seg: OpenSegment
    ) -> Offloaded:
        """``kept`` then the summary frame (keys after RoPE at its segment's last frame's positions, and its row),
        the summary as ``host`` stores it (coded as one frame under KIVI)."""
        keys, values = summary
        positions = seg.positions[-1]
        row = block_means(self.adapter.rerotate(keys, positions, torch.zeros_like(positions)), keys.shape[1])
        added = host.coded(Offloaded(keys, values, seg.ids[-1], positions), keys.shape[1])
        pairs = zip(kept.tensors(), added.tensors(), TOKEN_DIM.values())
        parts = [joined_tokens(mine, theirs, dim) for mine, theirs, dim in pairs]
        return Offloaded(*parts, block_keys=torch.cat([kept.block_keys, row.to(kept.block_keys.device)]))
