"""The model adapter contract: everything model-specific the streaming session needs, and nothing more.

The session knows no model names. An adapter turns a chunk of raw frames into input embeddings and position ids
*causally* (it is told where the chunk starts, never how many frames follow), builds the prompt pieces around the
video (system prefix, question, answer prefix), and runs the language model over embeddings with a cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from infinipotv.models.settings import ModelSettings
from infinipotv.registry import Registry

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class VisionChunk:
    """A chunk of frames ready to prefill: ``embeds [N, hidden]``, ``positions [R, N]`` (R = 3 for M-RoPE, 1 for
    plain RoPE), ``grid`` = (h, w) vision tokens per model frame (row-major), ``n_frames`` model frames."""

    embeds: torch.Tensor
    positions: torch.Tensor
    grid: tuple[int, int]
    n_frames: int

    @property
    def tokens_per_frame(self) -> int:
        return self.grid[0] * self.grid[1]


def resize_frames(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Raw uint8 frames ``[N, H, W, 3]`` resized to ``size`` (h, w), still uint8, as the families' processors do it.

    Bicubic with antialiasing, then rounded and clamped to 0..255 because the released processors resize uint8
    images (torchvision or PIL) before rescaling; skipping that step shifts border pixels by up to a few levels.
    Frames already at ``size`` come back as they are, so frames resized as they are decoded are not resized again.
    """
    if tuple(size) == tuple(frames.shape[1:3]):
        return frames
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False).round().clamp(0, 255)
    return x.to(torch.uint8).permute(0, 2, 3, 1).numpy()


