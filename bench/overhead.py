"""Compression overhead: the share of the streaming time spent in compression passes, per policy and model, at the
paper's budget shape (|M| = 6K tokens, c_ratio 0.75).

    python -m bench.overhead            # a few minutes on 2 CPU cores
    python -m bench.overhead --smoke    # tiny sizes, for the tests

Streaming time is the wall time of every ``feed`` (vision encoding, prefill, compression), synchronised on GPU;
compression time is what the session's own trace records for its passes (:class:`CompressRecord.seconds`). Each
stream runs to 2x |M|: a first pass at |M|, then one every |M| - |C| tokens. The share reported is the steady
state's, over the steps after the first pass (first calls and the growth to |M| left out); the whole stream's is
kept in the JSON. The symbolic model (the real SmolLM2-135M reading glyph frames, ``model=symbolic``) is the one the
<= 1% claim is checked on; every evicting policy runs on the tiny Qwen2-VL, whose language model is so small that
any pass is a visible share of its streaming time (as on the other tiny models).
"""

from __future__ import annotations

from typing import Any

import torch

from bench.common import PAPER_BUDGET, TINY_SHAPE, load_model, parse, parser, write_result
from bench.streams import StreamSpec, run_stream
from infinipotv.compress import POLICIES
from infinipotv.models import ADAPTERS, glyphs

STREAM_MULTIPLE = 2.0
CLAIM = 0.01  # InfiniPot-V's "almost no cost in time", as the issue states it: <= 1% of streaming time
TINY = {f"options.{k}": v for k, v in TINY_SHAPE.items()}
# Frames sized so that a chunk stays under |M| - |C| = 1500 tokens (spec: a chunk must be smaller than that).
MODELS = {
    "symbolic": StreamSpec(
        "symbolic", frame_hw=glyphs.frame_size((3, 4)), chunk_frames=64, glyph_patch=glyphs.DEFAULT_PATCH
    ),
    "tiny_qwen2vl": StreamSpec(
        "tiny_qwen2vl", frame_hw=(224, 224), chunk_frames=16, overrides={**TINY, "max_pixels": 224 * 224}
    ),
    "tiny_qwen25vl": StreamSpec(
        "tiny_qwen25vl", frame_hw=(224, 224), chunk_frames=16, overrides={**TINY, "max_pixels": 224 * 224}
    ),
    "tiny_llava_ov": StreamSpec("tiny_llava_ov", frame_hw=(84, 84), chunk_frames=64, overrides=TINY),
}
SMOKE = {
    "tiny_qwen2vl": StreamSpec(
        "tiny_qwen2vl", frame_hw=(112, 112), chunk_frames=2, budget=128, overrides={**TINY, "options.num_layers": 1}
    )
}
MAIN_POLICY = "tar_van_pool"


def evicting_policies() -> list[str]:
    return sorted(name for name, cls in POLICIES.items() if cls.evicts)


def plan(smoke: bool, only: list[str] | None = None) -> list[tuple[str, StreamSpec, list[tuple[str, str]]]]:
    """(model, spec, [(policy, quant)]): InfiniPot-V in fp16 and int4 on every model (the symbolic one when its
    adapter is installed), and every evicting policy on the tiny Qwen2-VL (a symbolic stream takes minutes)."""
    if smoke:
        return [
            (
                "tiny_qwen2vl",
                SMOKE["tiny_qwen2vl"],
                [(MAIN_POLICY, "fp16"), ("uniform_tokens", "fp16"), (MAIN_POLICY, "int4")],
            )
        ]
    out = []
    for name, spec in MODELS.items():
        if (spec.model == "symbolic" and "symbolic" not in ADAPTERS) or (only and name not in only):
            continue
        policies = evicting_policies() if name == "tiny_qwen2vl" else [MAIN_POLICY]
        out.append((name, spec, [(p, "fp16") for p in policies] + [(MAIN_POLICY, "int4")]))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), help="only these models (default: all)")
    args = parse(p, argv)
    rows = []
    device = torch.device("cpu")
    for name, spec, configs in plan(args.smoke, args.models):
        adapter = load_model(spec.model, **spec.overrides)
        device = adapter.device
        for policy, quant in configs:
            result = run_stream(adapter, spec, policy, quant, int(STREAM_MULTIPLE * spec.budget))
            t = result["totals"]
            print(
                f"{name:14s} {policy:15s} {quant:5s} passes {t['steady_passes']:2d}  "
                f"share {100 * t['steady_compress_share']:.2f}%  ({t['steady_compress_seconds']:.2f} s of "
                f"{t['steady_stream_seconds']:.1f} s)",
                flush=True,
            )
            rows.append(
                {
                    "model": name,
                    "policy": policy,
                    "quant": quant,
                    **t,
                    "seconds_per_pass": t["steady_compress_seconds"] / max(t["steady_passes"], 1),
                    "model_shape": {
                        "layers": adapter.n_layers,
                        "kv_heads": adapter.n_kv_heads,
                        "head_dim": adapter.head_dim,
                        "dtype": str(adapter.dtype).removeprefix("torch."),
                    },
                    "tokens_per_frame": result["tokens_per_frame"],
                    "chunk_tokens": result["tokens_per_frame"] * spec.chunk_frames // adapter.frames_per_step,
                }
            )
        del adapter
    claim_model = "symbolic" if any(r["model"] == "symbolic" for r in rows) else None
    data = {
        "budget": PAPER_BUDGET if not args.smoke else SMOKE["tiny_qwen2vl"].budget,
        "c_ratio": 0.75,
        "stream_multiple": STREAM_MULTIPLE,
        "claim": CLAIM,
        "claim_model": claim_model,
        "rows": rows,
    }
    write_result(args.out, "overhead", data, args.smoke, device)
    return data


if __name__ == "__main__":
    main()
