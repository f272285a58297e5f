"""Structured configuration: one dataclass per Hydra config group, validated before any work starts.

Hydra checks types and enum values as it composes; :func:`check_values` then checks each knob's own value (an
unknown policy, a ratio out of range, a negative budget...) and :func:`infinipotv.factory.validate` the combinations
that types cannot express (a chunk too large for |M| - |C|...). All fail in a second, on the login node, with a
message that names the option and a valid value; up to :func:`check_values` nothing loads torch (the policies'
parameters are read without their tensor code, :mod:`infinipotv.compress.params`).
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from functools import cache
from typing import Any, Callable, Optional, get_args, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from infinipotv import compress


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
QUANT_BITS = (2, 4, 8, 16)
MAX_BUDGET = 2**31 - 1  # |M| tokens: far past any stream (768 frames x 1,280 tokens), its bytes far within int64
QUANT_NAMES = {"fp16": 16, "bf16": 16, "int2": 2, "int4": 4, "int8": 8}  # the conf/quant choices and their bits


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


def as_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    """A typed RunConfig (Hydra hands over a DictConfig; code may pass a RunConfig) whose ``compress`` is its
    policy's own config type, holding the parameters that will run.

    ``compress`` may hold only its policy's parameters: a key added with ``+compress.KEY=`` that the policy lacks or
    pins is refused here, naming the policy's real parameters. Parameters left None take the preset's value, else
    the policy's default (:func:`infinipotv.compress.resolve_params`), and a ``c_ratio`` left None the policy's own
    split (``Policy.default_c_ratio``); both are written back, so the saved config.yaml records what ran."""
    if isinstance(cfg, DictConfig):
        _check_compress_keys(cfg.compress)
        cfg = OmegaConf.to_object(cfg)
    choice("compress.name", cfg.compress.name, compress.POLICIES)
    schema = policy_config(cfg.compress.name)
    if not isinstance(cfg.compress, schema):  # built in code as a plain CompressConfig: the policy's own type
        given = {f.name: getattr(cfg.compress, f.name) for f in fields(cfg.compress)}
        cfg.compress = checked(lambda: schema(**given), "compress", TypeError)
    c = cfg.compress
    params = compress.policy_params(c.name)
    given = {key: getattr(c, key) for key in params}
    resolved = checked(lambda: compress.resolve_params(c.name, c.preset, given), "compress", (ValueError, TypeError))
    for key, value in resolved.items():
        setattr(c, key, list(value) if isinstance(value, tuple) else value)
    if c.c_ratio is None:
        c.c_ratio = compress.POLICIES[c.name].default_c_ratio
    return cfg


def _check_compress_keys(node: DictConfig) -> None:
    name = node.get("name")
    if name not in compress.POLICIES:
        return  # reported by choice with the valid names
    shared = {f.name for f in fields(CompressConfig)}
    params, pinned = compress.policy_params(name), compress.pinned_params(name)
    extra = [key for key in node if key not in shared and key not in params]
    if extra:
        pins = [f"{key}={pinned[key]!r}" for key in extra if key in pinned]
        raise ConfigError(
            f"compress={name} has no parameter {', '.join(extra)}{' (it pins ' + ', '.join(pins) + ')' if pins else ''}"
            f"; its parameters: {', '.join([*params, *sorted(shared - {'name'})])}"
        )


def choice(kind: str, name: str, valid: Collection[str]) -> None:
    if name not in valid:
        raise ConfigError(f"{kind}={name!r} is unknown; valid choices: {', '.join(sorted(valid))}")


def check_values(cfg: RunConfig) -> None:
    """Refuse a knob whose own value cannot work (an unknown policy or storage, a ratio out of range, a budget below
    two tokens, a policy parameter its checks refuse...), from the config alone: nothing here loads torch or the
    model stack, so run.py refuses a sweep's typo at once (:func:`infinipotv.factory.validate`, which starts here,
    checks the combinations)."""
    choice("compress.name", cfg.compress.name, compress.POLICIES)
    if cfg.quant.bits not in QUANT_BITS:
        raise ConfigError(
            f"quant.bits={cfg.quant.bits} is not supported; use one of {QUANT_BITS} (16 = full precision)"
        )
    _check_quant_name(cfg.quant.name, cfg.quant.bits)
    c = cfg.compress
    if not 0 < c.c_ratio < 1:
        raise ConfigError(f"compress.c_ratio={c.c_ratio} must lie in (0, 1), e.g. compress.c_ratio=0.75")
    if c.budget is not None and c.budget_mib is not None:
        raise ConfigError("set only one of compress.budget (tokens) and compress.budget_mib (MiB of KV)")
    if c.budget is not None and c.budget < 2:
        raise ConfigError(f"compress.budget={c.budget} must be >= 2 vision tokens, e.g. compress.budget=6000")
    if c.budget is not None:
        check_budget_size(c.budget, "compress.budget")
    if c.budget_mib is not None and not 0 < c.budget_mib < math.inf:
        raise ConfigError(f"compress.budget_mib={c.budget_mib} must be > 0 MiB and finite, e.g. compress.budget_mib=96")
    q = cfg.quant
    if q.residual_length < 0 or q.group_size < 1:
        raise ConfigError(
            f"quant.residual_length={q.residual_length} must be >= 0 and quant.group_size="
            f"{q.group_size} >= 1 (KIVI's defaults: 128 and 32)"
        )
    params = {key: getattr(c, key) for key in compress.policy_params(c.name)}
    checked(lambda: compress.POLICIES[c.name](**params), "compress", (ValueError, TypeError))  # its own checks
    if cfg.eval.chunk_frames < 1:
        raise ConfigError(f"eval.chunk_frames={cfg.eval.chunk_frames} must be >= 1")
    _check_counts(cfg)


def _check_quant_name(name: str, bits: int) -> None:
    """``quant.name`` is what tables and metrics.json label the storage (``kv``, ``storage``) and ``quant.bits`` what
    runs, so the two must agree (fp16/bf16 are 16 bits, intN is N): ``quant=fp16 quant.bits=4`` would run 4-bit KIVI
    labelled fp16."""
    named = QUANT_NAMES.get(name)
    if named is None:
        raise ConfigError(f"quant.name={name!r} is unknown; valid: {', '.join(QUANT_NAMES)}")
    if bits != named:
        fix = "quant=fp16 (or bf16)" if bits == 16 else f"quant=int{bits}"
        raise ConfigError(
            f"quant.bits={bits} disagrees with quant={name}, which stores {named} bits: choose {fix} for {bits}-bit "
            f"storage, or drop quant.bits"
        )


def _check_counts(cfg: RunConfig) -> None:
    """Frame sampling and decoding knobs whose nonsense values used to run anyway (0 frames answered, a rate of
    NaN, 0 tokens silently meaning the benchmark's own, -1 decoding forever)."""
    m = cfg.model
    if not 0 < m.fps < math.inf:
        raise ConfigError(f"model.fps={m.fps} must be a finite rate > 0 frames per second, e.g. model.fps=2")
    if m.max_frames < 1:
        raise ConfigError(f"model.max_frames={m.max_frames} must be >= 1 frame, e.g. model.max_frames=768")
    if m.num_frames is not None and m.num_frames < 1:
        raise ConfigError(
            f"model.num_frames={m.num_frames} must be >= 1 frame, e.g. model.num_frames=128, or null to sample at "
            f"model.fps"
        )
    new_tokens = cfg.eval.max_new_tokens
    if new_tokens is not None and new_tokens < 1:
        raise ConfigError(
            f"eval.max_new_tokens={new_tokens} must be >= 1 token, e.g. eval.max_new_tokens=16, or null for the "
            f"benchmark's own"
        )


def check_budget_size(budget: int, key: str) -> None:
    """|M| (from ``key``) within :data:`MAX_BUDGET`: a budget no stream can reach compresses nothing, and its byte
    count overflows the 64-bit integers the aggregator's tables and figures hold it in (a run of
    ``compress.budget=99999999999999999999`` ran, then its report crashed)."""
    if budget > MAX_BUDGET:
        raise ConfigError(
            f"{key} gives |M| = {budget} tokens, more than any stream holds (at most {MAX_BUDGET:,}): give a real "
            f"budget (e.g. compress.budget=6000), or compress=full compress.budget=null to keep every token"
        )


def checked(
    fn: Callable[[], Any], group: str | None, errors: type[Exception] | tuple[type[Exception], ...] = ValueError
):
    """Run a component's own check; its error becomes a ConfigError naming the config group (``group`` None: the
    component's message names its option already, as a :class:`infinipotv.models.ModelError`'s does)."""
    try:
        return fn()
    except errors as err:
        raise ConfigError(f"{group}: {err}" if group else str(err)) from None


def register_configs() -> None:
    """Register the schema (conf/config.yaml extends it, so every group YAML is type-checked against its field),
    one ``compress=`` choice per registered policy, generated from the policy's own fields, and the resolvers that
    name run directories."""
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
