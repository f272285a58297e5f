"""bench.svlm_rounding measures StreamingVLM's re-rotation drift: it runs in smoke mode, its error is the dtype's
rounding alone (none in fp32), and rounding at every eviction drifts further than one rotation."""

from __future__ import annotations

import torch

from bench.svlm_rounding import adapter_for, drift, main


def test_the_drift_is_rounding_alone_and_grows_with_evictions(tmp_path) -> None:
    rows = main(["--smoke", "--threads", "1", "--out", str(tmp_path)])["rows"]
    assert {r["dtype"] for r in rows} == {"float16", "bfloat16"} and (tmp_path / "svlm_rounding.json").is_file()
    assert all(r["evictions"] == 3 and r["moved"] > r["one_rotation"] > 0 for r in rows)  # W = 4 frames, chunks of 1
    exact = drift(adapter_for("tiny_llava_ov"), 64, (4, 4), 1, torch.float32)
    assert exact["moved"] < 1e-5 and exact["one_rotation"] == 0
