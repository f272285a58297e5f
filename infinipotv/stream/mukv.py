"""MuKV's streaming (the rule and its choices: :class:`infinipotv.compress.mukv.MuKV`).

MuKV keeps no streaming context: the session does not prefill a chunk into the cache (:attr:`prefills_chunks`),
which holds the system prefix alone. After each chunk (:meth:`MuKVMethod.after_chunk`), frame by frame, each of
its patch blocks and the frame itself, and every ``segment_frames`` frames (gathered across chunks on the host) a
segment block, is prefilled alone over the prefix (H8, :func:`~infinipotv.stream.side_prefill.side_prefill`)
where the video's first token sits (the block translated, its own positions kept: upstream puts every block
right after its init prompt). The rule scores the block's tokens from that forward's last layer, its kept tokens
go to the granularity's host stores (one per layer, in the cache's storage dtype) and its representative to the
host beside them.

At a question (:meth:`MuKVMethod.view`): the question's own text (the rule's ``query``) is side-prefilled over the
prefix and its last token's last-layer key scores every block's representative on the host; the rule picks each
granularity's blocks, only those are copied to the accelerator, and the prompt and answer read [prefix | patch |
frame | segment blocks] at the positions they were prefilled at (``positions=original``) or re-rotated to follow
the prefix (``contiguous``, 1-D RoPE models; M-RoPE keeps the original ones, as every retrieval method here).

Accelerator memory: the prefix while streaming, plus one block's transient forward (a segment's tokens and the
last layer's attention weights); at an answer at most |M| retrieved tokens per layer and KV head (the rule's
counts). Host: every block's kept tokens at the three granularities, the representatives, and the open segment's
frames (input embeddings, at most ``segment_frames - 1`` frames).

Under KIVI (``quant=int2|int4|int8``) the cache (the prefix) is a KIVI store and every block's kept tokens are
stored as KIVI codes, each block its own key groups (:mod:`infinipotv.kv.coded`); retrieved blocks reach the
accelerator as codes, dequantized as a forward reads them. Under a budget in bytes the retrieved counts shrink
until the blocks' bytes, as taken, fit what the cap leaves beside the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from infinipotv.compress.mukv import GRAINS, MuKV, kept_tokens, pick, representative, token_importance
from infinipotv.kv.coded import Coded, CodedRun, coding_of
from infinipotv.kv.host import HostStore, Offloaded, joined_tokens
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import Asked, StreamingMethod, View, held_bytes, streaming_method
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.side_prefill import side_prefill
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.video_state import VideoState

MEMORY = "mukv"  # VideoState.state key: the video's MuKVMemory


@dataclass
class MuKVMemory:
    """One video's blocks: per granularity a host store per layer and the representatives ``[K]`` (host), and the
    open segment's frames (input embeddings ``[T_f, hidden]`` on the host, positions ``[R, T_f]``, ids ``[T_f]``)."""

    stores: dict[str, list[HostStore]]
    rows: dict[str, list[torch.Tensor]] = field(default_factory=lambda: {g: [] for g in GRAINS})
    open_embeds: list[torch.Tensor] = field(default_factory=list)
    open_positions: list[torch.Tensor] = field(default_factory=list)
    open_ids: list[torch.Tensor] = field(default_factory=list)

    def host_bytes(self) -> int:
        """The representatives and the open segment's frames (the stores count their own)."""
        tensors = [*(r for rows in self.rows.values() for r in rows), *self.open_embeds, *self.open_positions]
        return sum(t.nbytes for t in (*tensors, *self.open_ids))


