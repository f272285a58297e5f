"""Loading checkpoints without network, and tiny seeded models for CPU tests.

Weights come from a local path or the local Hugging Face cache only. When they are missing, the harness says which
checkpoint, where it looked, and how to provide it, and exits non-zero (no hub traceback, no download attempt).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from infinipotv.models.settings import ModelError, ModelSettings

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class MissingWeightsError(RuntimeError):
    """A checkpoint that is neither a local folder nor in the local Hugging Face cache."""


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ModelError(f"model.dtype={name!r} is not supported; use one of {sorted(DTYPES)}")
    return DTYPES[name]


def hf_cache_dir() -> Path:
    """Where transformers looks for downloaded checkpoints (HF_HUB_CACHE, else HF_HOME/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def resolve_checkpoint(checkpoint: str) -> str:
    """A local folder, or a hub id present in the local cache; otherwise a MissingWeightsError naming the fix."""
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        return str(path)
    cached = hf_cache_dir() / f"models--{checkpoint.replace('/', '--')}"
    if (cached / "snapshots").is_dir() and any((cached / "snapshots").iterdir()):
        return checkpoint
    raise MissingWeightsError(
        f"weights for model.checkpoint={checkpoint!r} not found. Looked in: the local folder {path.resolve()} and "
        f"the Hugging Face cache {cached}. Provide them by downloading on a machine with network "
        f"(`huggingface-cli download {checkpoint}`) and copying the cache there (or setting HF_HOME), or pass a local "
        f"folder: model.checkpoint=/path/to/{Path(checkpoint).name}"
    )


def check_weights(cfg: ModelSettings) -> None:
    """Fail in a second when a named checkpoint is not on this machine (tiny and built-in models need none)."""
    if not cfg.tiny and cfg.checkpoint:
        resolve_checkpoint(cfg.checkpoint)


def load_pretrained(
    cfg: ModelSettings,
    model_class: str,
    tiny_config: Callable[[ModelSettings], PretrainedConfig],
    tiny_tokenizer: Callable[[], PreTrainedTokenizerBase],
    checkpoint: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model and tokenizer the settings name: a tiny seeded model, or a local checkpoint (``checkpoint``, where
    the family supplies its own, else ``model.checkpoint``). ``model_class`` names transformers' class, imported
    here: an adapter's module imports none of transformers' modeling code, so that a config is checked in seconds."""
    import transformers

    model_cls: type[PreTrainedModel] = getattr(transformers, model_class)
    dtype = torch_dtype(cfg.dtype)
    if cfg.tiny:
        torch.manual_seed(int(cfg.options.get("seed", 0)))
        config = tiny_config(cfg)
        config._attn_implementation = cfg.attn_implementation
        model = model_cls(config).to(dtype)
        tokenizer = tiny_tokenizer()
    else:
        checkpoint = checkpoint or cfg.checkpoint
        if not checkpoint:
            raise ModelError("model.checkpoint is empty: set a hub id or a local folder, or model.tiny=true")
        source = resolve_checkpoint(checkpoint)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = model_cls.from_pretrained(
            source,
            revision=cfg.revision,
            dtype=dtype,
            attn_implementation=cfg.attn_implementation,
            local_files_only=True,
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    return model.to(cfg.device).eval(), tokenizer
