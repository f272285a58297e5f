"""Host memory of the retrieval methods at Qwen2-VL-7B's shapes over an hour of video, in FP16, INT4 and INT2.

    python -m bench.retrieval_host_shapes            # a minute of tensors per method and storage, scaled to an hour
    python -m bench.retrieval_host_shapes --smoke    # a few frames, for the tests

Each method's host store (:class:`~infinipotv.kv.host.HostStore`, the class the sessions use, with KIVI codes
grouped by retrieval block under INT4/INT2) is built for ONE layer from real random tensors of Qwen2-VL-7B's shapes
(its config, ``bench/shapes.py``, no weights: 4 KV heads of 128 dims, bf16, M-RoPE's three position rows) and a
stream at one frame a second of ``TOKENS`` tokens a frame, holding what the method's rule keeps (below). The bytes
are the store's own accounting, ``HostStore.nbytes()`` by part, plus what the method keeps beside its stores. Scaled
only where the accounting is linear: by the 28 layers (every layer holds the same counts), and, for the stores that
grow by the same pieces every frame or segment (ReKV, WeaveTime, StreamKV, MuKV), by the hour's frames over the
frames built (``scale`` in the output); LiveVLM's host memory is bounded, built to its steady state and not scaled
in time. What each holds, per layer:

- ReKV and WeaveTime: every frame, one block, with its representative row (``[H * D]`` fp32); WeaveTime's host is
  ReKV's (its fine score reads these keys, no second copy).
- StreamKV: per closed segment of ``SEGMENT`` frames (a stand-in: segments close on content, between 4 and 64
  frames), its ``int(SEGMENT * 0.6)`` kept frames (``compression_ratio``, the layers' mean) and its summary frame,
  each with its row; the open segment's input embeddings (``[frames, 3584]`` bf16, at most ``max_segment_size``
  frames: counted at ``SEGMENT`` frames, not scaled).
- LiveVLM: its long-term memory at |M| = 6000 and c_ratio 0.5: capacity (|M| - |C|) / 0.4 = 7,500 tokens, filled by
  the tokens leaving the window a frame at a time and thinned to the capacity after each (a random subset stands
  in for the vision-sink buckets' choice: under KIVI a key row stays while any of its tokens does).
- MuKV: per frame 4 patch blocks of 50 tokens keeping 5, the frame block keeping 20, and every 4 frames a segment
  block keeping 640 (``MuKV.kept``), each block its own key groups; the representatives (one fp32 ``[H * D]`` row
  per block, the last layer's, not per layer) and the open segment's embeddings beside them.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.common import parse, parser, write_result
from bench.shapes import QWEN2VL_7B
from infinipotv.compress import build
from infinipotv.compress.retrieval import block_means
from infinipotv.kv.coded import Coding
from infinipotv.kv.host import HostStore, Offloaded

TEXT = QWEN2VL_7B["text"]
LAYERS, HEADS = TEXT["num_hidden_layers"], TEXT["num_key_value_heads"]
DIM = TEXT["hidden_size"] // TEXT["num_attention_heads"]
HIDDEN = TEXT["hidden_size"]
DTYPE = torch.bfloat16
ROWS = 3  # M-RoPE's (t, h, w) positions per token
TOKENS = 200  # tokens a frame (~200 at one frame a second, issue 57)
HOUR = 3600  # frames: an hour at one frame a second
SEGMENT = 16  # StreamKV's stand-in segment length (frames)
BUDGET, C_RATIO, PAGE_RATIO = 6000, 0.5, 0.4  # LiveVLM's |M|, split and retrieved share
STORAGES = {"fp16": None, "int4": Coding(4, 32, DTYPE), "int2": Coding(2, 32, DTYPE)}


def tokens(n: int, first: int, gen: torch.Generator) -> Offloaded:
    """``n`` tokens of random keys and values of the model's shapes, stream ids from ``first``."""
    keys = torch.randn(HEADS, n, DIM, generator=gen).to(DTYPE)
    values = torch.randn(HEADS, n, DIM, generator=gen).to(DTYPE)
    ids = torch.arange(first, first + n)
    return Offloaded(keys, values, ids, ids.expand(ROWS, n).clone())


def frame(f: int, gen: torch.Generator, rows: bool = True) -> Offloaded:
    """Frame ``f``'s tokens, with its representative row (ReKV's mean key, heads concatenated) when ``rows``."""
    got = tokens(TOKENS, f * TOKENS, gen)
    if rows:
        got.block_keys = block_means(got.keys, TOKENS)
    return got


def rekv(coding: Coding | None, frames: int, gen: torch.Generator) -> tuple[list[HostStore], int, int]:
    host = HostStore(torch.device("cpu"), coding=coding)
    for f in range(frames):
        host.append(frame(f, gen), TOKENS)
    return [host], 0, 0


