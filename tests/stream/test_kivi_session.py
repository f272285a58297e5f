"""KIVI storage under continual compression, through the whole job: bytes stay under a byte budget."""

from __future__ import annotations

import json

import pytest

from tests.helpers import lines, run_py


@pytest.mark.parametrize("quant", ["int4", "int2", "fp16"])
def test_cache_bytes_stay_under_the_byte_budget(tmp_path, quant):
    """Under KIVI, eviction leaves key groups partial (their scale/zero rows stay), so |M| tokens can cost more than
    the formula that converted the budget: the session then keeps fewer tokens (further passes), never more bytes.
    Full precision costs exactly the formula: its passes always keep |C|. The window is short (R = 16): the formula
    counts it at its largest (R + G - 1 tokens at full precision), slack that a longer one leaves to hide the
    thinned groups' cost in this short stream."""
    run = tmp_path / quant
    out = run_py(
        "model=tiny_qwen2vl",
        "model.max_frames=400",
        "compress=tar_van_pool",
        "compress.budget=null",
        "compress.budget_mib=0.06",
        f"quant={quant}",
        "quant.residual_length=16",
        "benchmark=symbolic",
        f"benchmark.root={tmp_path / 'data'}",
        "benchmark.options.n_videos=2",
        "benchmark.options.frames=400",
        "eval.chunk_frames=2",
        f"run_dir={run}",
    )
    assert out.returncode == 0, out.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    steps = lines(run / "memory.jsonl")
    passes = [s for s in steps if s["compress"]]
    assert passes, "the stream never reached the budget"
    assert metrics["budget_bytes"] <= 0.06 * 2**20
    assert all(s["cache_bytes"] <= metrics["budget_bytes"] for s in steps)
    assert all(s["cache_bytes"] == sum(s["cache_bytes_by_part"].values()) == sum(s["layer_bytes"]) for s in steps)
    if quant != "fp16":
        assert {"key_codes", "value_codes", "residual"} <= set(steps[-1]["cache_bytes_by_part"])
    extra = [s["compress"]["passes"] > 1 for s in passes]
    if quant == "fp16":
        assert not any(extra)
    if quant == "int4":  # this long stream thins int4 key groups past the formula: the cap acts
        assert any(extra)
