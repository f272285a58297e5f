"""Time to the first answer token after a long stream: full cache vs continual compression, fp16 and int4.

    python -m bench.ttft            # a few minutes on 2 CPU cores
    python -m bench.ttft --smoke    # tiny sizes, for the tests

The model and streams are those of :mod:`bench.memory`. At 1x, 4x and 16x |M| streamed, one question is asked on
the memory and timed twice: to its first token (the question's prefill plus the first logits: what a user waits for)
and to a greedy answer of up to 16 tokens (every decode step reads the whole cache; it may stop earlier at an
end-of-sequence token, so decode steps are compared per token). Questions never change the
memory, so the stream goes on unchanged after each.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.common import load_model, parse, parser, write_result
from bench.memory import MULTIPLES, PAIRS, SMOKE_SPEC, SPEC
from bench.streams import run_stream, warm_up

ANSWER_TOKENS = 16


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    spec = SMOKE_SPEC if args.smoke else SPEC
    adapter = load_model(spec.model, **spec.overrides)
    runs = []
    for policy, quant in PAIRS:
        warm_up(adapter, spec, policy, quant)
        result = run_stream(
            adapter,
            spec,
            policy,
            quant,
            int(max(MULTIPLES) * spec.budget),
            checkpoints=MULTIPLES,
            answer_tokens=ANSWER_TOKENS,
        )
        runs.append({k: v for k, v in result.items() if k not in ("steps", "peak_method", "baseline_bytes")})
        print(
            f"{policy:13s} {quant:5s} first token (ms): "
            + "  ".join(f"{c['multiple']:g}x {1e3 * c['first_token_seconds']:.1f}" for c in result["checkpoints"]),
            flush=True,
        )
    by_config = {(r["policy"], r["quant"]): r for r in runs}
    speedup = []
    for quant in ("fp16", "int4"):
        full, compressed = by_config[("full", quant)], by_config[("tar_van_pool", quant)]
        for a, b in zip(full["checkpoints"], compressed["checkpoints"]):
            per_token = (
                a["decode_seconds_per_token"] / b["decode_seconds_per_token"]
                if a["decode_seconds_per_token"] and b["decode_seconds_per_token"]
                else None
            )
            speedup.append(
                {
                    "quant": quant,
                    "multiple": a["multiple"],
                    "first_token_full_over_compressed": a["first_token_seconds"] / b["first_token_seconds"],
                    "decode_token_full_over_compressed": per_token,
                }
            )
    data = {"spec": spec.describe(), "answer_tokens": ANSWER_TOKENS, "runs": runs, "speedup": speedup}
    write_result(args.out, "ttft", data, args.smoke, torch.device(runs[0]["device"]))
    return data


if __name__ == "__main__":
    main()
