"""From a validated RunConfig to the parts of a run: adapter, policy, store factory, budget, benchmark.

:func:`validate` checks every combination that types cannot express, before anything is loaded or submitted, and
raises :class:`ConfigError` with one line naming the option and a valid value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from infinipotv import compress
from infinipotv.config import ConfigError, RunConfig
from infinipotv.data import BENCHMARKS, Benchmark
from infinipotv.kv import cache_bytes, make_store_factory, tokens_for_bytes
from infinipotv.kv.store import KVStore
from infinipotv.models import ADAPTERS, ModelAdapter
from infinipotv.stream.session import ByteCap, StreamingSession

QUANT_BITS = (2, 4, 8, 16)


def as_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    """A typed RunConfig object (Hydra hands over a DictConfig)."""
    return OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg


def _choice(kind: str, name: str, valid) -> None:
    if name not in valid:
        raise ConfigError(f"{kind}={name!r} is unknown; valid choices: {', '.join(sorted(valid))}")


def validate(cfg: RunConfig) -> None:
    """Fail fast on a configuration that cannot work."""
    _choice("model.family", cfg.model.family, ADAPTERS)
    _choice("compress.name", cfg.compress.name, compress.POLICIES)
    _choice("benchmark.name", cfg.benchmark.name, BENCHMARKS)
    if cfg.quant.bits not in QUANT_BITS:
        raise ConfigError(f"quant.bits={cfg.quant.bits} is not supported; use one of {QUANT_BITS} (16 = full precision)")
    c = cfg.compress
    if not 0 < c.c_ratio < 1:
        raise ConfigError(f"compress.c_ratio={c.c_ratio} must lie in (0, 1), e.g. compress.c_ratio=0.75")
    if not 0 <= c.alpha <= 1:
        raise ConfigError(f"compress.alpha={c.alpha} must lie in [0, 1], e.g. 0.5")
    if c.budget is not None and c.budget_mib is not None:
        raise ConfigError("set only one of compress.budget (tokens) and compress.budget_mib (MiB of KV)")
    policy = build_policy(cfg)
    if getattr(policy, "evicts", True) and c.budget is None and c.budget_mib is None:
        raise ConfigError(f"compress={c.name} evicts tokens and needs a budget: set compress.budget=6000 (tokens) "
                          f"or compress.budget_mib")
    if cfg.eval.chunk_frames < 1:
        raise ConfigError(f"eval.chunk_frames={cfg.eval.chunk_frames} must be >= 1")
    adapter_cls = ADAPTERS[cfg.model.family]
    if cfg.eval.chunk_frames % adapter_cls.frames_per_step:
        raise ConfigError(f"eval.chunk_frames={cfg.eval.chunk_frames} must be a multiple of "
                          f"{adapter_cls.frames_per_step} for model.family={cfg.model.family}")
    if c.budget is not None and getattr(policy, "evicts", True):
        n_keep = _checked(lambda: compress.compressed_size(c.budget, c.c_ratio), "compress")
        per_frame = adapter_cls.max_tokens_per_frame(cfg.model)
        chunk_tokens = cfg.eval.chunk_frames // adapter_cls.frames_per_step * per_frame
        if chunk_tokens >= c.budget - n_keep:
            raise ConfigError(
                f"eval.chunk_frames={cfg.eval.chunk_frames} gives up to {chunk_tokens} vision tokens per chunk, not fewer "
                f"than |M| - |C| = {c.budget - n_keep} (compress.budget={c.budget}, compress.c_ratio={c.c_ratio}): "
                f"lower eval.chunk_frames or raise compress.budget")
        _checked(lambda: policy.validate(n_keep, per_frame, c.budget + chunk_tokens), "compress")


def _checked(fn, group: str):
    """Run a component's own check; its ValueError becomes a ConfigError naming the config group."""
    try:
        return fn()
    except ValueError as err:
        raise ConfigError(f"{group}: {err}") from None


def build_policy(cfg: RunConfig):
    """The compression policy with the config's parameters (only those the policy declares).

    ``compress.preset=public_code`` replaces the fields it names (r_ratio, pooling) with the public code's values.
    """
    c = cfg.compress
    declared = compress.policy_params(c.name)
    values = {
        "alpha": c.alpha, "r_ratio": c.r_ratio, "pooling": getattr(c.pooling, "value", c.pooling),
        "cv_thresholds": tuple(c.cv_thresholds), "frame_view": getattr(c.frame_view, "value", c.frame_view),
        "n_sink": c.n_sink, "seed": c.seed,
    }
    if c.preset not in compress.PRESETS:
        raise ConfigError(f"compress.preset={c.preset!r} is unknown; valid choices: {', '.join(compress.PRESETS)}")
    values.update(compress.PRESETS[c.preset])
    return _checked(lambda: compress.build(c.name, **{k: v for k, v in values.items() if k in declared}), "compress")


def build_adapter(cfg: RunConfig) -> ModelAdapter:
    return ADAPTERS[cfg.model.family].load(cfg.model)


def build_benchmark(cfg: RunConfig) -> Benchmark:
    return BENCHMARKS[cfg.benchmark.name](cfg.benchmark)


@dataclass
class Parts:
    adapter: ModelAdapter
    policy: object
    make_store: Callable[[], KVStore]
    budget: int | None
    budget_bytes: int | None
    byte_cap: ByteCap | None  # set when the budget was given in bytes: held on the cache's measured bytes

    def session(self, c_ratio: float, reference: bool = False) -> StreamingSession:
        """The streaming session these parts make (the one way the job and the lmms-eval plugin build it)."""
        return StreamingSession(self.adapter, self.policy, self.budget, c_ratio, self.make_store,
                                reference=reference, byte_cap=self.byte_cap)


def build_parts(cfg: RunConfig) -> Parts:
    """Load the model and build the policy and storage; a byte budget becomes |M| tokens for the chosen storage."""
    adapter = build_adapter(cfg)
    policy = build_policy(cfg)
    make_store, storage = make_store_factory(cfg.quant, adapter.dtype)
    if storage.quantized and adapter.head_dim % cfg.quant.group_size:
        raise ConfigError(f"quant.group_size={cfg.quant.group_size} must divide the model's head_dim={adapter.head_dim} "
                          f"(KIVI groups values over channels): choose quant.group_size=16 or a model with a larger head_dim")
    shape = (adapter.n_layers, adapter.n_kv_heads, adapter.head_dim)
    budget = cfg.compress.budget
    prefix = len(adapter.prefix_ids())  # never evicted: a byte budget covers it, a token budget (|M|) does not
    if cfg.compress.budget_mib is not None:
        budget = tokens_for_bytes(cfg.compress.budget_mib * 2**20, *shape, storage) - prefix
        if budget < 2:
            raise ConfigError(f"compress.budget_mib={cfg.compress.budget_mib} holds no video memory once the "
                              f"{prefix}-token prefix is stored: raise it")
    budget_bytes = None if budget is None else int(cache_bytes(budget + prefix, *shape, storage))
    byte_cap = None
    if cfg.compress.budget_mib is not None:
        byte_cap = ByteCap.of(budget, cfg.compress.c_ratio, prefix, shape, storage)
    return Parts(adapter, policy, make_store, budget, budget_bytes, byte_cap)