def resize_normalize(
    frames: np.ndarray, size: tuple[int, int], mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """Raw uint8 frames ``[N, H, W, 3]`` -> resized (:func:`resize_frames`), normalised ``[N, 3, h, w]`` float32."""
    x = torch.from_numpy(np.ascontiguousarray(resize_frames(frames, size))).permute(0, 3, 1, 2).float()
    mean_t = torch.tensor(mean).view(1, 3, 1, 1)
    std_t = torch.tensor(std).view(1, 3, 1, 1)
    return (x / 255.0 - mean_t) / std_t


class ModelAdapter(ABC):
    """One model family. Subclasses register with :func:`register_adapter` and are built from
    :class:`~infinipotv.models.settings.ModelSettings` (the ``model=`` config)."""

    family: ClassVar[str]
    #: Raw frames merged into one model frame (Qwen's temporal patch: 2). The session feeds multiples of it.
    frames_per_step: ClassVar[int] = 1

    def __init__(self, cfg: ModelSettings, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        self.cfg = cfg
        self.model = model.eval()
        self.tokenizer = tokenizer
        from infinipotv.kv.cache import right_align_mask  # transformers' cache code: not needed to check a config

        for attention in self.attention_layers():  # views of per-layer lengths (StreamKV's adaptive retrieval)
            if not getattr(attention, "right_aligns_masks", False):  # one hook per module, however many adapters
                attention.register_forward_pre_hook(right_align_mask, with_kwargs=True)
                attention.right_aligns_masks = True

    @classmethod
    @abstractmethod
    def load(cls, cfg: ModelSettings) -> "ModelAdapter":
        """Build the adapter: a tiny seeded model or a local checkpoint (never a download)."""

    @classmethod
    def check_frames(cls, cfg: ModelSettings, frame: tuple[int, int] | None) -> None:
        """Fail at startup (a :class:`ModelError` naming the option) on frame settings the adapter cannot encode
        with, which would otherwise fail every question alike. ``frame``: the benchmark's (height, width) when the
        config alone fixes it (a generated benchmark), else None. Default: any."""

    @classmethod
    @abstractmethod
    def max_tokens_per_frame(cls, cfg: ModelSettings) -> int:
        """Most vision tokens one model frame can produce under this config (validates chunk sizes at startup)."""

    # -- shape of the cache ---------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def text_config(self):
        """The language model's config (layers, heads, head_dim)."""

    @property
    def n_layers(self) -> int:
        return self.text_config.num_hidden_layers

    @property
    def n_kv_heads(self) -> int:
        return self.text_config.num_key_value_heads

    @property
    def head_dim(self) -> int:
        tc = self.text_config
        return getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        extra = self.model.generation_config.eos_token_id if self.model.generation_config else None
        ids.update(extra if isinstance(extra, list) else [extra] if extra is not None else [])
        return {i for i in ids if i is not None}

    # -- prompt pieces --------------------------------------------------------------------------------------------
    @abstractmethod
    def prefix_ids(self) -> list[int]:
        """Token ids before the first vision token (system prompt ... vision start). Never compressed."""

    @abstractmethod
    def question_ids(self, prompt: str) -> list[int]:
        """Token ids after the video: end of the vision span, the user's question, the assistant's turn."""

    def text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` alone, no template around it: what a retrieval forward of the bare question reads
        (ReKV: ``tokenizer(input_text['question'])``). Annotation text is plain text: a special token's string in it
        is not a control token."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # -- embeddings and positions ---------------------------------------------------------------------------------
    def embed_text(self, ids: list[int]) -> torch.Tensor:
        table = self.model.get_input_embeddings()
        return table(torch.tensor(ids, device=self.device, dtype=torch.long))

    @abstractmethod
    def text_positions(self, start: int, n: int) -> torch.Tensor:
        """``[R, n]`` positions of n text tokens starting at position ``start``."""

    def frame_size(self, height: int, width: int) -> tuple[int, int]:
        """The (h, w) the vision tower takes raw frames of ``height`` x ``width`` at; frames can be resized to it
        as they are decoded (:func:`resize_frames`), which keeps the host's frames small. Default: unchanged."""
        return height, width

    @abstractmethod
    def encode_frames(self, frames: np.ndarray, first_frame: int, fps: float, video_start: int) -> VisionChunk:
        """Encode raw frames ``[N, H, W, 3]`` uint8 (N a multiple of ``frames_per_step``) that start at raw frame
        index ``first_frame`` of a stream sampled at ``fps``; ``video_start`` is the position of the first vision
        token of the video. Must be causal: the result may not depend on frames outside the chunk."""

    @abstractmethod
    def frame_positions(
        self, first_frame: int, n_frames: int, grid: tuple[int, int], fps: float, video_start: int
    ) -> torch.Tensor:
        """``[R, n_frames * h * w]``: the positions of ``n_frames`` model frames of ``grid`` = (h, w) tokens that
        start at raw frame ``first_frame`` of a video sampled at ``fps`` whose first vision token sits at
        ``video_start``, by the model's own rule. :meth:`encode_frames` places its chunks with it; StreamingVLM's
        ``pos_mode=shrink`` renumbers its memory with it, as a video that began at its oldest frame (H5)."""

    # -- the language model ---------------------------------------------------------------------------------------
    @abstractmethod
    def language_model(self) -> torch.nn.Module:
        """The decoder that takes ``inputs_embeds``, ``position_ids`` and ``cache``."""

    @torch.inference_mode()
    def forward(
        self, embeds: torch.Tensor, positions: torch.Tensor, cache: Cache, logits: bool = True
    ) -> torch.Tensor | None:
        """Run ``embeds [N, hidden]`` at ``positions [R, N]`` on top of ``cache``; the last token's logits ``[1, V]``.

        ``logits=False`` (a prefill whose logits nobody reads) skips the vocabulary projection and returns None.
        """
        out = self.language_model()(
            inputs_embeds=embeds.unsqueeze(0).to(self.dtype),
            position_ids=self._position_arg(positions),
            cache=cache,
            use_cache=True,
        )
        return self.model.lm_head(out.last_hidden_state[0, -1:]).float() if logits else None

    def _position_arg(self, positions: torch.Tensor) -> torch.Tensor:
        """The decoder's position_ids layout: ``[R, 1, N]`` for M-RoPE, ``[1, N]`` for plain RoPE."""
        return positions.unsqueeze(1) if positions.shape[0] == 3 else positions

    # -- positions of cached keys (H5) and the queries of a forward (H1, H4) ------------------------------------------
    #: Whether retrieved keys may be read at contiguous text positions after the prefix (ReKV, LiveVLM): a 1-D RoPE
    #: gives every token one position, so a run of retrieved tokens reads as a contiguous sequence. Under M-RoPE a
    #: vision token's (t, h, w) is not a text position, so retrieval keeps the original positions there (a choice:
    #: ReKV's released code re-positions only 1-D RoPE models). Frames renumbered as a video by the model's own
    #: rule (:meth:`frame_positions`, StreamingVLM's shrink) need no such flag: every family defines it.
    contiguous_positions: ClassVar[bool] = True

    @torch.inference_mode()
    def rerotate(self, keys: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """Keys ``[H, N, D]`` cached after RoPE at positions ``old [R, N]``, as RoPE at ``new [R, N]`` makes them.

        A RoPE rotation at position a then one by b - a is the rotation at b (angles add), per frequency and, for
        M-RoPE, per (t, h, w) section: so the decoder's own rotary embedding at ``new - old`` moves a key exactly
        (up to float rounding; computed in fp32). ``new`` all zero gives the pre-RoPE key."""
        rotary = self.language_model().rotary_emb
        work = keys.float()
        cos, sin = rotary(work, self._position_arg((new - old).to(keys.device)))
        scale = float(getattr(rotary, "attention_scaling", 1.0))  # applied to cos/sin once, not per rotation
        cos, sin = cos[0].float() / scale, sin[0].float() / scale  # [N, D], shared by the heads
        half = work.shape[-1] // 2
        turned = torch.cat([-work[..., half:], work[..., :half]], dim=-1)
        return (work * cos + turned * sin).to(keys.dtype)

    def attention_layers(self) -> list[torch.nn.Module]:
        """The decoder layers' attention modules (each with ``q_proj``), in layer order."""
        return [layer.self_attn for layer in self.language_model().layers]

    @contextmanager
    def capture_queries(self) -> Iterator[list[list[torch.Tensor]]]:
        """Within the block, every forward records each layer's pre-RoPE queries ``[H_q, N, D]`` (the ``q_proj``
        output, bias included), appended per forward: ``captured[layer]`` is the list of what each forward gave.
        A retrieval forward of the question (H1) or a score forward (H4) reads them; nothing else changes."""
        captured: list[list[torch.Tensor]] = [[] for _ in range(self.n_layers)]
        heads, dim = self.text_config.num_attention_heads, self.head_dim

        def hook(layer: int):
            def record(_module, _inputs, output: torch.Tensor) -> None:
                captured[layer].append(output[0].view(output.shape[1], heads, dim).transpose(0, 1))

            return record

        handles = [attn.q_proj.register_forward_hook(hook(i)) for i, attn in enumerate(self.attention_layers())]
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()


ADAPTERS: Registry[type[ModelAdapter]] = Registry("model family")


def register_adapter(cls: type[ModelAdapter]) -> type[ModelAdapter]:
    """Class decorator: make an adapter buildable by its ``family`` name."""
    return ADAPTERS.add(cls.family, cls)
