"""WeaveTime through run_job on the tiny model of every family (docs/retrieval.md): every answer records its
branch and entropy, metrics.json the share of answers that retrieved, and bytes by place and time to first token
as every retrieval method's."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.config import CompressConfig, EvalConfig, QuantConfig, RunConfig
from infinipotv.data.toy import BUILDERS
from infinipotv.job import read_predictions, run_job
from infinipotv.stream.reference import FAMILIES, tiny_config


@pytest.mark.parametrize("family", FAMILIES)
def test_weavetime_runs_end_to_end_and_records_its_branches(family: str, tmp_path: Path) -> None:
    bench = BUILDERS["videomme"](tmp_path / "data")
    cfg = RunConfig(
        model=tiny_config(family),
        compress=CompressConfig(name="weavetime", budget=96, c_ratio=0.5),
        quant=QuantConfig(),
        benchmark=bench,
        eval=EvalConfig(chunk_frames=2),
    )
    metrics = run_job(cfg, tmp_path / "run")
    records = read_predictions(tmp_path / "run" / "predictions.jsonl")
    answered = [r for r in records if not r["error"]]
    assert metrics["complete"] and answered
    assert all(r["accelerator_bytes"] > 0 and 0.0 <= r["gate"]["entropy"] <= 1.0 for r in answered)
    retrieved = [r for r in answered if r["gate"]["branch"] == "retrieval"]
    assert all((r["gate"]["entropy"] >= 0.6) == (r in retrieved) for r in answered)
    gate = metrics["gate"]
    assert gate["n"] == len(answered) and gate["retrieval_share"] == len(retrieved) / len(answered)
    assert metrics["memory"]["peak_host_bytes"] > 0 and metrics["time"]["ttft_s"]["n"] == len(answered)
