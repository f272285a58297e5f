"""The field's streaming methods through run_job on the tiny model of every family, on the toy data of every
benchmark: ReKV, LiveVLM and StreamKV (docs/retrieval.md), StreamMem, StreamingVLM and StreamingTOM (docs/peers.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.config import CompressConfig, EvalConfig, QuantConfig, RunConfig
from infinipotv.data.toy import BUILDERS
from infinipotv.job import read_predictions, run_job
from infinipotv.stream.reference import FAMILIES, tiny_config

METHODS = ("rekv", "livevlm", "streammem", "streamingvlm", "streamingtom", "streamkv")
CASES = [(f, m, b) for f in FAMILIES for m in METHODS for b in sorted(BUILDERS)]
# the rest are slow (tests/data/test_end_to_end.py covers the data; tests/stream/test_peer_methods.py the peers)
FAST = {("llava_ov", "rekv", "videomme"), ("qwen2vl", "streamingtom", "videomme"), ("qwen25vl", "streamkv", "videomme")}


@pytest.mark.parametrize(
    "family, method, benchmark",
    [pytest.param(*c, marks=() if c in FAST else pytest.mark.slow) for c in CASES],
    ids=["-".join(c) for c in CASES],
)
def test_a_streaming_method_runs_end_to_end(family: str, method: str, benchmark: str, tmp_path: Path) -> None:
    bench = BUILDERS[benchmark](tmp_path / "data")
    cfg = RunConfig(
        model=tiny_config(family),
        compress=CompressConfig(name=method, budget=96, c_ratio=0.5),
        quant=QuantConfig(),
        benchmark=bench,
        eval=EvalConfig(chunk_frames=2),
    )
    metrics = run_job(cfg, tmp_path / "run")
    records = read_predictions(tmp_path / "run" / "predictions.jsonl")
    answered = [r for r in records if not r["error"]]
    assert metrics["complete"] and answered
    assert all(r["accelerator_bytes"] > 0 for r in answered)
    assert "peak_host_bytes" in metrics["memory"] and metrics["time"]["ttft_s"]["n"] == len(answered)