@streaming_method("mukv")
class MuKVMethod(StreamingMethod):
    """Streams with a :class:`~infinipotv.compress.mukv.MuKV` rule under |M| = ``budget`` retrieved tokens."""

    prefills_chunks = False

    def __init__(
        self, policy: MuKV, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.rule = policy
        self.adapter = adapter
        self.budget = budget
        self.byte_cap = byte_cap

    def start(self, video: VideoState) -> None:
        device, n_layers = self.adapter.device, self.adapter.n_layers
        coding = coding_of(video.cache.stores[0])
        memory = MuKVMemory(stores={g: [HostStore(device, coding=coding) for _ in range(n_layers)] for g in GRAINS})
        video.state[MEMORY] = memory
        video.host = [store for g in GRAINS for store in memory.stores[g]]

    def host_bytes(self, video: VideoState) -> int:
        return super().host_bytes(video) + video.state[MEMORY].host_bytes()

    # -- after each chunk -----------------------------------------------------------------------------------------
    @torch.inference_mode()
    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        memory, per_frame = video.state[MEMORY], chunk.tokens_per_frame
        g = self.rule.block_tokens(per_frame)
        origin = self.adapter.frame_positions(0, 1, chunk.grid, video.fps, video.video_start)[:, :1].to(
            chunk.positions.device
        )
        clock.bytes_before = held_bytes(video)
        for f in range(chunk.n_frames):
            rows = slice(f * per_frame, (f + 1) * per_frame)
            embeds, positions, ids = chunk.embeds[rows], chunk.positions[:, rows], token_ids[rows]
            for at in range(0, g["patch"] * self.rule.patch_split, max(g["patch"], 1)):  # none below a token each
                part = slice(at, at + g["patch"])
                self._block(video, "patch", embeds[part], positions[:, part], ids[part], origin, clock)
            self._block(video, "frame", embeds, positions, ids, origin, clock)
            memory.open_embeds.append(embeds.to("cpu", copy=True))
            memory.open_positions.append(positions.to("cpu", copy=True))
            memory.open_ids.append(ids.to("cpu", copy=True))
            if len(memory.open_ids) == self.rule.segment_frames:  # the open segment is whole: its block
                device = chunk.embeds.device
                segment_embeds = torch.cat(memory.open_embeds).to(device)
                segment_positions = torch.cat(memory.open_positions, dim=1).to(device)
                segment_ids = torch.cat(memory.open_ids)
                memory.open_embeds, memory.open_positions, memory.open_ids = [], [], []
                self._block(video, "segment", segment_embeds, segment_positions, segment_ids, origin, clock)
        clock.passes += 1

    def _block(
        self,
        video: VideoState,
        grain: str,
        embeds: torch.Tensor,
        positions: torch.Tensor,
        ids: torch.Tensor,
        origin: torch.Tensor,
        clock: PassClock,
    ) -> None:
        """One block side-prefilled where the video starts (an encode, timed as one), then compressed and offloaded
        (timed as the step's compression)."""
        placed = positions.long() - (positions[:, :1].long() - origin)
        out = side_prefill(self.adapter, video.cache, video.prefix_len, embeds, placed)
        with clock.timed():
            importance = token_importance(out.attention, out.keys[-1], video.prefix_len, self.rule.alpha(grain))
            n_keep = self.rule.kept(video.grid[0] * video.grid[1])[grain]
            kept = kept_tokens(importance, n_keep)
            cpu = kept.to(ids.device)
            memory = video.state[MEMORY]
            for host, store, keys, values in zip(memory.stores[grain], video.cache.stores, out.keys, out.values):
                dtype = store.read()[0].dtype  # the storage's (quant=fp16), as every method's offloaded tokens
                host.append(Offloaded(keys[:, kept].to(dtype), values[:, kept].to(dtype), ids[cpu], placed[:, kept]))
            memory.rows[grain].append(representative(out.keys[-1][:, kept]).cpu())

    # -- at a question --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def view(self, video: VideoState, asked: Asked) -> View | None:
        a, memory, p = self.adapter, video.state[MEMORY], video.prefix_len
        stored = [store.read() for store in video.cache.stores]
        prefix = [(k[:, :p], v[:, :p]) for k, v in stored]
        if not any(memory.rows[g] for g in GRAINS):
            ids = [store.token_ids()[0, :p] for store in video.cache.stores]
            return View(layers=[((k,), (v,)) for k, v in prefix], start=video.video_start, nbytes=0, ids=ids)
        ids = asked.of(self.rule.query)
        out = side_prefill(a, video.cache, p, a.embed_text(ids), a.text_positions(video.video_start, len(ids)), False)
        query = out.keys[-1][:, -1].reshape(-1).cpu()  # the last question token's last-layer key (post-RoPE)
        rows = {g: torch.stack(memory.rows[g]) if memory.rows[g] else torch.empty(0, query.numel()) for g in GRAINS}
        kept = self.rule.kept(video.grid[0] * video.grid[1])
        picks = self._fit(video, query, rows, kept)
        layers, read, nbytes, length, start = [], [], 0, 0, video.video_start
        contiguous = self.rule.positions == "contiguous" and a.contiguous_positions
        for layer, (prefix_k, prefix_v) in enumerate(prefix):
            parts = [self._take(memory.stores[g][layer], picks[g], kept[g]) for g in GRAINS if picks[g].numel()]
            if not parts:  # a byte cap left no room for a block
                parts = [self._take(memory.stores["frame"][layer], picks["frame"], kept["frame"])]
            keys, values = (self._joined([part[i] for part in parts]) for i in (0, 1))
            positions = torch.cat([pos for _, _, pos, _ in parts], dim=1).long()
            prefix_ids = video.cache.stores[layer].token_ids()[0, :p]
            read.append(torch.cat([prefix_ids, *(i.to(prefix_ids) for _, _, _, i in parts)]))
            length = keys.shape[1]
            coded = not isinstance(keys, torch.Tensor)  # KIVI codes: dequantized as a forward reads them
            if coded:
                keys, values = CodedRun(keys), CodedRun(values)
            else:
                keys, values = keys.to(prefix_k.dtype), values.to(prefix_v.dtype)
            if contiguous:
                new = a.text_positions(video.video_start, length).to(positions.device)
                keys = CodedRun(keys.coded, a.rerotate, positions, new) if coded else a.rerotate(keys, positions, new)
            elif length:
                start = max(start, int(positions.max()) + 1)
            nbytes += keys.nbytes + values.nbytes
            layers.append(((prefix_k, keys), (prefix_v, values)))
        return View(layers=layers, start=max(start, video.video_start + length), nbytes=nbytes, ids=read)

    def _fit(
        self, video: VideoState, query: torch.Tensor, rows: dict[str, torch.Tensor], kept: dict[str, int]
    ) -> dict[str, torch.Tensor]:
        """Per granularity the blocks a question reads, in score order: the rule's counts for |M|, and under a
        budget in bytes the counts of a smaller |M| until the blocks' bytes in every layer, as taken (KIVI codes
        with their key rows), fit what the cap leaves beside the prefix (full precision always fits: the cap is
        the formula's bytes of |M|)."""
        per_frame, memory = video.grid[0] * video.grid[1], video.state[MEMORY]
        budget = self.budget
        while True:
            counts = self.rule.retrieved(per_frame, budget)
            picks = pick(query, rows, counts, self.rule.top_n, self.rule.rerank())
            if self.byte_cap is None or budget < 1:
                return picks
            room = self.byte_cap.cap - held_bytes(video)
            cost = sum(
                memory.stores[g][layer].nbytes_of(self._tokens(picks[g].sort().values, kept[g]))
                for g in GRAINS
                for layer in range(self.adapter.n_layers)
            )
            if cost <= room:
                return picks
            budget = min(budget - 1, budget * room // cost)

    @staticmethod
    def _tokens(blocks: torch.Tensor, size: int) -> torch.Tensor:
        """The token indices of ``blocks`` (``size`` tokens each), in the blocks' order."""
        return (blocks.view(-1, 1) * size + torch.arange(size)).view(-1)

    @staticmethod
    def _joined(runs: list[torch.Tensor | Coded]) -> torch.Tensor | Coded:
        """Runs of one part (keys or values) one after the other, tensors or KIVI codes."""
        out = runs[0]
        for run in runs[1:]:
            out = joined_tokens(out, run, 1)
        return out

    @classmethod
    def _take(
        cls, host: HostStore, blocks: torch.Tensor, size: int
    ) -> tuple[torch.Tensor | Coded, torch.Tensor | Coded, torch.Tensor, torch.Tensor]:
        """Keys, values, positions and stream ids of ``blocks`` (``size`` tokens each) of one store, copied to the
        accelerator as stored (KIVI codes under KIVI), in the order given (the rule's score order)."""
        ascending, order = blocks.sort()
        got = host.take(cls._tokens(ascending, size))
        back = torch.argsort(order)  # the rank of each block in ascending order, read in score order
        tokens = cls._tokens(back, size)

        def by_score(t: torch.Tensor | Coded) -> torch.Tensor | Coded:
            return t.index_select(1, tokens.to(t.device) if isinstance(t, torch.Tensor) else tokens)

        ids = got.ids.view(len(blocks), size)[back.to(got.ids.device)].flatten()
        return by_score(got.keys), by_score(got.values), by_score(got.positions), ids
