"""StreamingTOM's streaming (the rule and its departures: :class:`infinipotv.compress.streamingtom.StreamingTOM`).

At a video's first chunk its cache layers become OQM layers (:class:`infinipotv.kv.oqm.OQMLayer`, the prefix
moved over). Per chunk: CTR cuts each frame to G tokens before the LLM (H3: the kept tokens keep their stream ids
and positions), the chunk is prefilled over the prefix and the newest window, and its tokens join the OQM as 4-bit
groups with their pre-RoPE group keys (un-rotated with ``adapter.rerotate``, H5). A question first runs a transient
forward of itself alone, on an empty cache (upstream's retrieval forward), whose per-layer pre-RoPE queries pick the
groups its prompt reads (H1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from infinipotv.compress.streamingtom import StreamingTOM, embedding_saliency, reduce_chunk
from infinipotv.kv.cache import StreamCache
from infinipotv.kv.oqm import OQMLayer, OQMStore, query_repr, top_groups
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.models.base import ModelAdapter, VisionChunk
from infinipotv.stream.method import Asked, StreamingMethod, View, streaming_method
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.trace import PassClock

if TYPE_CHECKING:
    from infinipotv.stream.video_state import VideoState


@streaming_method("streamingtom")
class StreamingTOMMethod(StreamingMethod):
    """CTR before the LLM, OQM as the memory, group retrieval at a question."""

    def __init__(
        self, policy: StreamingTOM, adapter: ModelAdapter, budget: int, c_ratio: float, byte_cap: ByteCap | None
    ) -> None:
        self.policy = policy
        self.adapter = adapter
        self.budget = budget  # the tokens a question retrieves (|M|), dequantized on the accelerator
        self.window = policy.window_tokens(budget)

    @classmethod
    def check_byte_cap(cls) -> None:
        """The OQM keeps every frame (it never evicts: upstream's design), so its bytes grow with the stream and
        no cap in bytes can hold: a budget is the tokens a question retrieves."""
        raise ValueError(
            "compress=streamingtom cannot hold compress.budget_mib: its OQM keeps every frame and grows with the "
            "stream; give compress.budget (tokens a question retrieves) instead, e.g. compress.budget_mib=null "
            "compress.budget=6000"
        )

    def to_oqm(self, video: VideoState, group_size: int) -> None:
        """Every layer's store becomes an OQM layer holding the prefix the session prefilled (at the first chunk,
        once G is known from the frame's grid)."""
        a = self.adapter

        def unrotate(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return a.rerotate(keys, positions, torch.zeros_like(positions))

        for layer in video.cache.layers:
            keys, values = layer.store.read()
            oqm = OQMStore(self.policy.bits, group_size, dtype=keys.dtype)
            oqm.append(keys, values, layer.store.token_ids()[0], None)
            layer.store = OQMLayer(oqm, self.window, unrotate)

    def check_chunk(self, tokens: int, frames: int) -> None:
        if tokens % frames:
            raise ValueError(f"a chunk of {frames} frames reached the LLM with {tokens} tokens, not G per frame")
        retain = self.policy.tokens_kept(tokens // frames)
        if self.budget < retain:
            raise ValueError(
                f"|M| = {self.budget} tokens cannot hold one retrieved group of G = {retain} tokens: raise "
                f"compress.budget or lower compress.retain"
            )

    def before_prefill(
        self, video: VideoState, chunk: VisionChunk, token_ids: torch.Tensor, transient: bool
    ) -> tuple[VisionChunk, torch.Tensor]:
        """CTR: each frame cut to G tokens, in their order, with their own ids and positions."""
        p, pol = chunk.tokens_per_frame, self.policy
        retain = pol.tokens_kept(p)
        if retain > p:
            raise ValueError(f"compress.retain={retain} is more than the model's {p} tokens per frame: lower it")
        if not transient and not isinstance(video.cache.layers[0].store, OQMLayer):
            self.to_oqm(video, retain)
        frames = chunk.embeds.view(-1, p, chunk.embeds.shape[-1])
        saliency = torch.stack([embedding_saliency(frame) for frame in frames])
        previous = video.state.get("ctr_previous")
        tokens, slots = reduce_chunk(
            frames, saliency, previous, int(token_ids[0]) // p, retain, pol.tau, pol.k, pol.beta, pol.seed
        )
        index = (torch.arange(frames.shape[0], device=slots.device)[:, None] * p + slots).flatten()
        cut = VisionChunk(tokens, chunk.positions[:, index], chunk.grid, chunk.n_frames)
        if not transient:
            video.state["ctr_previous"] = frames[-1]
            for layer in video.cache.layers:
                layer.store.positions = cut.positions
        return cut, token_ids[index.to(token_ids.device)]

    def after_chunk(
        self,
        video: VideoState,
        chunk: VisionChunk,
        token_ids: torch.Tensor,
        clock: PassClock,
        queries: list[torch.Tensor] | None,
    ) -> None:
        """Nothing to shape: the chunk's tokens joined the OQM in its prefill."""

    @torch.inference_mode()
    def view(self, video: VideoState, asked: Asked) -> View:
        """Each layer's retrieved groups, dequantized: [prefix | groups] is what the prompt reads; the question
        continues at the stream's next position (the groups keep their own). At most |M| tokens: floor(|M| / G)
        groups (upstream takes ceil(12544 / 50) = 251 groups, 12,550 tokens, 6 past its own limit)."""
        a = self.adapter
        scratch = StreamCache(a.n_layers, FullPrecisionStore)
        ids = asked.of(self.policy.query)
        with a.capture_queries() as captured, scratch.transient():
            a.forward(a.embed_text(ids), a.text_positions(0, len(ids)), scratch, logits=False)
        layers, ids, nbytes = [], [], 0
        for layer, queries in zip(video.cache.layers, captured):
            oqm = layer.store.oqm
            groups = None
            if oqm.n_groups:
                limit = self.budget // oqm.group_size * oqm.group_size  # whole groups within |M|
                groups = top_groups(query_repr(queries[0], a.n_kv_heads), oqm.group_keys(), limit, oqm.group_size)
            keys, values = oqm.read_groups(groups)
            layers.append((keys, values))
            ids.append(oqm.token_ids() if groups is None else oqm.group_ids(groups))
            nbytes += keys.nbytes + values.nbytes
        return View(layers, start=video.next_position, nbytes=nbytes, ids=ids)
