"""Qwen2-VL: smart resize, 2x2 patch merge, M-RoPE positions by the original rule, streamed chunk by chunk.

Two raw frames form one model frame (the temporal patch). The vision tower attends only within a frame, so encoding
a chunk on its own is exact. Positions follow the original Qwen2-VL rule: vision token (t, i, j) of a video starting
at position s gets (s + t, s + i, s + j); text after the video starts at max(all positions so far) + 1 (the session
tracks that maximum). transformers 5.24's own rope index differs for videos longer in time than wide; it is not used.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from infinipotv.models.base import ModelAdapter, VisionChunk, register_adapter, resize_normalize
from infinipotv.models.loading import load_pretrained
from infinipotv.models.settings import ModelError, ModelSettings
from infinipotv.models.tokenizer import qwen2_tokenizer

if TYPE_CHECKING:
    from transformers import PretrainedConfig

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
SYSTEM_PROMPT = "You are a helpful assistant."


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen's resize target: both sides multiples of ``factor``, area within [min_pixels, max_pixels], aspect kept."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def patchify(frames: torch.Tensor, patch: int, temporal: int, merge: int) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """``[T, C, H, W]`` normalised frames -> flattened patches ``[t*h*w, C*temporal*patch*patch]`` in the order the
    vision tower expects (merge blocks row-major inside each temporal step), and the grid (t, h, w) in patches."""
    t, c, h, w = frames.shape
    gt, gh, gw = t // temporal, h // patch, w // patch
    x = frames.reshape(gt, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gt * gh * gw, c * temporal * patch * patch), (gt, gh, gw)


def tiny_text_config(cfg: ModelSettings, mrope: bool = True) -> dict:
    """A Qwen2 language model small enough for CPU tests, with the real vocabulary size (shared by the families)."""
    o = cfg.options
    hidden, heads = int(o.get("hidden_size", 64)), int(o.get("num_heads", 4))
    rope = {"rope_type": "default", "rope_theta": 1e6}
    if mrope:
        half = hidden // heads // 2  # mrope_section must sum to head_dim / 2
        rope["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
    return dict(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=int(o.get("num_layers", 2)),
        num_attention_heads=heads,
        num_key_value_heads=int(o.get("num_kv_heads", 2)),
        max_position_embeddings=32768,
        rope_parameters=rope,
    )


def tiny_qwen2vl_config(cfg: ModelSettings) -> PretrainedConfig:
    """A Qwen2-VL small enough for CPU tests, with the real vocabulary and special-token ids."""
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(
        text_config=tiny_text_config(cfg),
        vision_config=dict(
            depth=1, embed_dim=32, hidden_size=int(cfg.options.get("hidden_size", 64)), num_heads=2, mlp_ratio=2
        ),
        tie_word_embeddings=True,
    )


@register_adapter
class Qwen2VLAdapter(ModelAdapter):
    family = "qwen2vl"
    frames_per_step = 2
    contiguous_positions = False  # M-RoPE: retrieved keys keep their (t, h, w) positions (docs/retrieval.md)
    model_class = "Qwen2VLForConditionalGeneration"

    @classmethod
    def load(cls, cfg: ModelSettings) -> "Qwen2VLAdapter":
        model, tokenizer = load_pretrained(cfg, cls.model_class, cls.tiny_config, qwen2_tokenizer)
        return cls(cfg, model, tokenizer)

    tiny_config = staticmethod(tiny_qwen2vl_config)

    @classmethod
    def check_frames(cls, cfg: ModelSettings, frame: tuple[int, int] | None) -> None:
        """Smart resize never makes a frame smaller than one 28x28 merged patch (below it, the cap is not held; at 0
        it divides by zero), and Qwen's processor refuses min_pixels above max_pixels."""
        least = 28 * 28
        if cfg.max_pixels < least:
            raise ModelError(
                f"model.max_pixels={cfg.max_pixels} must be >= {least} (one 28x28 patch, the smallest frame "
                f"model.family={cls.family} encodes), e.g. model.max_pixels={128 * least}"
            )
        if not 0 <= cfg.min_pixels <= cfg.max_pixels:
            raise ModelError(
                f"model.min_pixels={cfg.min_pixels} must lie in [0, model.max_pixels={cfg.max_pixels}]: lower it "
                f"(Qwen's default: {4 * least}) or raise model.max_pixels"
            )

    @classmethod
    def max_tokens_per_frame(cls, cfg: ModelSettings) -> int:
        """Upper bound of vision tokens per model frame: smart resize keeps the area under max_pixels (28x28 each)."""
        return max(1, cfg.max_pixels // (28 * 28))

    @property
    def text_config(self):
        return self.model.config.text_config

    @property
    def vision_config(self):
        return self.model.config.vision_config

    def language_model(self) -> torch.nn.Module:
        return self.model.model.language_model

    # -- prompt pieces: the Qwen2-VL chat template, split around the video ----------------------------------------
    def prefix_ids(self) -> list[int]:
        text = "<|vision_start|>"
        if self.cfg.use_chat_template:
            text = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{text}"
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def question_ids(self, prompt: str) -> list[int]:
        ids = self.tokenizer("<|vision_end|>", add_special_tokens=False).input_ids
        # annotation text is plain text: a "<|im_end|>" in a question must not close the user turn
        ids += self.tokenizer(prompt, add_special_tokens=False, split_special_tokens=True).input_ids
        if self.cfg.use_chat_template:
            ids += self.tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
        return ids

    # -- frames -> embeddings + positions -------------------------------------------------------------------------
    def text_positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n, device=self.device).expand(3, n)

    def frame_size(self, height: int, width: int) -> tuple[int, int]:
        """Qwen's smart resize: sides multiples of patch * merge, area within [min_pixels, max_pixels]."""
        vc = self.vision_config
        return smart_resize(
            height, width, vc.patch_size * vc.spatial_merge_size, self.cfg.min_pixels, self.cfg.max_pixels
        )

    def preprocess(self, frames: np.ndarray) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """Raw uint8 frames ``[N, H, W, 3]`` -> the vision tower's flattened patches and grid (t, h, w)."""
        vc = self.vision_config
        x = resize_normalize(frames, self.frame_size(frames.shape[1], frames.shape[2]), CLIP_MEAN, CLIP_STD)
        return patchify(x, vc.patch_size, vc.temporal_patch_size, vc.spatial_merge_size)

    def temporal_positions(self, t: torch.Tensor, fps: float) -> torch.Tensor:
        """Temporal M-RoPE index of model frames ``t`` (Qwen2-VL: the frame index itself)."""
        return t

    def encode_frames(self, frames: np.ndarray, first_frame: int, fps: float, video_start: int) -> VisionChunk:
        pixels, (gt, gh, gw) = self.preprocess(frames)
        grid_thw = torch.tensor([[gt, gh, gw]], device=self.device)
        with torch.inference_mode():
            feats = self.model.model.get_video_features(pixels.to(self.device, self.dtype), grid_thw).pooler_output
        embeds = torch.cat(list(feats), dim=0)
        m = self.vision_config.spatial_merge_size
        grid = (gh // m, gw // m)
        positions = self.frame_positions(first_frame, gt, grid, fps, video_start)
        return VisionChunk(embeds=embeds, positions=positions, grid=grid, n_frames=gt)

    def frame_positions(
        self, first_frame: int, n_frames: int, grid: tuple[int, int], fps: float, video_start: int
    ) -> torch.Tensor:
        """M-RoPE: token (i, j) of model frame t at ``video_start + (temporal_positions(t), i, j)``."""
        lh, lw = grid
        t0 = first_frame // self.frames_per_step
        t = self.temporal_positions(torch.arange(t0, t0 + n_frames, device=self.device), fps)
        ti = t.view(-1, 1, 1).expand(n_frames, lh, lw)
        hi = torch.arange(lh, device=self.device).view(1, -1, 1).expand(n_frames, lh, lw)
        wi = torch.arange(lw, device=self.device).view(1, 1, -1).expand(n_frames, lh, lw)
        return torch.stack([ti, hi, wi]).reshape(3, -1) + video_start
