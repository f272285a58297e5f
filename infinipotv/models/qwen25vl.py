"""Qwen2.5-VL: the Qwen2-VL adapter with absolute-time temporal positions and a windowed vision tower.

What differs from Qwen2-VL, and why the rest is shared:
- Temporal M-RoPE index of model frame t is ``int(t * second_per_grid_t * tokens_per_second)`` with
  ``second_per_grid_t = temporal_patch_size / fps`` (fps = the rate the frames were sampled at), computed in float32
  in that order as the original rule does. The same frame index therefore gets a different position at another fps:
  positions encode seconds, not frame counts. Height/width indices and the text rule (max so far + 1) are unchanged.
- The vision tower uses window attention in most blocks and full attention in ``fullatt_block_indexes``; both are
  computed per temporal step (windows tile one frame, full blocks attend within one frame), so encoding a chunk on
  its own is still exact. The merger projects to ``out_hidden_size`` (the language model's width).
- Preprocessing (smart resize, CLIP normalisation, patch order) is the Qwen2-VL video processor's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from infinipotv.models.base import register_adapter
from infinipotv.models.qwen2vl import Qwen2VLAdapter, tiny_text_config
from infinipotv.models.settings import ModelSettings

if TYPE_CHECKING:
    from transformers import Qwen2_5_VLConfig


def tiny_qwen25vl_config(cfg: ModelSettings) -> Qwen2_5_VLConfig:
    """A Qwen2.5-VL small enough for CPU tests: two vision blocks (one windowed, one full), windows of 2x2 merged
    tokens so that test frames span several windows, and the released models' 2 tokens per second."""
    from transformers import Qwen2_5_VLConfig

    o = cfg.options
    return Qwen2_5_VLConfig(
        text_config=tiny_text_config(cfg),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=int(o.get("hidden_size", 64)),
            window_size=56,
            fullatt_block_indexes=[1],
            tokens_per_second=int(o.get("tokens_per_second", 2)),
        ),
        tie_word_embeddings=True,
    )


@register_adapter
class Qwen25VLAdapter(Qwen2VLAdapter):
    family = "qwen25vl"
    model_class = "Qwen2_5_VLForConditionalGeneration"
    tiny_config = staticmethod(tiny_qwen25vl_config)

    def temporal_positions(self, t: torch.Tensor, fps: float) -> torch.Tensor:
        """Seconds-based temporal index: ``int(t * (temporal_patch_size / fps) * tokens_per_second)``."""
        if not fps > 0:
            raise ValueError(f"fps={fps} must be > 0: Qwen2.5-VL's temporal positions are in seconds of video")
        vc = self.vision_config
        second_per_grid_t = torch.tensor(vc.temporal_patch_size / fps, dtype=torch.float32, device=t.device)
        return (t * second_per_grid_t * vc.tokens_per_second).long()
