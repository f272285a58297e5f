"""KIVI quantize / dequantize throughput on one 7B-shaped layer cache, against a plain reference and optimum-quanto.

    python -m bench.kivi_throughput            # 4 KV heads x 6K tokens x 128 channels, float16
    python -m bench.kivi_throughput --smoke    # tiny sizes, for the tests

Three implementations of the same quantizer (keys per channel, values per token, groups of 32, 4 and 2 bits):
``ours`` (:mod:`infinipotv.kv.quant`: packed codes, constant-group guard), ``reference`` (the plainest PyTorch
version: min/max per group, round, one uint8 code per value, no packing) and ``quanto`` (optimum-quanto's
``MaxOptimizer`` + ``quantize_weight``, as transformers' quantized cache calls it; only when installed). Then the
store-level operations the streaming loop really runs each step: ``KiviStore.append`` (which quantizes), its
``dequantized()`` view before and after a per-head eviction, and ``keep()``. Ratios are taken inside one run.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from bench.common import parse, parser, sync, write_result
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import dequantize, levels, quantize
from infinipotv.kv.store import FullPrecisionStore

GROUP = 32


def median_seconds(fn: Callable[..., Any], reps: int, device: torch.device,
                   setup: Callable[[], Any] | None = None) -> float:
    """Median wall time of ``fn`` over ``reps`` runs after one warm-up (device work included); ``setup``, untimed,
    makes a fresh argument for each run (an operation that changes its input, such as ``keep``)."""
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
    return statistics.median(times)


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


def quanto_pair(x: torch.Tensor, bits: int, axis: str) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
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
    return quant, packed.dequantize


def codec_rows(x: torch.Tensor, bits: int, reps: int) -> list[dict[str, Any]]:
    """Quantize and dequantize timings of each implementation for keys and values."""
    rows = []
    for axis in ("key", "value"):
        ours = quantize(x, bits, GROUP, axis)
        ref = reference_quantize(x, bits, axis)
        impls = {
            "ours": (lambda: quantize(x, bits, GROUP, axis), lambda: dequantize(ours)),
            "reference": (lambda: reference_quantize(x, bits, axis), lambda: reference_dequantize(*ref, x.shape)),
        }
        theirs = quanto_pair(x, bits, axis)
        if theirs is not None:
            impls["quanto"] = theirs
        for impl, (quant, dequant) in impls.items():
            for op, fn in (("quantize", quant), ("dequantize", dequant)):
                rows.append({"bits": bits, "axis": axis, "op": op, "impl": impl,
                             "seconds": median_seconds(fn, reps, x.device)})
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
            "dequantized": (store.dequantized, None),
            "keep": (lambda s: s.keep(keep), filled),
            "dequantized_after_keep": (evicted.dequantized, None),
        }
        for op, (fn, setup) in ops.items():
            rows.append({"op": op, "impl": impl, "seconds": median_seconds(fn, reps, keys.device, setup)})
    return rows


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ours / other per (bits, axis, op): > 1 means ours is slower."""
    out = []
    by = {(r["bits"], r["axis"], r["op"], r["impl"]): r["seconds"] for r in rows}
    for (bits, axis, op, impl), s in by.items():
        if impl != "ours":
            out.append({"bits": bits, "axis": axis, "op": op, "against": impl,
                        "ours_over_other": by[(bits, axis, op, "ours")] / s})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--tokens", type=int, default=6144)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=7)
    args = parse(p, argv)
    if args.smoke:
        args.tokens, args.reps = 256, 2
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    shape = (args.heads, args.tokens, args.head_dim)
    keys = torch.randn(*shape, generator=gen).to(device, getattr(torch, args.dtype))
    values = torch.randn(*shape, generator=gen).to(device, getattr(torch, args.dtype))
    codec = [row for bits in (4, 2) for row in codec_rows(keys, bits, args.reps)]
    mib = keys.nbytes / 2**20
    for r in codec:
        r["mib_per_s"] = mib / r["seconds"]
    data = {
        "shape": {"heads": args.heads, "tokens": args.tokens, "head_dim": args.head_dim, "dtype": args.dtype,
                  "group_size": GROUP, "mib_per_tensor": mib},
        "codec": codec, "ratios": ratios(codec), "store": store_rows(keys, values, args.reps),
    }
    write_result(args.out, "kivi_throughput", data, args.smoke, device)
    return data


if __name__ == "__main__":
    main()
