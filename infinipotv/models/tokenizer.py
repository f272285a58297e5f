"""The real Qwen2 tokenizer, rebuilt offline from the BPE ranks that ship in the ``qwen-agent`` wheel.

No tokenizer can be downloaded at run time. The ``qwen.tiktoken`` file in ``qwen-agent`` holds Qwen2's exact
byte-level BPE ranks (ids 0..151642); the 14 special tokens of Qwen2-VL follow at 151643.. as in the model configs.
The conversion takes ~30 s, so the result is cached as ``tokenizer.json`` under the harness's cache folder.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from infinipotv.cachedir import cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

# Qwen2's pre-tokenizer: like cl100k but digits split one by one.
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""  # noqa: E501
QWEN2_VL_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)  # ids 151643..151656


def _ranks_file() -> Path:
    # find_spec locates the package without importing it (importing qwen_agent needs openai & co., not installed).
    spec = importlib.util.find_spec("qwen_agent")
    path = Path(spec.submodule_search_locations[0]) / "utils" / "qwen.tiktoken" if spec else None
    if path is None or not path.exists():
        raise RuntimeError(
            "The Qwen2 tokenizer is rebuilt from the BPE ranks in the qwen-agent wheel, which is not installed. "
            "Install it with: pip install --no-deps qwen-agent==0.0.34"
        )
    return path


@lru_cache(maxsize=1)
def qwen2_tokenizer() -> PreTrainedTokenizerFast:
    """Qwen2/Qwen2-VL tokenizer (ids identical to the released one), built once and cached on disk."""
    from transformers import PreTrainedTokenizerFast

    cached = cache_dir() / "qwen2_tokenizer.json"
    if not cached.exists():
        from transformers.convert_slow_tokenizer import TikTokenConverter

        converter = TikTokenConverter(
            vocab_file=str(_ranks_file()), pattern=QWEN2_PATTERN, extra_special_tokens=list(QWEN2_VL_SPECIAL_TOKENS)
        )
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        converter.converted().save(str(tmp))
        tmp.replace(cached)
    return PreTrainedTokenizerFast(
        tokenizer_file=str(cached), eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
