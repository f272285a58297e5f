"""From a validated RunConfig to the parts of a run: adapter, policy, store factory, budget, benchmark.

:func:`validate` checks every combination that types cannot express, before anything is loaded or submitted, and
raises :class:`ConfigError` with one line naming the option and a valid value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from infinipotv import compress, threads
from infinipotv.config import CompressConfig, ConfigError, RunConfig, policy_config
from infinipotv.data import BENCHMARKS, Benchmark
from infinipotv.kv import cache_bytes, make_store_factory, tokens_for_bytes
from infinipotv.kv.store import KVStore
from infinipotv.models import ADAPTERS, ModelAdapter, ModelError
from infinipotv.stream.method import STREAMING
from infinipotv.stream.schedule import ByteCap
from infinipotv.stream.session import StreamingSession

QUANT_BITS = (2, 4, 8, 16)
MAX_BUDGET = 2**31 - 1  # |M| tokens: far past any stream (768 frames x 1,280 tokens), its bytes far within int64
QUANT_NAMES = {"fp16": 16, "bf16": 16, "int2": 2, "int4": 4, "int8": 8}  # the conf/quant choices and their bits
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
    _choice("compress.name", cfg.compress.name, compress.POLICIES)
    schema = policy_config(cfg.compress.name)
    if not isinstance(cfg.compress, schema):  # built in code as a plain CompressConfig: the policy's own type
        given = {f.name: getattr(cfg.compress, f.name) for f in fields(cfg.compress)}
        cfg.compress = _checked(lambda: schema(**given), "compress", TypeError)
    c = cfg.compress
    params = compress.policy_params(c.name)
    given = {key: getattr(c, key) for key in params}
    resolved = _checked(lambda: compress.resolve_params(c.name, c.preset, given), "compress", (ValueError, TypeError))
    for key, value in resolved.items():
        setattr(c, key, list(value) if isinstance(value, tuple) else value)
    if c.c_ratio is None:
        c.c_ratio = compress.POLICIES[c.name].default_c_ratio
    return cfg


def _check_compress_keys(node: DictConfig) -> None:
    name = node.get("name")
    if name not in compress.POLICIES:
        return  # reported by _choice with the valid names
    shared = {f.name for f in fields(CompressConfig)}
    params, pinned = compress.policy_params(name), compress.pinned_params(name)
    extra = [key for key in node if key not in shared and key not in params]
    if extra:
        pins = [f"{key}={pinned[key]!r}" for key in extra if key in pinned]
        raise ConfigError(
            f"compress={name} has no parameter {', '.join(extra)}{' (it pins ' + ', '.join(pins) + ')' if pins else ''}"
            f"; its parameters: {', '.join([*params, *sorted(shared - {'name'})])}"
        )


def _choice(kind: str, name: str, valid) -> None:
    if name not in valid:
        raise ConfigError(f"{kind}={name!r} is unknown; valid choices: {', '.join(sorted(valid))}")


def validate(cfg: RunConfig) -> None:
    """Fail fast on a configuration that cannot work."""
    _choice("model.family", cfg.model.family, ADAPTERS)
    _choice("compress.name", cfg.compress.name, compress.POLICIES)
    _choice("benchmark.name", cfg.benchmark.name, BENCHMARKS)
    threads.resolve(cfg.threads)
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
    policy = build_policy(cfg)
    if policy.evicts and c.budget is None and c.budget_mib is None:
        raise ConfigError(
            f"compress={c.name} evicts tokens and needs a budget: set compress.budget=6000 (tokens) "
            f"or compress.budget_mib"
        )
    contiguous = ADAPTERS[cfg.model.family].contiguous_positions
    _checked(lambda: policy.check_storage(cfg.quant.bits < 16, contiguous), "compress")
    _check_byte_budget(cfg, policy)
    if cfg.eval.chunk_frames < 1:
        raise ConfigError(f"eval.chunk_frames={cfg.eval.chunk_frames} must be >= 1")
    _check_counts(cfg)
    m, b = cfg.model, cfg.benchmark
    known = model_options(m.family, m.tiny)
    _check_options(f"model.options (model.family={m.family}, tiny={m.tiny})", m.options, known)
    _check_options(f"benchmark.options (benchmark={b.name})", b.options, BENCHMARKS[b.name].option_keys)
    adapter_cls = ADAPTERS[cfg.model.family]
    _checked(lambda: adapter_cls.check_frames(cfg.model, build_benchmark(cfg).frame_size()), None, ModelError)
    if cfg.eval.chunk_frames % adapter_cls.frames_per_step:
        raise ConfigError(
            f"eval.chunk_frames={cfg.eval.chunk_frames} must be a multiple of "
            f"{adapter_cls.frames_per_step} for model.family={cfg.model.family}"
        )
    _checked(lambda: policy.check_chunk(cfg.eval.chunk_frames, adapter_cls.frames_per_step), None)
    if c.budget is not None and policy.evicts:
        check_budget(cfg, policy, c.budget, "compress.budget")


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


def _check_byte_budget(cfg: RunConfig, policy: compress.Policy) -> None:
    """A budget in bytes (``compress.budget_mib``) only for a streaming method that holds it after every step
    (StreamingTOM's OQM grows with the stream: refused, naming the token budget instead)."""
    if cfg.compress.budget_mib is not None and policy.evicts:
        _checked(STREAMING[policy.streaming].check_byte_cap, None)


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


def check_budget_size(budget: int, key: str) -> None:
    """|M| (from ``key``) within :data:`MAX_BUDGET`: a budget no stream can reach compresses nothing, and its byte
    count overflows the 64-bit integers the aggregator's tables and figures hold it in (a run of
    ``compress.budget=99999999999999999999`` ran, then its report crashed)."""
    if budget > MAX_BUDGET:
        raise ConfigError(
            f"{key} gives |M| = {budget} tokens, more than any stream holds (at most {MAX_BUDGET:,}): give a real "
            f"budget (e.g. compress.budget=6000), or compress=full compress.budget=null to keep every token"
        )


def check_budget(cfg: RunConfig, policy: compress.Policy, budget: int, key: str) -> None:
    """A chunk must hold fewer than |M| - |C| tokens (where the method prefills chunks into the cache: MuKV's
    does not), and the policy's own rules must hold at |M|. ``key`` is the option |M| came from (a byte budget is
    converted once the model's shape is known, before any video streams)."""
    adapter_cls = ADAPTERS[cfg.model.family]
    c = cfg.compress
    n_keep = _checked(lambda: compress.compressed_size(budget, c.c_ratio), "compress")
    per_frame = _checked(lambda: adapter_cls.max_tokens_per_frame(cfg.model), None, ModelError)
    chunk_tokens = cfg.eval.chunk_frames // adapter_cls.frames_per_step * per_frame
    if STREAMING[policy.streaming].prefills_chunks and chunk_tokens >= budget - n_keep:
        raise ConfigError(
            f"eval.chunk_frames={cfg.eval.chunk_frames} gives up to {chunk_tokens} vision tokens per chunk, not fewer "
            f"than |M| - |C| = {budget - n_keep} ({key}={getattr(c, key.split('.')[1])} gives |M| = {budget}, "
            f"compress.c_ratio={c.c_ratio}): lower eval.chunk_frames or raise {key}"
        )
    _checked(lambda: policy.validate(n_keep, per_frame, budget + chunk_tokens), "compress")
    model_frames = cfg.eval.chunk_frames // adapter_cls.frames_per_step
    _checked(lambda: policy.check_stream(model_frames, per_frame, budget, n_keep), "compress")


def _checked(fn, group: str | None, errors: type[Exception] | tuple[type[Exception], ...] = ValueError):
    """Run a component's own check; its error becomes a ConfigError naming the config group (``group`` None: the
    component's message names its option already, as a :class:`ModelError`'s does)."""
    try:
        return fn()
    except errors as err:
        raise ConfigError(f"{group}: {err}" if group else str(err)) from None


def build_policy(cfg: RunConfig) -> compress.Policy:
    """The compression policy with the parameters the config holds (resolved by :func:`as_run_config`)."""
    c = cfg.compress
    params = {key: getattr(c, key) for key in compress.policy_params(c.name)}
    return _checked(lambda: compress.build(c.name, c.preset, **params), "compress", (ValueError, TypeError))


def build_adapter(cfg: RunConfig) -> ModelAdapter:
    """The model family's adapter, loaded from the ``model=`` config (which satisfies ``ModelSettings``), on a
    device this machine has."""
    check_device(cfg)
    return _checked(lambda: ADAPTERS[cfg.model.family].load(cfg.model), None, ModelError)


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
