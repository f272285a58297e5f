"""bench.svlm_rounding measures StreamingVLM's rounding under shrink: it runs in smoke mode, its errors are the dtype's
rounding alone (none in fp32), keys re-rotated at every eviction drift past one rotation, and keys rotated on read
(the method's path) stay within two roundings of a rotated key whatever the evictions."""

from __future__ import annotations

import torch

from bench.svlm_rounding import adapter_for, drift, main


def test_rotation_on_read_is_bounded_where_re_rotation_drifts(tmp_path) -> None:
    rows = main(["--smoke", "--threads", "1", "--out", str(tmp_path)])["rows"]
    assert {r["dtype"] for r in rows} == {"float16", "bfloat16"} and (tmp_path / "svlm_rounding.json").is_file()
    for r in rows:
        u = torch.finfo(getattr(torch, r["dtype"])).eps / 2
        assert r["evictions"] == 3 and r["rerotated"] > r["one_rotation"] > 0  # W = 4 frames, chunks of 1
        assert r["on_read"] <= 3 * u  # the forward's rounding, then one more as it is read
    exact = drift(adapter_for("tiny_llava_ov"), 64, (4, 4), 1, torch.float32)
    assert exact["on_read"] < 1e-5 and exact["rerotated"] < 1e-5 and exact["one_rotation"] == 0


def test_the_error_on_read_does_not_grow_with_evictions() -> None:
    """At |M| = 64 then 1024 tokens of 16 a frame (3, then 63 evictions survived), keys rotated on read keep the
    same error bound while re-rotated ones drift further."""
    adapter = adapter_for("tiny_llava_ov")
    short, long = (drift(adapter, budget, (4, 4), 1, torch.bfloat16) for budget in (64, 1024))
    assert long["evictions"] == 63 and long["rerotated"] > 2 * short["rerotated"]
    assert long["on_read"] <= 3 * torch.finfo(torch.bfloat16).eps / 2
