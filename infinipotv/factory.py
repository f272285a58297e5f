"""From a validated RunConfig to the parts of a run: adapter, policy, store factory, budget, benchmark.

:func:`validate` checks every combination that types cannot express, before anything is loaded or submitted, and
raises :class:`ConfigError` with one line naming the option and a valid value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from infinipotv import compress, threads
from infinipotv.config import ConfigError, RunConfig, check_budget_size, check_values, checked, choice
from infinipotv.data import BENCHMARKS, Benchmark
from infinipotv.kv import cache_bytes, make_store_factory, tokens_for_bytes
from infinipotv.kv.store import KVStore
from infinipotv.models import ADAPTERS, ModelAdapter, ModelError
from infinipotv.stream.method import STREAMING
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.session import StreamingSession

_TINY_LM = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "seed")  # tiny_text_config, load_pretrained
# The ``model.options`` keys each adapter reads (infinipotv/models/): always, and with model.tiny=true only. A key
# no adapter reads would run and do nothing, so it is refused (tests/hostile/test_config_knobs.py checks this table
# against the adapters' code).
MODEL_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "qwen2vl": ((), _TINY_LM),
    "qwen25vl": ((), (*_TINY_LM, "tokens_per_second")),
    "llava_ov": (("image_size", "patch_size"), _TINY_LM),
    "symbolic": (("patch", "positions"), ()),
}


def validate(cfg: RunConfig) -> None:
    """Fail fast on a configuration that cannot work: the knobs' own values first
    (:func:`infinipotv.config.check_values`, which run.py asks before it loads this module), then the combinations
    that need the model, benchmark and policy classes."""
    check_values(cfg)
    choice("model.family", cfg.model.family, ADAPTERS)
    choice("benchmark.name", cfg.benchmark.name, BENCHMARKS)
    threads.resolve(cfg.threads)
    c = cfg.compress
    policy = build_policy(cfg)
    if policy.evicts and c.budget is None and c.budget_mib is None:
        raise ConfigError(
            f"compress={c.name} evicts tokens and needs a budget: set compress.budget=6000 (tokens) "
            f"or compress.budget_mib"
        )
    contiguous = ADAPTERS[cfg.model.family].contiguous_positions
    checked(lambda: policy.check_storage(cfg.quant.bits < 16, contiguous), "compress")
    _check_byte_budget(cfg, policy)
    m, b = cfg.model, cfg.benchmark
    known = model_options(m.family, m.tiny)
    _check_options(f"model.options (model.family={m.family}, tiny={m.tiny})", m.options, known)
    _check_options(f"benchmark.options (benchmark={b.name})", b.options, BENCHMARKS[b.name].option_keys)
    adapter_cls = ADAPTERS[cfg.model.family]
    checked(lambda: adapter_cls.check_frames(cfg.model, build_benchmark(cfg).frame_size()), None, ModelError)
    if cfg.eval.chunk_frames % adapter_cls.frames_per_step:
        raise ConfigError(
            f"eval.chunk_frames={cfg.eval.chunk_frames} must be a multiple of "
            f"{adapter_cls.frames_per_step} for model.family={cfg.model.family}"
        )
    checked(lambda: policy.check_chunk(cfg.eval.chunk_frames, adapter_cls.frames_per_step), None)
    if c.budget is not None and policy.evicts:
        check_budget(cfg, policy, c.budget, "compress.budget")


def _check_byte_budget(cfg: RunConfig, policy: compress.Policy) -> None:
    """A budget in bytes (``compress.budget_mib``) only for a streaming method that holds it after every step
    (StreamingTOM's OQM grows with the stream: refused, naming the token budget instead)."""
    if cfg.compress.budget_mib is not None and policy.evicts:
        checked(STREAMING[policy.streaming].check_byte_cap, None)


def model_options(family: str, tiny: bool) -> tuple[str, ...]:
    """The ``model.options`` keys the family's adapter reads (tiny-only keys with ``tiny``)."""
    always, tiny_only = MODEL_OPTIONS.get(family, ((), ()))
    return (*always, *tiny_only) if tiny else always


def _check_options(key: str, given: dict[str, Any], known: Sequence[str]) -> None:
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(
            f"{key} has unknown key(s) {', '.join(unknown)}; "
            + (f"known: {', '.join(known)}" if known else "this choice reads none: remove them")
        )


def check_device(cfg: RunConfig) -> None:
    """``model.device`` names a device this machine has (checked where the job runs, not on a login node)."""
    import torch

    device = cfg.model.device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"model.device={device!r} is not a device; use model.device=cpu or cuda (cuda:N)") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (parsed.index or 0) >= count:
            raise ConfigError(
                f"model.device={device} but this machine has {count} CUDA device(s): use model.device=cpu, "
                f"or run on a GPU node" + (f" (model.device=cuda:0 .. cuda:{count - 1})" if count else "")
            )
    elif parsed.type != "cpu":
        raise ConfigError(f"model.device={device} is not supported; use model.device=cpu or cuda (cuda:N)")


