"""KIVI storage under continual compression, through the whole job: bytes stay under a byte budget."""

from __future__ import annotations

import json

import pytest

from tests.helpers import lines, run_py


PARTIAL_GROUPS = pytest.mark.xfail(
    strict=True,
    reason="known: after repeated passes, key groups with few survivors keep their scale/zero rows, so the int4 cache "
           "grows past the full-group formula the byte budget is converted with (results/perf/report.md, section 1)")


@pytest.mark.parametrize("quant", [pytest.param("int4", marks=PARTIAL_GROUPS), "int2"])
def test_cache_bytes_stay_under_the_byte_budget(tmp_path, quant):
    run = tmp_path / quant
    out = run_py(
        "model=tiny_qwen2vl", "model.max_frames=400", "compress=tar_van_pool", "compress.budget=null",
        "compress.budget_mib=0.1", f"quant={quant}", "quant.residual_length=32", "benchmark=symbolic",
        f"benchmark.root={tmp_path / 'data'}", "benchmark.options.n_videos=2", "benchmark.options.frames=200",
        "eval.chunk_frames=8", f"run_dir={run}",
    )
    assert out.returncode == 0, out.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    steps = lines(run / "memory.jsonl")
    passes = [s for s in steps if s["compress"]]
    assert passes, "the stream never reached the budget"
    assert metrics["budget_bytes"] <= 0.1 * 2**20
    assert all(s["cache_bytes"] <= metrics["budget_bytes"] for s in steps)
    assert all(s["cache_bytes"] == sum(s["cache_bytes_by_part"].values()) == sum(s["layer_bytes"]) for s in steps)
    assert {"key_codes", "value_codes", "residual"} <= set(steps[-1]["cache_bytes_by_part"])
