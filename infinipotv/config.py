"""Structured configuration: one dataclass per Hydra config group, validated before any work starts.

Hydra checks types and enum values as it composes; :func:`validate` then checks the combinations that types cannot
express (a chunk too large for |M| - |C|, an unknown policy...). Both fail in a second, on the login node, with a
message that names the option and a valid value.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field, make_dataclass
from enum import Enum
from functools import cache
from typing import Any, Optional, get_args, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


class ConfigError(ValueError):
    """A configuration that cannot work. Its message names the option and how to fix it."""


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
    """What every ``compress=`` choice has (names as in the paper). Each choice adds exactly its policy's own
    parameters (:func:`policy_config`): the policy is its config."""

    name: str = MISSING
    budget: Optional[int] = None  # |M| in vision tokens per layer per KV head; None = never compress
    # KV memory of the whole cache (all layers, prefix included) instead of |M|: converted to |M| tokens for the
    # storage, and held as a cap on the bytes the cache really occupies (KIVI's thinned key groups cost more)
    budget_mib: Optional[float] = None
    # |C| = c_ratio * |M|; None: the policy's own split (Policy.default_c_ratio: InfiniPot-V 0.75, ReKV's window
    # against its retrieved blocks 0.5446...), resolved when the config is read and recorded resolved
    c_ratio: Optional[float] = None
    preset: str = "paper"  # paper | public_code: defaults for the parameters the policy declares


DEFAULT_BUDGET = 6000  # the paper's 6K |M| (tokens), the default of every evicting policy


def _config_type(annotation: Any) -> Any:
    """A policy field's type as OmegaConf takes it (tuples become lists), optional so that None means "the
    preset's value, else the policy's default" (:func:`infinipotv.compress.resolve_params`)."""
    if get_origin(annotation) is tuple:
        annotation = list[get_args(annotation)[0]]
    return Optional[annotation]


@cache
def policy_config(name: str) -> type[CompressConfig]:
    """The structured config of ``compress=name``: the shared fields plus the policy's parameters with the policy's
    defaults, except those a preset may set, which default to None (resolved when the config is read, and recorded
    resolved) so that a preset can supply them and an explicit value always wins. A key the policy lacks or pins is
    refused when the config is composed."""
    from infinipotv import compress

    cls = compress.POLICIES[name]
    hints = get_type_hints(cls)
    by_preset = {key for values in compress.PRESETS.values() for key in values}

    def default(param: str, value: Any) -> Any:
        if param in by_preset:
            return field(default=None)
        if isinstance(value, tuple):
            return field(default_factory=lambda: list(value))
        return field(default=value)

    own = [
        (param, _config_type(hints[param]), default(param, value))
        for param, value in compress.policy_params(name).items()
    ]
    budget = DEFAULT_BUDGET if cls.evicts else None
    return make_dataclass(
        f"Compress_{name}",
        [("name", str, field(default=name)), ("budget", Optional[int], field(default=budget)), *own],
        bases=(CompressConfig,),
    )


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
    limit: Optional[int] = None  # the first N questions in the benchmark's order, over its videos (after ids, fraction)
    fraction: Optional[float] = None  # a seeded random fraction of the videos
    ids: Optional[list[str]] = None  # explicit question ids
    seed: int = 0
    shard: Optional[str] = None  # "i/n": this job runs the i-th of n disjoint shards (0-based)
    # a row whose video path resolves outside the video root (``..``, an absolute path, a symlink) is that
    # question's error unless this is true: annotation files come from others and name any file they like
    allow_outside_root: bool = False
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
    compress: Any = MISSING  # one of the policy_config types: each compress= choice has its own fields
    quant: QuantConfig = MISSING
    benchmark: BenchmarkConfig = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: Tracking = Tracking.none
    seed: int = 0
    threads: str = "auto"  # torch's CPU threads: auto (infinipotv.threads) or a count; speed only, never a result
    run_dir: Optional[str] = None  # None = Hydra's output directory (a unique time-stamped folder)
    retry_errors: bool = False  # on resume, answer again the questions whose records are errors
    experiment: Optional[str] = None  # set by experiments/NAME.yaml; recorded for the results aggregator
    table: Optional[dict[str, Any]] = None  # an experiment's table spec, read by infinipotv.results, ignored by the job
    tuning: Optional[dict[str, Any]] = None  # a study's tuning grid and rule, read by infinipotv.results.tuning
    label: Optional[str] = None  # a study's name for this run's setting (upstream, tuned), a row key of its tables


def register_configs() -> None:
    """Register the schema (conf/config.yaml extends it, so every group YAML is type-checked against its field),
    one ``compress=`` choice per registered policy, generated from the policy's own fields, and the resolvers that
    name run directories."""
    from infinipotv import compress

    OmegaConf.register_new_resolver(
        "infinipotv.either", lambda value, default: default if value is None else value, replace=True
    )
    OmegaConf.register_new_resolver(
        "infinipotv.unique", lambda: f"{os.getpid()}-{secrets.token_hex(2)}", use_cache=True, replace=True
    )
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for name in compress.POLICIES:
        store.store(group="compress", name=name, node=policy_config(name))
