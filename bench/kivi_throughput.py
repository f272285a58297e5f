"""KIVI quantize / dequantize throughput on one 7B-shaped layer cache, against a plain reference, optimum-quanto and a
plain copy, and a streaming loop against transformers' QuantizedCache (quanto backend).

    python -m bench.kivi_throughput            # 4 KV heads x 6K tokens x 128 channels, float16
    python -m bench.kivi_throughput --smoke    # tiny sizes, for the tests

Implementations of the same quantizer (keys per channel, values per token, groups of 32, 4 and 2 bits), timed side
by side in one run: ``ours`` (:mod:`infinipotv.kv.quant` as the store calls it: its PyTorch operations, the one path
on every device), ``reference`` (the plainest PyTorch version: min/max per group, round, one uint8 code per value,
no packing), ``quanto`` (optimum-quanto's ``MaxOptimizer`` + ``quantize_weight``, as transformers' quantized cache
calls it; only when installed, the ``bench`` extra) and ``copy`` (``clone()`` of the same tensor: the memory floor).
Ours over each of the others is a measured ratio, whatever it turns out to be, not a claim with a bound. Each
implementation's error is measured too (in half quantization steps of its group: <= 1 up to the rounding of the
dtype's arithmetic) and checked against the bound the codec tests hold ours to.

Then the store operations the streaming loop runs each step (``KiviStore.append``, which quantizes, ``read()``
before and after a per-head eviction, ``keep()``), and the streaming loop itself as a user would run it: a small
Llama with the 7B layer's KV shape fed chunk after chunk, its cache a transformers ``DynamicCache`` (full
precision), a ``QuantizedCache(backend="quanto")`` at the same bits and groups (it cannot evict: it dequantizes its
whole cache at every step and re-quantizes it whenever its window fills), or our ``StreamCache`` over ``KiviStore``
(no eviction either, to compare like with like). Ratios are taken inside one run.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from bench.common import parse, parser, write_result
from infinipotv.kv import StreamCache
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import QuantizedTensor, dequantize, expand_key_params, expand_value_params, levels, quantize
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.stream.trace import sync

GROUP = 32


def timings(
    fn: Callable[..., Any], reps: int, device: torch.device, setup: Callable[[], Any] | None = None
) -> dict[str, float]:
    """Median and fastest wall time of ``fn`` over ``reps`` back-to-back runs after one warm-up (device work
    included); ``setup``, untimed, makes a fresh argument for each run (an operation that changes its input, such as
    ``keep``). The ratios use the fastest: on a shared machine it is the run other processes disturbed least, and
    for the copy (short enough to slip between them) the floor itself."""
    args = () if setup is None else (setup(),)
    fn(*args)
    times = []
    for _ in range(reps):
        args = () if setup is None else (setup(),)
        sync(device)
        t0 = time.perf_counter()
        fn(*args)
        sync(device)
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times), "min_seconds": min(times)}


def reference_quantize(x: torch.Tensor, bits: int, axis: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The plainest KIVI quantizer: groups of G tokens (keys) or channels (values), uint8 codes, no packing."""
    h, t, d = x.shape
    groups = x.view(h, t // GROUP, GROUP, d) if axis == "key" else x.view(h, t, d // GROUP, GROUP)
    dim = 2 if axis == "key" else 3
    mn, mx = groups.amin(dim, keepdim=True), groups.amax(dim, keepdim=True)
    scale = (mx - mn) / levels(bits)
    q = ((groups - mn) / scale).clamp(0, levels(bits)).round().to(torch.uint8)
    return q, scale, mn


def reference_dequantize(q: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return (q.to(scale.dtype) * scale + mn).view(shape)


def quanto_pair(x: torch.Tensor, bits: int, axis: str) -> tuple[Callable[[], Any], Callable[[], torch.Tensor]] | None:
    """optimum-quanto's quantize and dequantize of the same groups, or None when it is not installed."""
    try:
        from optimum import quanto
    except ImportError:
        return None
    qtype = {4: quanto.qint4, 2: quanto.qint2}[bits]
    q_axis = -1 if axis == "key" else 0
    x4 = x.unsqueeze(0)

    def quant() -> Any:
        scale, shift = quanto.MaxOptimizer()(x4, qtype, q_axis, GROUP)
        return quanto.quantize_weight(x4, qtype, q_axis, scale, shift, GROUP)

    packed = quant()
    return quant, lambda: packed.dequantize()[0]


def error_check(x: torch.Tensor, y: torch.Tensor, q: QuantizedTensor) -> dict[str, Any]:
    """The largest |y - x| in half quantization steps of its group (``q``'s: every implementation here forms the same
    groups), and whether every element is within the bound the codec tests hold ours to: half a step plus a few
    units of the dtype's rounding of the arithmetic (tests/kv/test_kivi_quant.py)."""
    expand = expand_key_params if q.axis == "key" else expand_value_params
    scale, zero = expand(q.scale, q.group_size).double(), expand(q.zero, q.group_size).double()
    err = (y.double() - x.double()).abs()
    slack = 4 * torch.finfo(x.dtype).eps / 2 * (levels(q.bits) * scale + x.double().abs() + zero.abs())
    return {
        "max_half_steps": float((err / torch.where(scale > 0, scale / 2, 1.0)).max()),
        "within_bound": bool((err <= 0.5 * scale + slack).all()),
    }


def codec_rows(x: torch.Tensor, bits: int, reps: int) -> list[dict[str, Any]]:
    """Quantize and dequantize timings and errors of each implementation for keys and values."""
    rows = []
    for axis in ("key", "value"):
        ours = quantize(x, bits, GROUP, axis)
        ref = reference_quantize(x, bits, axis)
        impls: dict[str, tuple[Callable[[], Any], Callable[[], torch.Tensor]]] = {
            "ours": (lambda: quantize(x, bits, GROUP, axis), lambda: dequantize(ours)),
            "reference": (lambda: reference_quantize(x, bits, axis), lambda: reference_dequantize(*ref, x.shape)),
        }
        theirs = quanto_pair(x, bits, axis)
        if theirs is not None:
            impls["quanto"] = theirs
        impls["copy"] = (x.clone, x.clone)
        mine, errors, fns = dequantize(ours), {}, {}
        for impl, (quant, dequant) in impls.items():
            y = dequant()
            errors[impl] = (
                {}
                if impl == "copy"
                else {**error_check(x, y, ours), "dequantized_equals_ours": bool(torch.equal(y, mine))}
            )
            fns[(impl, "quantize")], fns[(impl, "dequantize")] = quant, dequant
        for (impl, op), fn in fns.items():
            rows.append(
                {"bits": bits, "axis": axis, "op": op, "impl": impl, **timings(fn, reps, x.device), **errors[impl]}
            )
    return rows


def store_rows(keys: torch.Tensor, values: torch.Tensor, reps: int) -> list[dict[str, Any]]:
    """The per-step store operations of the streaming loop, KIVI INT4 against the full-precision store."""
    h, t, _ = keys.shape
    ids = torch.arange(t)
    keep = torch.rand(h, t, generator=torch.Generator().manual_seed(0)).argsort(1)[:, : 3 * t // 4].sort(1).values
    keep = keep.to(keys.device)
    rows = []
    makers = {"kivi_int4": lambda: KiviStore(4, GROUP, 128, keys.dtype), "full_precision": FullPrecisionStore}
    for impl, make in makers.items():

        def filled() -> Any:
            store = make()
            store.append(keys, values, ids)
            return store

        store, evicted = filled(), filled()
        evicted.keep(keep)
        ops = {
            "append": (filled, None),
            "dequantized": (store.read, None),
            "keep": (lambda s: s.keep(keep), filled),
            "dequantized_after_keep": (evicted.read, None),
        }
        for op, (fn, setup) in ops.items():
            rows.append({"op": op, "impl": impl, **timings(fn, reps, keys.device, setup)})
    return rows


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ours / other per (bits, axis, op), fastest runs: > 1 means ours is slower."""
    out = []
    by = {(r["bits"], r["axis"], r["op"], r["impl"]): r["min_seconds"] for r in rows}
    for (bits, axis, op, impl), s in by.items():
        if impl != "ours":
            out.append(
                {
                    "bits": bits,
                    "axis": axis,
                    "op": op,
                    "against": impl,
                    "ours_over_other": by[(bits, axis, op, "ours")] / s,
                }
            )
    return out


def stream_claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 29's claim, on this run's streaming loop: at every bit width our KIVI store's last-token log-prob gap to
    the full-precision cache is at most QuantizedCache's (both attend a forward's own tokens at full precision)."""
    gap = {(r["impl"], r["bits"]): r["max_logprob_gap_to_dynamic"] for r in rows}
    return [
        {"bits": b, "ours": ours, "quanto": gap[("quanto_cache", b)], "holds": ours <= gap[("quanto_cache", b)]}
        for (impl, b), ours in gap.items()
        if impl == "kivi_store" and ("quanto_cache", b) in gap
    ]


def stream_model(heads: int, head_dim: int, layers: int, dtype: torch.dtype) -> Any:
    """A small Llama (random weights) whose layers have the KV shape under test: the attention and cache work of a
    7B layer, a fraction of its matmuls."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=heads * head_dim,
        intermediate_size=2 * heads * head_dim,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head_dim,
        max_position_embeddings=1 << 16,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(dtype).eval()


def stream_rows(model: Any, tokens: int, chunk: int, bits: tuple[int, ...]) -> list[dict[str, Any]]:
    """Stream ``tokens`` random token ids in chunks through ``model`` with each cache (the full-precision one once,
    the quantized ones at each of ``bits``); the total time, the last chunk's, and the last token's log-probs
    against the full-precision cache's."""
    from transformers.cache_utils import DynamicCache, QuantizedCache

    config, layers = model.config, model.config.num_hidden_layers
    ids = torch.randint(0, config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(1))
    dtype = next(model.parameters()).dtype
    try:
        import optimum.quanto  # noqa: F401

        quanto = True
    except ImportError:
        quanto = False
    makers: list[tuple[str, int | None, Callable[[], Any]]] = [
        ("dynamic_cache", None, lambda: DynamicCache(config=config))
    ]
    for b in bits:
        makers.append(("kivi_store", b, lambda b=b: StreamCache(layers, lambda: KiviStore(b, GROUP, 128, dtype))))
        if quanto:
            makers.append(
                (
                    "quanto_cache",
                    b,
                    lambda b=b: QuantizedCache(
                        "quanto", config, nbits=b, axis_key=-1, axis_value=0, q_group_size=GROUP, residual_length=128
                    ),
                )
            )
    rows, first = [], None
    for impl, b, make in makers:
        cache, steps = make(), []
        with torch.no_grad():
            for start in range(0, tokens, chunk):
                if isinstance(cache, StreamCache):
                    cache.commit(torch.arange(start, min(start + chunk, tokens)))
                t0 = time.perf_counter()
                logits = (
                    model(input_ids=ids[:, start : start + chunk], cache=cache, use_cache=True, logits_to_keep=1)
                    .logits[0, -1]
                    .float()
                )
                steps.append(time.perf_counter() - t0)
        logp = logits.log_softmax(-1)
        first = logp if first is None else first
        rows.append(
            {
                "impl": impl,
                "bits": b,
                "stream_seconds": sum(steps),
                "last_step_seconds": steps[-1],
                "steps": len(steps),
                "max_logprob_gap_to_dynamic": float((logp - first).abs().max()),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--tokens", type=int, default=6144)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--stream-tokens", type=int, default=4096, help="tokens the streaming loop feeds")
    p.add_argument("--stream-chunk", type=int, default=512, help="tokens per chunk of the streaming loop")
    p.add_argument("--stream-layers", type=int, default=4, help="decoder layers of the streaming loop's model")
    args = parse(p, argv)
    if args.smoke:
        args.tokens, args.reps, args.stream_tokens, args.stream_chunk, args.stream_layers = 256, 2, 256, 64, 1
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    shape = (args.heads, args.tokens, args.head_dim)
    keys = torch.randn(*shape, generator=gen).to(device, dtype)
    values = torch.randn(*shape, generator=gen).to(device, dtype)
    codec = [row for bits in (4, 2) for row in codec_rows(keys, bits, args.reps)]
    mib = keys.nbytes / 2**20
    for r in codec:
        r["mib_per_s"] = mib / r["min_seconds"]
    ratio_rows = ratios(codec)
    model = stream_model(args.heads, args.head_dim, args.stream_layers, dtype).to(device)
    stream = stream_rows(model, args.stream_tokens, args.stream_chunk, (4, 2))
    data = {
        "shape": {
            "heads": args.heads,
            "tokens": args.tokens,
            "head_dim": args.head_dim,
            "dtype": args.dtype,
            "group_size": GROUP,
            "mib_per_tensor": mib,
        },
        "codec": codec,
        "ratios": ratio_rows,
        "store": store_rows(keys, values, args.reps),
        "stream": {
            "tokens": args.stream_tokens,
            "chunk": args.stream_chunk,
            "layers": args.stream_layers,
            "rows": stream,
            "claims": stream_claims(stream),
        },
    }
    write_result(args.out, "kivi_throughput", data, args.smoke, device)
    return data


if __name__ == "__main__":
    main()
