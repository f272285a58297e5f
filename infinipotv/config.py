"""Structured configuration: one dataclass per Hydra config group, validated before any work starts.

Hydra checks types and enum values as it composes; :func:`validate` then checks the combinations that types cannot
express (a chunk too large for |M| - |C|, an unknown policy...). Both fail in a second, on the login node, with a
message that names the option and a valid value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class ConfigError(ValueError):
    """A configuration that cannot work. Its message names the option and how to fix it."""


class Pooling(str, Enum):
    none = "none"
    layer_quartile = "layer_quartile"
    cv = "cv"


class FrameView(str, Enum):
    pseudo_frames = "pseudo_frames"
    grid_aware = "grid_aware"


class Parser(str, Enum):
    faithful = "faithful"
    strict = "strict"


class Reference(str, Enum):
    none = "none"
    full = "full"


class Tracking(str, Enum):
    none = "none"
    wandb = "wandb"


@dataclass
class ModelConfig:
    """Which model family and checkpoint, and how frames become its input."""

    family: str = MISSING  # adapter name: qwen2vl | qwen25vl | llava_ov | symbolic
    checkpoint: Optional[str] = None  # HF id or local path; None with tiny=true
    tiny: bool = False  # a tiny configuration with seeded random weights (tests, CPU smoke runs)
    revision: Optional[str] = None
    dtype: str = "float32"  # float32 | bfloat16 | float16
    device: str = "cpu"  # cpu | cuda | cuda:N
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2
    fps: float = 2.0  # sampling rate of raw frames
    max_frames: int = 768  # most raw frames per video (uniformly resampled above this)
    min_pixels: int = 4 * 28 * 28
    max_pixels: int = 128 * 28 * 28
    num_frames: Optional[int] = None  # fixed frame count (LLaVA-OneVision: 128); overrides fps/max_frames
    use_chat_template: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # family-specific (tiny sizes, image size...)


@dataclass
class CompressConfig:
    """The compression policy and the memory cap it works under (names as in the paper)."""

    name: str = "full"
    budget: Optional[int] = None  # |M| in vision tokens per layer per KV head; None = never compress
    # KV memory of the whole cache (all layers, prefix included) instead of |M|: converted to |M| tokens for the
    # storage, and held as a cap on the bytes the cache really occupies (KIVI's thinned key groups cost more)
    budget_mib: Optional[float] = None
    c_ratio: float = 0.75  # |C| = c_ratio * |M|
    alpha: float = 0.5
    r_ratio: float = 0.125
    pooling: Pooling = Pooling.layer_quartile
    cv_thresholds: list[float] = field(default_factory=lambda: [1.0, 0.6, 0.3])
    frame_view: FrameView = FrameView.pseudo_frames
    n_sink: int = 4
    seed: int = 0
    preset: str = "paper"  # paper | public_code


@dataclass
class QuantConfig:
    """How the kept cache is stored: full precision, or KIVI low-bit codes."""

    name: str = "fp16"
    bits: int = 16  # 16 = full precision; 2/4/8 = KIVI
    # full-precision dtype (and KIVI scale/zero/residual dtype); auto = the model's, but 16-bit for KIVI on a
    # float32 model (infinipotv.kv.accounting.storage_dtype)
    dtype: str = "auto"
    group_size: int = 32
    residual_length: int = 128


@dataclass
class BenchmarkConfig:
    """Where a benchmark's annotations and videos are, which subset to run, and how to parse answers."""

    name: str = MISSING
    root: str = "data"  # video root (and default annotation location)
    annotations: Optional[str] = None  # annotation file (parquet/json/csv as released); default under root
    part: Optional[str] = None  # benchmark-specific part, e.g. StreamingBench real_time | omni | contextual
    parser: Parser = Parser.faithful
    limit: Optional[int] = None  # first N questions
    fraction: Optional[float] = None  # a seeded random fraction of the videos
    ids: Optional[list[str]] = None  # explicit question ids
    seed: int = 0
    shard: Optional[str] = None  # "i/n": this job runs the i-th of n disjoint shards (0-based)
    options: dict[str, Any] = field(default_factory=dict)  # benchmark-specific (generator knobs...)


@dataclass
class EvalConfig:
    """How the stream is fed and answers are produced."""

    chunk_frames: int = 8  # raw frames encoded and prefilled per step
    max_new_tokens: Optional[int] = None  # None = the benchmark's own
    reference: Reference = Reference.none  # full: also answer from the uncompressed cache (agreement, KL)


@dataclass
class RunConfig:
    model: ModelConfig = MISSING
    compress: CompressConfig = MISSING
    quant: QuantConfig = MISSING
    benchmark: BenchmarkConfig = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: Tracking = Tracking.none
    seed: int = 0
    run_dir: Optional[str] = None  # None = Hydra's output directory
    experiment: Optional[str] = None  # set by experiments/NAME.yaml; recorded for the results aggregator
    table: Optional[dict[str, Any]] = None  # an experiment's table spec, read by infinipotv.results, ignored by the job


def register_configs() -> None:
    """Register the schema: conf/config.yaml extends it, so every group YAML is type-checked against its field."""
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
