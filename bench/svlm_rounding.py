"""StreamingVLM's rounding under ``pos_mode=shrink``: keys rotated on read, against keys re-rotated at every eviction
and one rotation.

    python -m bench.svlm_rounding            # the settings the tables use (a minute on a CPU)
    python -m bench.svlm_rounding --smoke    # one setting, for the tests

Under ``pos_mode=shrink`` a stored key is rotated at its prefill position, then moved back by the frames pruned
before each later chunk. The method keeps it as stored and rotates it by its whole shift as it is read
(:class:`~infinipotv.kv.rotary.RotaryStore`: ``on_read``); before issue 47 item 5 it was moved in the store, rounded to
the store's dtype at every eviction (``rerotated``); upstream keeps the key before RoPE and rotates it once. Per
setting (a model's RoPE, |M|, frames per chunk) the key that survives the most evictions, ``ceil(W / c) - 1`` with
W = |M| // p frames and c frames a chunk, is followed through them: random pre-RoPE keys (one frame of p tokens, 2
heads, standard normal) in the dtype are rotated at the frame's first position (fp32 arithmetic, rounded to the
dtype: the forward's key), moved c frames back per eviction both ways, and compared with the exact fp32 rotation at
the final position, as the max error over the largest key. "One rotation" is the same pre-RoPE key (in the dtype)
rotated once at the final position and rounded: upstream's error.

RoPE: the real SmolLM2-135M of the CPU study (head_dim 64), and the 7B models' head_dim 128 at theta 1e6 on tiny
random-weight models (RoPE depends on nothing else): Qwen2-VL's M-RoPE (sections of the tiny rule) and
LLaVA-OneVision's 1-D RoPE. The time either way costs is :mod:`bench.svlm_cost`'s.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bench.common import load_model, parse, parser, write_result
from infinipotv.kv.rotary import RotaryStore
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.models.base import ModelAdapter

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
HEAD_128 = {"options.num_layers": 1, "options.hidden_size": 256, "options.num_heads": 2, "options.num_kv_heads": 1}
# (model, |M|, tokens per frame, grid, raw frames per chunk): experiments/cpu_peers.yaml (|M| = 144 and 288, the
# symbolic glyph frames, chunks of 2) and experiments/peers_table.yaml (|M| = 6000, chunks of 4 raw frames;
# Qwen2-VL-7B at model.max_pixels=100352: 128 tokens a model frame; LLaVA-OV-7B: 196).
SETTINGS = [
    ("symbolic", 144, (3, 4), 2),
    ("symbolic", 288, (3, 4), 2),
    ("tiny_qwen2vl", 6000, (8, 16), 4),
    ("tiny_llava_ov", 6000, (14, 14), 4),
]
SMOKE_SETTINGS = [("tiny_llava_ov", 64, (4, 4), 1)]


def adapter_for(name: str) -> ModelAdapter:
    return load_model(name) if name == "symbolic" else load_model(name, **HEAD_128)


def drift(adapter: ModelAdapter, budget: int, grid: tuple[int, int], chunk: int, dtype: torch.dtype) -> dict:
    """The largest surviving key's error after its evictions, rotated on read and re-rotated at each, and one
    rotation's, over the largest key."""
    per_frame = grid[0] * grid[1]
    step = adapter.frames_per_step
    c = chunk // step  # model frames a chunk
    window = max(1, budget // per_frame)
    evictions = math.ceil(window / c) - 1
    start = len(adapter.prefix_ids())

    def at(frame: int) -> torch.Tensor:
        return adapter.frame_positions(frame * step, 1, grid, 2.0, start).cpu()

    generator = torch.Generator().manual_seed(0)
    pre = torch.randn(2, per_frame, adapter.head_dim, generator=generator)
    zero = torch.zeros_like(at(0))
    first = evictions * c  # the frame's index in the memory at its prefill; moved back c frames per eviction
    prefilled = adapter.rerotate(pre.to(dtype), zero, at(first))
    store = RotaryStore(FullPrecisionStore(dtype), adapter.rerotate, rows=zero.shape[0])
    store.append(prefilled, torch.zeros_like(prefilled), torch.arange(per_frame))
    rerotated = prefilled
    for k in range(evictions):
        old, new = at(first - k * c), at(first - (k + 1) * c)
        store.move(new - old)
        rerotated = adapter.rerotate(rerotated, old, new)
    exact = adapter.rerotate(pre, zero, at(0))
    once = adapter.rerotate(pre.to(dtype), zero, at(0))
    scale = float(exact.abs().max())

    def error(keys: torch.Tensor) -> float:
        return float((keys.float() - exact).abs().max()) / scale

    return {
        "window_frames": window,
        "evictions": evictions,
        "on_read": error(store.read()[0]),
        "rerotated": error(rerotated),
        "one_rotation": error(once),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    rows = []
    for name, budget, grid, chunk in SMOKE_SETTINGS if args.smoke else SETTINGS:
        adapter = adapter_for(name)
        for dtype_name, dtype in DTYPES.items():
            row = {"model": name, "budget": budget, "grid": list(grid), "chunk_frames": chunk, "dtype": dtype_name}
            row |= drift(adapter, budget, grid, chunk, dtype)
            row["ratio"] = row["on_read"] / row["one_rotation"]
            row["rerotated_ratio"] = row["rerotated"] / row["one_rotation"]
            rows.append(row)
            print(
                f"{name:14s} |M|={budget:5d} {dtype_name:9s} {row['evictions']:3d} evictions: "
                f"on read {row['on_read']:.2e} ({row['ratio']:.1f}x), re-rotated {row['rerotated']:.2e} "
                f"({row['rerotated_ratio']:.1f}x), one rotation {row['one_rotation']:.2e}"
            )
    write_result(args.out, "svlm_rounding", {"rows": rows}, args.smoke, torch.device("cpu"))
    return {"rows": rows}


if __name__ == "__main__":
    main()
