"""The streaming method of ReKV and LiveVLM: a window in the cache, the rest offloaded, blocks retrieved per question.

After each chunk (:meth:`Retrieval.after_chunk`): the chunk's tokens are offloaded as they arrive (ReKV: with each
block's representative) or when they leave the window (LiveVLM), the cache keeps the prefix and the newest |C|
video tokens (the same in every head), and a bounded host memory is compacted by the rule (LiveVLM's buckets).
At a question (:meth:`Retrieval.view`, H1): a retrieval forward of the text the rule's ``query`` names (its
upstream's: the question's own text for ReKV, StreamKV and LiveVLM), in the transient mode on
what the cache holds, captures every layer's pre-RoPE queries; per layer the rule scores its blocks and picks them;
the picked tokens are copied to the accelerator, re-rotated to contiguous positions after the prefix where the rule
and the model allow (H5), and the prompt and answer read [prefix | retrieved | window if included]. Nothing is
written: the memory after the answer is the memory before it. On M-RoPE (Qwen2-VL, Qwen2.5-VL) retrieved keys keep
their original (t, h, w) positions, a choice: ReKV's and LiveVLM's position rules are written for 1-D RoPE, and
scattered blocks renumbered as one video (as StreamingVLM's shrink renumbers its contiguous window, its upstream's
rule) would be a rule neither upstream states.

Accelerator memory: |C| window tokens while streaming (plus a chunk, fewer than |M| - |C|), |C| + |M| - |C| = |M|
while answering (the window stays resident; the retrieval buffer is |M| - |C| tokens at most). The host holds the
offloaded tokens (every token for ReKV; the bounded long-term memory for LiveVLM).

Under KIVI (``quant=int2|int4|int8``) the host holds the offloaded tokens as KIVI codes grouped by retrieval block
(:mod:`infinipotv.kv.coded`), the retrieved blocks reach the accelerator as codes and are dequantized as a forward
reads them, and the view counts the codes it holds. Under a budget in bytes the buffer is sized by those bytes:
a layer reads the most of its picked blocks whose bytes fit what the cap leaves beside the stores (a block's key
rows make it dearer per token than KIVI's formula that turned the budget into |M|).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from infinipotv.compress import compressed_size
from infinipotv.compress.retrieval import RetrievalPolicy
from infinipotv.kv.coded import CodedRun, coding_of
from infinipotv.kv.host import HostStore, Offloaded
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import Asked, StreamingMethod, View, held_bytes, streaming_method
from infinipotv.stream.schedule import ByteCap, Schedule
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.video_state import VideoState

WINDOW_POSITIONS = "window_positions"  # VideoState.state key: [R, T] positions of the window's tokens


@streaming_method("retrieval")
class Retrieval(StreamingMethod):
    """Streams with a :class:`~infinipotv.compress.retrieval.RetrievalPolicy` (the rule) under |M| = ``budget``."""

    def __init__(
        self, policy: RetrievalPolicy, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.rule = policy
        self.adapter = adapter
        self.window = compressed_size(budget, c_ratio)  # |C|: the window's video tokens
        self.buffer = budget - self.window  # the retrieval buffer's tokens at a question
        self.schedule = Schedule.of(budget, c_ratio, byte_cap)  # the shared chunk check (a chunk < |M| - |C|)
        self.capacity = policy.host_capacity(self.buffer)
        self.capture_chunk_queries = self.capacity is not None  # compaction scores with the chunk's queries
        self.offload = getattr(policy, "offload", True)

    def check_chunk(self, tokens: int, frames: int) -> None:
        """The shared chunk check. A full chunk is a whole number of blocks (the policy's ``check_chunk`` refuses
        the config otherwise); a video's last chunk may be shorter, and its last block then partial: it is offloaded
        like any other, and a question never picks it (only whole blocks are candidates)."""
        self.schedule.check_chunk(tokens, frames)

    def block(self, tokens_per_frame: int) -> int:
        """Tokens per retrieval block: the rule's, at most the retrieval buffer (a chunk is always smaller than the
        buffer, so only a page larger than a small budget's buffer is cut)."""
        return min(self.rule.block_tokens(tokens_per_frame), self.buffer)

    def start(self, video: VideoState) -> None:
        device = self.adapter.device
        coding = coding_of(video.cache.stores[0])
        video.host = [
            HostStore(device, on_accelerator=not self.offload, coding=coding) for _ in range(self.adapter.n_layers)
        ]
        rows = self.adapter.text_positions(0, 1).shape[0]
        video.state[WINDOW_POSITIONS] = torch.empty(rows, 0, dtype=torch.long, device=device)

    def accelerator_bytes(self, video: VideoState) -> int:
        return sum(sum(store.nbytes().values()) for store in video.host if store.on_accelerator)

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
        n, p = chunk.embeds.shape[0], video.prefix_len
        positions = chunk.positions.long()
        window_positions = torch.cat([video.state[WINDOW_POSITIONS], positions], dim=1)
        drop = max(0, video.video_tokens - self.window)
        clock.bytes_before = held_bytes(video)
        if self.rule.cache_block_keys and len(video.host[0]) % self.block(chunk.tokens_per_frame):
            raise ValueError(  # a short chunk ends a video: blocks after a partial one would be misaligned
                "a chunk arrived after a chunk shorter than its blocks: only a video's last chunk may be short"
            )
        with clock.timed():
            for layer, (store, host) in enumerate(zip(video.cache.stores, video.host)):
                keys, values = store.read()
                if self.rule.offload_on_arrival:
                    block = self.block(chunk.tokens_per_frame)
                    host.append(self._arrival(keys[:, -n:], values[:, -n:], token_ids, positions, chunk), block)
                if drop:
                    if not self.rule.offload_on_arrival:
                        old = slice(p, p + drop)
                        ids = store.token_ids()[0, old]
                        host.append(Offloaded(keys[:, old], values[:, old], ids, window_positions[:, :drop]))
                    kept = torch.cat([torch.arange(p), torch.arange(p + drop, keys.shape[1])]).to(keys.device)
                    store.keep(kept.expand(keys.shape[0], -1))
                if self.capacity is not None and len(host) > self.capacity:
                    self._compact(host, queries[layer], positions, chunk.tokens_per_frame)
        video.state[WINDOW_POSITIONS] = window_positions[:, drop:]
        clock.passes += bool(drop)  # a step that evicted from the window records a pass (its offload time too)

    def _arrival(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        chunk: VisionChunk,
    ) -> Offloaded:
        """A chunk's tokens to offload, with their blocks' rows when the rule caches them (from pre-RoPE keys)."""
        rows = None
        if self.rule.cache_block_keys:
            pre_rope = self.adapter.rerotate(keys, positions, torch.zeros_like(positions))
            rows = self.rule.block_keys(pre_rope, self.block(chunk.tokens_per_frame))
        return Offloaded(keys, values, token_ids, positions, rows)

    def _compact(self, host: HostStore, queries: torch.Tensor, positions: torch.Tensor, per_frame: int) -> None:
        """Hold the host memory to its capacity: the rule scores it with the chunk's queries, rotated at their
        positions (attention as the forward computed it)."""
        rotated = self.adapter.rerotate(queries, torch.zeros_like(positions), positions)
        kept = self.rule.compact(host.stored("keys").to(rotated.device), rotated, self.capacity, per_frame)
        host.keep(kept)

    # -- at a question --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def view(self, video: VideoState, asked: Asked) -> View | None:
        a, cache = self.adapter, video.cache
        if not len(video.host[0]):
            return None
        ids = asked.of(self.rule.query)
        with a.capture_queries() as captured, cache.transient():
            a.forward(a.embed_text(ids), a.text_positions(video.next_position, len(ids)), cache, logits=False)
        return self.retrieved(video, [layer[0] for layer in captured])

    def retrieved(self, video: VideoState, queries: list[torch.Tensor]) -> View:
        """The view of [prefix | the blocks each layer's pre-RoPE ``queries [H_q, N, D]`` pick | window if
        included], the blocks copied to the accelerator and re-rotated where the rule and the model allow. Layers
        that read fewer tokens than the longest (:meth:`counts`) read them right-aligned before the question."""
        a, cache, p = self.adapter, video.cache, video.prefix_len
        contiguous = self.rule.positions == "contiguous" and a.contiguous_positions
        block = self.block(video.grid[0] * video.grid[1])
        candidates = [self._candidates(video, store, host, block) for store, host in zip(cache.stores, video.host)]
        counts = self.counts(queries, candidates)
        room = self.room(video)
        # a coded run moved to contiguous positions holds its old and new positions (int64 rows) for its reads
        moved = 2 * 8 * a.text_positions(0, 1).shape[0] if contiguous and video.host[0].coding is not None else 0
        tokens = [
            self._picked(host, q, rows, n, block, room, moved)
            for host, q, (rows, _), n in zip(video.host, queries, candidates, counts)
        ]
        window = len(cache.stores[0]) - p if self.rule.include_window else 0  # its length, not a decoded read
        longest = max(len(t) for t in tokens) + window
        layers, ids, nbytes = [], [], 0
        for store, host, picks in zip(cache.stores, video.host, tokens):
            picked = host.take(picks)  # one layer's copy on the accelerator at a time, before its view tensors
            stored_k, stored_v = store.read()
            stored_ids = store.token_ids()[0]
            read = (stored_ids[:p], picked.ids.to(stored_ids), *([stored_ids[p:]] if self.rule.include_window else []))
            ids.append(torch.cat(read))
            coded = not isinstance(picked.keys, torch.Tensor)  # KIVI codes: dequantized as a forward reads them
            if coded:
                keys, values = CodedRun(picked.keys), CodedRun(picked.values)
            else:
                keys, values = picked.keys.to(stored_k.dtype), picked.values.to(stored_v.dtype)
            window_k, window_v = stored_k[:, p:], stored_v[:, p:]  # read in place
            if contiguous:
                length = keys.shape[1] + window
                new = a.text_positions(video.video_start + longest - length, length)
                old, moved = picked.positions.long(), new[:, : keys.shape[1]]
                keys = CodedRun(picked.keys, a.rerotate, old, moved) if coded else a.rerotate(keys, old, moved)
                if self.rule.include_window:  # moved keys are new tensors: counted
                    window_k = a.rerotate(window_k, video.state[WINDOW_POSITIONS], new[:, keys.shape[1] :])
                    nbytes += window_k.nbytes
            nbytes += keys.nbytes + values.nbytes  # the retrieval buffer: the view's own tensors
            parts_k, parts_v = (stored_k[:, :p], keys), (stored_v[:, :p], values)
            if self.rule.include_window:
                parts_k, parts_v = (*parts_k, window_k), (*parts_v, window_v)
            layers.append((parts_k, parts_v))
        start = video.video_start + longest if contiguous else video.next_position
        return View(layers=layers, start=start, nbytes=nbytes, ids=ids)

    def counts(self, queries: list[torch.Tensor], candidates: list[tuple[torch.Tensor, int]]) -> list[int]:
        """Blocks each layer reads, from its pre-RoPE ``queries`` and its ``(rows, n_select)`` candidates: the
        buffer's, the same in every layer (a rule whose layers spend it unevenly, StreamKV's, overrides this)."""
        return [n for _, n in candidates]

    def _candidates(self, video: VideoState, store, host: HostStore, block: int) -> tuple[torch.Tensor, int]:
        """One layer's candidate block rows and how many of them fit the buffer. Only whole blocks are candidates;
        with the window in the context, a block any of whose tokens the window holds is not one (each layer then
        reads the same number of tokens)."""
        if self.rule.cache_block_keys:
            rows, ids = host.block_keys(), None
        else:
            # Scored on the accelerator, as compaction is: one layer's offloaded keys cross at a time (a CPU: no copy).
            device = self.adapter.device
            keys, positions = host.stored("keys").to(device), host.stored("positions").to(device)
            pre_rope = self.adapter.rerotate(keys, positions, torch.zeros_like(positions))
            rows, ids = self.rule.block_keys(pre_rope, block), host.stored("ids")
        n_blocks = len(host) // block
        rows = rows[:n_blocks]
        if self.rule.include_window and self.rule.offload_on_arrival and len(store) > video.prefix_len:
            first_window_id = int(store.token_ids()[0, video.prefix_len])
            ids = host.stored("ids") if ids is None else ids
            last_ids = ids[: n_blocks * block].view(n_blocks, block).max(dim=1).values
            n_blocks = int((last_ids < first_window_id).sum())  # blocks are in time order: a prefix of them
            rows = rows[:n_blocks]
        return rows, self.rule.blocks_to_retrieve(n_blocks, self.buffer, block)

    def room(self, video: VideoState) -> int | None:
        """Under a budget in bytes, the bytes one layer's retrieved keys and values may take: what the cap leaves
        beside the stores and the method's accelerator state, shared by the layers (their windows hold the same
        tokens). None without a byte cap. Full precision always fits (the cap is the formula's bytes of |M|)."""
        cap = self.schedule.byte_cap
        if cap is None:
            return None
        return (cap.cap - held_bytes(video) - self.accelerator_bytes(video)) // len(video.host)

    def _picked(
        self,
        host: HostStore,
        queries: torch.Tensor,
        rows: torch.Tensor,
        n_select: int,
        block: int,
        room: int | None = None,
        moved: int = 0,
    ) -> torch.Tensor:
        """Ascending indices into ``host`` of the tokens of the ``n_select`` blocks one layer reads: under a byte cap
        (``room``), the most blocks the rule picks whose bytes, as taken (plus ``moved`` bytes a token), fit it."""
        while n_select >= 1:
            picked = self.select(host, queries, rows, n_select, block).to("cpu")
            tokens = (picked.view(-1, 1) * block + torch.arange(block)).view(-1)
            if room is None:
                return tokens
            cost = host.nbytes_of(tokens) + moved * len(tokens)
            if cost <= room:
                return tokens
            n_select = min(n_select - 1, n_select * room // cost)
        return torch.empty(0, dtype=torch.long)

    def select(
        self, host: HostStore, queries: torch.Tensor, rows: torch.Tensor, n_select: int, block: int
    ) -> torch.Tensor:
        """Ascending indices of the ``n_select`` blocks of ``host`` a layer reads, from its block ``rows``: the
        rule's selection (a method whose rule reads more than the rows, as WeaveTime's keys, overrides this)."""
        return self.rule.select(queries, rows, n_select)
