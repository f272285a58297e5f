"""Released models' shapes, written out, and models of those shapes with random weights behind the real adapters.

The GPU benches (``bench.gpu_table_a4``, ``bench.gpu_peers --random-weights``) need no checkpoint: a model is built
from the config values below and initialised at random directly on the device, then wrapped in the project's own
adapter (``infinipotv/models``), with the adapter settings of ``conf/model/FAMILY.yaml``. Numbers measured on such a
model are memory and timing only: random weights answer nothing.

A shape is ``{"text": ..., "vision": ..., "top": ...}``: the text and vision sub-configs and the top-level keys, as
transformers 5.24 spells them (``rope_parameters``, not ``rope_theta``/``rope_scaling``). ``SHAPES[NAME][FAMILY]``:
``7b`` the released 7B checkpoints, ``tiny`` the same geometry (patch and image sizes, vocabulary, placeholder ids)
with tiny widths and depths, for the CPU tests.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.common import model_settings
from infinipotv.models import ADAPTERS, ModelAdapter
from infinipotv.models.llava_ov import VISION_TOKENS, llava_tokenizer
from infinipotv.models.tokenizer import qwen2_tokenizer

Shape = dict[str, dict[str, Any]]

# Qwen2-VL-7B-Instruct's config.json (text and vision towers), written out: nothing is fetched.
QWEN2VL_7B: Shape = {
    "text": dict(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    ),
    "vision": dict(
        depth=32,
        embed_dim=1280,
        hidden_size=3584,
        hidden_act="quick_gelu",
        mlp_ratio=4,
        num_heads=16,
        in_channels=3,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    ),
    "top": dict(tie_word_embeddings=False),
}
QWEN2VL_TINY: Shape = {
    "text": dict(
        vocab_size=151936,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]},
    ),
    "vision": dict(depth=1, embed_dim=32, hidden_size=128, num_heads=2, mlp_ratio=2),
    "top": dict(tie_word_embeddings=False),
}

# llava-hf/llava-onevision-qwen2-7b-ov-hf's config.json, written out: Qwen2-7B text (Qwen2-VL-7B's text tower with
# its own vocabulary and 1-D RoPE), SigLIP so400m-patch14-384 as the checkpoint ships it (26 layers: the last of the
# 27 is not used, vision_use_head false). Confirmed against transformers 5.24's LlavaOnevisionConfig, whose docstring
# names this checkpoint: the SigLIP values and the top-level defaults (gelu projector with bias,
# vision_feature_layer -1, "full" features, untied embeddings, placeholder ids 151646/151647); vocab_size 152128 is
# the released config.json's (with it the model has the model card's 8.03B parameters: tests/bench). Placeholder ids
# are the ones the offline tokenizer gives (see _llava_ov).
LLAVA_OV_7B: Shape = {
    "text": {
        **QWEN2VL_7B["text"],
        "vocab_size": 152128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
        "tie_word_embeddings": False,
    },
    "vision": dict(
        hidden_size=1152,
        intermediate_size=4304,
        num_hidden_layers=26,
        num_attention_heads=16,
        patch_size=14,
        image_size=384,
        vision_use_head=False,
    ),
    "top": dict(
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        projector_hidden_act="gelu",
        multimodal_projector_bias=True,
        tie_word_embeddings=False,
    ),
}
LLAVA_OV_TINY: Shape = {
    "text": {**QWEN2VL_TINY["text"], "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
    "vision": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        patch_size=14,
        image_size=384,
        vision_use_head=False,
    ),
    "top": LLAVA_OV_7B["top"],
}

SHAPES: dict[str, dict[str, Shape]] = {
    "7b": {"qwen2vl": QWEN2VL_7B, "llava_ov": LLAVA_OV_7B},
    "tiny": {"qwen2vl": QWEN2VL_TINY, "llava_ov": LLAVA_OV_TINY},
}


def _qwen2vl(shape: Shape):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    # the placeholder ids are Qwen2VLConfig's defaults, which the offline Qwen2 tokenizer gives too
    config = Qwen2VLConfig(text_config=shape["text"], vision_config=shape["vision"], **shape["top"])
    return Qwen2VLForConditionalGeneration, config


def _llava_ov(shape: Shape):
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration

    # The released checkpoint's ids are 151646/151647 (its tokenizer's <image>/<video>); the offline tokenizer the
    # adapter uses gives others (151657/151658): the ids must be the tokenizer's, as in tiny_llava_ov_config.
    image_id, video_id = llava_tokenizer().convert_tokens_to_ids(list(VISION_TOKENS))
    config = LlavaOnevisionConfig(
        text_config=dict(model_type="qwen2", **shape["text"]),
        vision_config=dict(model_type="siglip_vision_model", **shape["vision"]),
        image_token_index=image_id,
        video_token_index=video_id,
        **shape["top"],
    )
    return LlavaOnevisionForConditionalGeneration, config


FAMILIES = {"qwen2vl": _qwen2vl, "llava_ov": _llava_ov}
TOKENIZERS = {"qwen2vl": qwen2_tokenizer, "llava_ov": llava_tokenizer}  # what each adapter's load() gives it


def build_model(family: str, shape: Shape, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """transformers' model of ``family`` in ``shape``, random weights created on ``device`` (``meta``: no memory)
    in ``dtype``, SDPA attention."""
    model_class, config = FAMILIES[family](shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = model_class._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def build_adapter(family: str, shape: Shape, device: torch.device, dtype: torch.dtype) -> ModelAdapter:
    """A ``family`` model of the given shape (:func:`build_model`) behind its real adapter, with the settings of
    ``conf/model/FAMILY.yaml`` (no checkpoint)."""
    cfg = model_settings(family, checkpoint=None, dtype=str(dtype).removeprefix("torch."), device=str(device))
    return ADAPTERS[family](cfg, build_model(family, shape, device, dtype), TOKENIZERS[family]())
