"""The field's bounded memories at 1x to 8x a stream: accelerator bytes of StreamMem, StreamingVLM and StreamingTOM.

    python -m bench.peers_memory            # the real SmolLM2 (424 s, one thread, a loaded 2-core VM)
    python -m bench.peers_memory --smoke    # tiny sizes, for the tests

Each method streams the symbolic model's glyph frames (12 tokens each) through the session the job builds, to 1, 2,
4 and 8 times a base stream of twice |M|, and asks one question at the end. The figures are the bytes the session
counts on the accelerator (:meth:`StreamingSession._accelerator_bytes`: the stores, the method's own tensors, a
question's view): the peak over every streaming step and the answer. The claims checked: StreamMem's and
StreamingVLM's peaks are flat, the 8x peak within 5% of the 1x; StreamingTOM's OQM grows by exactly
:func:`infinipotv.kv.oqm.group_bytes` per layer and stored frame, its peak being that growth plus the retrieved
view (|M| dequantized tokens).
"""

from __future__ import annotations

from typing import Any

import torch

from bench.common import FrameStream, load_model, parse, parser, quant_config, write_result
from infinipotv.config import EvalConfig, RunConfig, as_run_config, policy_config
from infinipotv.factory import build_parts
from infinipotv.kv.oqm import group_bytes

METHODS = ("streammem", "streamingvlm", "streamingtom")
FLAT_TOLERANCE = 0.05
SPEC = {"budget": 144, "chunk_frames": 2, "frames": 24, "multiples": [1, 2, 4, 8]}  # base: 288 tokens = 2 |M|
SMOKE_SPEC = {"budget": 100, "chunk_frames": 2, "frames": 10, "multiples": [1, 2]}
PARAMS = {"streamingtom": {"retain": 6}}  # G = 6 of the 12 glyphs per frame


def measure(adapter, method: str, n_frames: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Stream ``n_frames`` glyph frames under ``method``; the accelerator bytes of every step and of one answer."""
    compress = policy_config(method)(budget=spec["budget"], **PARAMS.get(method, {}))
    cfg = RunConfig(model=adapter.cfg, compress=compress, quant=quant_config("fp16"))
    cfg.eval = EvalConfig(chunk_frames=spec["chunk_frames"])
    cfg = as_run_config(cfg)
    sess = build_parts(cfg, adapter).session(cfg.compress.c_ratio)
    sess.start("bench")
    stream = FrameStream(48, 64, n_frames, spec["chunk_frames"], scene_frames=6, glyph_patch=16)
    for chunk in stream:
        sess.feed(chunk, fps=2.0)
    sess.finish()
    answer = sess.ask("What was shown?", max_new_tokens=1)
    steps = [s.accelerator_bytes for s in sess.trace]
    out = {"frames": n_frames, "peak_steps": max(steps), "last_step": steps[-1], "answer": answer.accelerator_bytes}
    out["peak"] = max(out["peak_steps"], out["answer"])
    if method == "streamingtom":
        out["oqm_bytes"] = sum(sum(layer.store.nbytes().values()) for layer in sess.video.cache.layers)
        out["groups"] = sess.video.cache.layers[0].store.oqm.n_groups
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    spec = SMOKE_SPEC if args.smoke else SPEC
    adapter = load_model("symbolic")
    results: dict[str, Any] = {"spec": spec, "methods": {}}
    for method in METHODS:
        rows = [measure(adapter, method, m * spec["frames"], spec) for m in spec["multiples"]]
        results["methods"][method] = rows
    claims = {}
    for method in ("streammem", "streamingvlm"):
        rows = results["methods"][method]
        claims[f"{method}_flat"] = rows[-1]["peak"] <= (1 + FLAT_TOLERANCE) * rows[0]["peak"]
    tom = results["methods"]["streamingtom"]
    retain = PARAMS["streamingtom"]["retain"]
    per_group = adapter.n_layers * group_bytes(adapter.n_kv_heads, adapter.head_dim, retain, 4, 2)
    growth = [(b["oqm_bytes"] - a["oqm_bytes"]) / (b["groups"] - a["groups"]) for a, b in zip(tom, tom[1:])]
    results["streamingtom_bytes_per_frame"] = {"measured": growth, "analytic": per_group}
    claims["streamingtom_growth_is_analytic"] = all(g == per_group for g in growth)
    results["claims"] = claims
    path = write_result(args.out, "peers_memory", results, args.smoke, torch.device(adapter.device))
    for method, rows in results["methods"].items():
        print(method, " ".join(f"{r['frames']}f:{r['peak'] / 2**20:.2f}MiB" for r in rows))
    print("claims:", claims, "->", path)
    return results


if __name__ == "__main__":
    main()
