"""MuKV through run_job on the tiny model of every family (docs/retrieval.md): every question answered, bytes by
place (the accelerator's answer holds the prefix and the retrieved blocks, the host every block) and time to first
token recorded as every retrieval method's; the encode time includes the side prefills."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.config import CompressConfig, EvalConfig, QuantConfig, RunConfig
from infinipotv.data.toy import BUILDERS
from infinipotv.job import read_predictions, run_job
from infinipotv.stream.reference import FAMILIES, tiny_config


@pytest.mark.parametrize("family", FAMILIES)
def test_mukv_runs_end_to_end_on_every_family(family: str, tmp_path: Path) -> None:
    bench = BUILDERS["videomme"](tmp_path / "data")
    cfg = RunConfig(
        model=tiny_config(family),
        compress=CompressConfig(name="mukv", budget=96),
        quant=QuantConfig(),
        benchmark=bench,
        eval=EvalConfig(chunk_frames=2),
    )
    metrics = run_job(cfg, tmp_path / "run")
    records = read_predictions(tmp_path / "run" / "predictions.jsonl")
    answered = [r for r in records if not r["error"]]
    assert metrics["complete"] and answered  # the toy set holds a missing video and a malformed row, each its error
    assert all(r["accelerator_bytes"] > 0 for r in answered)
    assert metrics["memory"]["peak_host_bytes"] > 0 and metrics["time"]["ttft_s"]["n"] == len(answered)