def streamkv(coding: Coding | None, frames: int, gen: torch.Generator) -> tuple[list[HostStore], int, int]:
    host = HostStore(torch.device("cpu"), coding=coding)
    kept = int(SEGMENT * build("streamkv").compression_ratio)
    for segment in range(frames // SEGMENT):
        for f in range(kept + 1):  # the kept frames, then the summary frame
            host.append(frame(segment * SEGMENT + f, gen), TOKENS)
    return [host], 0, SEGMENT * TOKENS * HIDDEN * DTYPE.itemsize  # the open segment's input embeddings


def livevlm(coding: Coding | None, frames: int, gen: torch.Generator) -> tuple[list[HostStore], int, int]:
    host = HostStore(torch.device("cpu"), coding=coding)
    capacity = int((BUDGET - round(BUDGET * C_RATIO)) / PAGE_RATIO)
    for f in range(frames):
        host.append(tokens(TOKENS, f * TOKENS, gen))  # a frame leaving the window, one piece
        if len(host) > capacity:
            host.keep(torch.randperm(len(host), generator=gen)[:capacity].sort().values)
    return [host], 0, 0


def mukv(coding: Coding | None, frames: int, gen: torch.Generator) -> tuple[list[HostStore], int, int]:
    rule = build("mukv")
    kept = rule.kept(TOKENS)
    stores = {g: HostStore(torch.device("cpu"), coding=coding) for g in kept}
    blocks = 0
    for f in range(frames):
        for g in ("patch",) * rule.patch_split + ("frame",) + ("segment",) * ((f + 1) % rule.segment_frames == 0):
            stores[g].append(tokens(kept[g], f * TOKENS, gen))
            blocks += 1
    embeds = (rule.segment_frames - 1) * TOKENS * HIDDEN * DTYPE.itemsize  # the open segment's, at its largest
    return list(stores.values()), blocks * HEADS * DIM * 4, embeds  # one fp32 representative a block


METHODS = {"rekv": rekv, "weavetime": rekv, "streamkv": streamkv, "livevlm": livevlm, "mukv": mukv}
GROWS = {"rekv": True, "weavetime": True, "streamkv": True, "livevlm": False, "mukv": True}


def measure(method: str, storage: str, frames: int) -> dict[str, Any]:
    """One layer's host store built over ``frames`` frames, by part, and scaled to the model and the hour; what the
    method keeps beside its stores (``grows``: MuKV's representatives, one set for all layers; ``fixed``: an open
    segment's embeddings) is added once."""
    stores, grows, fixed = METHODS[method](STORAGES[storage], frames, torch.Generator().manual_seed(0))
    parts: dict[str, int] = {}
    for store in stores:
        for name, n in store.nbytes().items():
            parts[name] = parts.get(name, 0) + n
    time_scale = HOUR / frames if GROWS[method] else 1.0
    scaled = {name: round(n * LAYERS * time_scale) for name, n in parts.items() if n}
    beside_scaled = round(grows * time_scale) + fixed
    total = sum(scaled.values()) + beside_scaled
    return {
        "method": method,
        "storage": storage,
        "frames_built": frames,
        "tokens_per_layer_built": sum(len(s) for s in stores),
        "scale": {"layers": LAYERS, "time": time_scale},
        "parts_one_layer_built": parts,
        "parts_hour_model": scaled,
        "beside_stores_hour": beside_scaled,
        "total_hour_bytes": total,
        "total_hour_gib": total / 2**30,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    frames = 2 * SEGMENT if args.smoke else 4 * SEGMENT  # whole segments: StreamKV's and MuKV's pieces repeat
    runs = [measure(m, s, frames) for m in METHODS for s in STORAGES]
    by = {(r["method"], r["storage"]): r for r in runs}
    for r in runs:
        ratio = r["total_hour_bytes"] / by[(r["method"], "fp16")]["total_hour_bytes"]
        r["vs_fp16"] = ratio
        print(f"{r['method']:9s} {r['storage']:4s} {r['total_hour_gib']:8.2f} GiB  ({ratio:.3f}x fp16)")
    data = {
        "model": "Qwen2-VL-7B (config only: 28 layers, 4 KV heads of 128, bf16)",
        "stream": {"fps": 1, "seconds": HOUR, "tokens_per_frame": TOKENS},
        "method_of_scaling": (
            "one layer's host store built from real random tensors over frames_built frames, bytes from "
            "HostStore.nbytes(); multiplied by the layers, and by the hour's frames over frames_built where the "
            "store grows by the same pieces (not LiveVLM's, bounded: built to its steady state)"
        ),
        "runs": runs,
    }
    write_result(args.out, "retrieval_host_shapes", data, args.smoke, torch.device("cpu"))
    return data


if __name__ == "__main__":
    main()