def check_budget(cfg: RunConfig, policy: compress.Policy, budget: int, key: str) -> None:
    """A chunk must hold fewer than |M| - |C| tokens (where the method prefills chunks into the cache: MuKV's
    does not), and the policy's own rules must hold at |M|. ``key`` is the option |M| came from (a byte budget is
    converted once the model's shape is known, before any video streams)."""
    adapter_cls = ADAPTERS[cfg.model.family]
    c = cfg.compress
    n_keep = checked(lambda: compress.compressed_size(budget, c.c_ratio), "compress")
    per_frame = checked(lambda: adapter_cls.max_tokens_per_frame(cfg.model), None, ModelError)
    chunk_tokens = cfg.eval.chunk_frames // adapter_cls.frames_per_step * per_frame
    if STREAMING[policy.streaming].prefills_chunks and chunk_tokens >= budget - n_keep:
        raise ConfigError(
            f"eval.chunk_frames={cfg.eval.chunk_frames} gives up to {chunk_tokens} vision tokens per chunk, not fewer "
            f"than |M| - |C| = {budget - n_keep} ({key}={getattr(c, key.split('.')[1])} gives |M| = {budget}, "
            f"compress.c_ratio={c.c_ratio}): lower eval.chunk_frames or raise {key}"
        )
    checked(lambda: policy.validate(n_keep, per_frame, budget + chunk_tokens), "compress")
    model_frames = cfg.eval.chunk_frames // adapter_cls.frames_per_step
    checked(lambda: policy.check_stream(model_frames, per_frame, budget, n_keep), "compress")


def build_policy(cfg: RunConfig) -> compress.Policy:
    """The compression policy with the parameters the config holds (resolved by :func:`as_run_config`)."""
    c = cfg.compress
    params = {key: getattr(c, key) for key in compress.policy_params(c.name)}
    return checked(lambda: compress.build(c.name, c.preset, **params), "compress", (ValueError, TypeError))


def build_adapter(cfg: RunConfig) -> ModelAdapter:
    """The model family's adapter, loaded from the ``model=`` config (which satisfies ``ModelSettings``), on a
    device this machine has."""
    check_device(cfg)
    return checked(lambda: ADAPTERS[cfg.model.family].load(cfg.model), None, ModelError)


def build_benchmark(cfg: RunConfig) -> Benchmark:
    return BENCHMARKS[cfg.benchmark.name](cfg.benchmark)


@dataclass
class Parts:
    adapter: ModelAdapter
    policy: compress.Policy
    make_store: Callable[[], KVStore]
    budget: int | None
    budget_bytes: int | None
    byte_cap: ByteCap | None  # set when the budget was given in bytes: held on the cache's measured bytes

    def session(self, c_ratio: float, reference: bool = False) -> StreamingSession:
        """The streaming session these parts make (the one way the job, the lmms-eval plugin and the benches build
        it)."""
        return StreamingSession(
            self.adapter,
            self.policy,
            self.budget,
            c_ratio,
            self.make_store,
            reference=reference,
            byte_cap=self.byte_cap,
        )


def build_parts(cfg: RunConfig, adapter: ModelAdapter | None = None) -> Parts:
    """Load the model and build the policy and storage; a byte budget becomes |M| tokens for the chosen storage.

    ``adapter``: the model of ``cfg.model``, already loaded (a bench streams many configurations through one)."""
    adapter = adapter or build_adapter(cfg)
    policy = build_policy(cfg)
    make_store, storage = make_store_factory(cfg.quant, adapter.dtype)
    if storage.quantized and adapter.head_dim % cfg.quant.group_size:
        raise ConfigError(
            f"quant.group_size={cfg.quant.group_size} must divide the model's head_dim={adapter.head_dim} "
            f"(KIVI groups values over channels): choose quant.group_size=16 or a model with a larger head_dim"
        )
    shape = (adapter.n_layers, adapter.n_kv_heads, adapter.head_dim)
    budget = cfg.compress.budget
    prefix = len(adapter.prefix_ids())  # never evicted: a byte budget covers it, a token budget (|M|) does not
    if cfg.compress.budget_mib is not None:
        budget = tokens_for_bytes(cfg.compress.budget_mib * 2**20, *shape, storage) - prefix
        if budget < 2:
            raise ConfigError(
                f"compress.budget_mib={cfg.compress.budget_mib} holds no video memory once the "
                f"{prefix}-token prefix is stored: raise it"
            )
        check_budget_size(budget, "compress.budget_mib")
        if policy.evicts:
            check_budget(cfg, policy, budget, "compress.budget_mib")
    budget_bytes = None if budget is None else int(cache_bytes(budget + prefix, *shape, storage))
    byte_cap = None
    if cfg.compress.budget_mib is not None:
        byte_cap = ByteCap.of(budget, cfg.compress.c_ratio, prefix, shape, storage)
    return Parts(adapter, policy, make_store, budget, budget_bytes, byte_cap)
