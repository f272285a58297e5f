"""LLaVA-OneVision (Qwen2 language model, SigLIP vision tower): 196 tokens per frame, plain 1-D positions.

Each frame is encoded on its own (SigLIP attends within one image), projected, and bilinearly pooled from 27x27 to
ceil(27/2) = 14x14 patches, so chunked encoding is exact and a frame is a true 14x14 grid for the policies.
After the last frame the model appends one learned ``image_newline`` vector (transformers' ``get_video_features``;
the original "one_token" newline position). That vector is not part of any frame: the adapter drops it from the
frame chunks and puts it first in the question suffix, where the ``<video>`` placeholder id stands for it (exactly
the placeholder it fills in a one-shot forward). So the compressible region holds only frame tokens, and a question
asked mid-stream sees the newline after the frames streamed so far.
The prompt is the original ChatML ("qwen_1_5") conversation: system turn, ``<|im_start|>user\\n<video>\\n{question}``.
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch

from infinipotv.models.base import ModelAdapter, VisionChunk, register_adapter, resize_normalize
from infinipotv.models.loading import load_pretrained
from infinipotv.models.qwen2vl import SYSTEM_PROMPT, tiny_text_config
from infinipotv.models.settings import ModelError, ModelSettings
from infinipotv.models.tokenizer import qwen2_tokenizer

if TYPE_CHECKING:
    from transformers import LlavaOnevisionConfig, PreTrainedTokenizerFast

SIGLIP_MEAN = (0.5, 0.5, 0.5)  # SigLIP's normalisation (the released processor configs), not CLIP's
SIGLIP_STD = (0.5, 0.5, 0.5)
VISION_TOKENS = ("<image>", "<video>")  # LLaVA adds them after Qwen2's vocabulary
TINY_VISION = {"image_size": 42, "patch_size": 6}  # 7x7 patches -> 4x4 pooled: odd, like the real 27 -> 14
REAL_VISION = {"image_size": 384, "patch_size": 14}  # every released OneVision checkpoint (SigLIP so400m-384/14)


@lru_cache(maxsize=1)
def llava_tokenizer() -> PreTrainedTokenizerFast:
    """The offline Qwen2 tokenizer plus ``<image>``/``<video>`` (a copy: the shared Qwen2 tokenizer is untouched)."""
    from transformers import AddedToken

    tokenizer = copy.deepcopy(qwen2_tokenizer())
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS], special_tokens=True)
    return tokenizer


def tiny_llava_ov_config(cfg: ModelSettings) -> LlavaOnevisionConfig:
    """A LLaVA-OneVision small enough for CPU tests; its placeholder ids are the ones :func:`llava_tokenizer` gives."""
    from transformers import LlavaOnevisionConfig

    o, tokenizer = cfg.options, llava_tokenizer()
    image_id, video_id = tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))
    return LlavaOnevisionConfig(
        text_config=dict(model_type="qwen2", **tiny_text_config(cfg, mrope=False)),
        vision_config=dict(
            model_type="siglip_vision_model",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=int(o.get("image_size", TINY_VISION["image_size"])),
            patch_size=int(o.get("patch_size", TINY_VISION["patch_size"])),
            vision_use_head=False,
        ),
        image_token_index=image_id,
        video_token_index=video_id,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )


def pooled_side(image_size: int, patch_size: int) -> int:
    """Tokens per side of a frame after the 2x bilinear pooling: ceil(patches per side / 2)."""
    return math.ceil(image_size // patch_size / 2)


@register_adapter
class LlavaOnevisionAdapter(ModelAdapter):
    family = "llava_ov"
    frames_per_step = 1

    @classmethod
    def load(cls, cfg: ModelSettings) -> "LlavaOnevisionAdapter":
        if not cfg.use_chat_template:
            raise ModelError(
                "model.use_chat_template=false is not supported for model.family=llava_ov: the video "
                "needs the user turn before it; keep model.use_chat_template=true"
            )
        model, tokenizer = load_pretrained(
            cfg,
            "LlavaOnevisionForConditionalGeneration",
            tiny_llava_ov_config,
            llava_tokenizer,
        )
        return cls(cfg, model, tokenizer)

    @classmethod
    def max_tokens_per_frame(cls, cfg: ModelSettings) -> int:
        vision = {**(TINY_VISION if cfg.tiny else REAL_VISION), **cfg.options}
        return pooled_side(int(vision["image_size"]), int(vision["patch_size"])) ** 2

    @property
    def text_config(self):
        return self.model.config.text_config

    @property
    def vision_config(self):
        return self.model.config.vision_config

    @property
    def newline_id(self) -> int:
        """The ``<video>`` placeholder id, standing for the image_newline vector at the start of the question."""
        return self.model.config.video_token_id

    def language_model(self) -> torch.nn.Module:
        return self.model.model.language_model

    # -- prompt pieces: ChatML split around the video --------------------------------------------------------------
    def prefix_ids(self) -> list[int]:
        text = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def question_ids(self, prompt: str) -> list[int]:
        # annotation text is plain text: a "<|im_end|>" or "<video>" in a question is not a control token
        text = self.tokenizer(f"\n{prompt}", add_special_tokens=False, split_special_tokens=True).input_ids
        turn = self.tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
        return [self.newline_id] + text + turn

    def embed_text(self, ids: list[int]) -> torch.Tensor:
        """Token embeddings, with the image_newline vector where the ``<video>`` placeholder stands."""
        embeds = super().embed_text(ids)
        is_newline = torch.tensor(ids, device=self.device).eq(self.newline_id).unsqueeze(-1)
        return torch.where(is_newline, self.model.model.image_newline.to(embeds.dtype), embeds)

    # -- frames -> embeddings + positions -------------------------------------------------------------------------
    def text_positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n, device=self.device).view(1, n)

    def frame_size(self, height: int, width: int) -> tuple[int, int]:
        """The tower's square input: frames are squashed to it, as the released processor does (no crop, no
        aspect ratio kept)."""
        size = self.vision_config.image_size
        return size, size

    def preprocess(self, frames: np.ndarray) -> torch.Tensor:
        """Raw uint8 frames ``[N, H, W, 3]`` -> ``[N, 3, S, S]`` normalised (:meth:`frame_size`)."""
        return resize_normalize(frames, self.frame_size(*frames.shape[1:3]), SIGLIP_MEAN, SIGLIP_STD)

    @property
    def grid(self) -> tuple[int, int]:
        side = pooled_side(self.vision_config.image_size, self.vision_config.patch_size)
        return side, side

    def encode_frames(self, frames: np.ndarray, first_frame: int, fps: float, video_start: int) -> VisionChunk:
        pixels = self.preprocess(frames).unsqueeze(0).to(self.device, self.dtype)
        with torch.inference_mode():
            feats = self.model.model.get_video_features(pixels).pooler_output
        embeds = feats[0, :-1]  # the trailing image_newline goes to the question suffix (see the module docstring)
        positions = self.frame_positions(first_frame, len(frames), self.grid, fps, video_start)
        return VisionChunk(embeds=embeds, positions=positions, grid=self.grid, n_frames=len(frames))

    def frame_positions(
        self, first_frame: int, n_frames: int, grid: tuple[int, int], fps: float, video_start: int
    ) -> torch.Tensor:
        """Sequential 1-D positions: frame t's tokens follow frame t - 1's."""
        per_frame = grid[0] * grid[1]
        start = video_start + first_frame * per_frame
        return torch.arange(start, start + n_frames * per_frame, device=self.device).view(1, -1)
