"""bench.mukv_encode runs end to end at tiny sizes: MuKV's side prefills run every vision token three times (a
patch block, its frame, its segment), in more forwards than ReKV's one prefill per chunk, and take longer."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch


def test_mukv_encode_runs_in_smoke_mode(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        data = importlib.import_module("bench.mukv_encode").main(["--smoke", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert json.loads((tmp_path / "mukv_encode.json").read_text())["smoke"] is True
    rekv, mukv = data["medians"]["rekv"], data["medians"]["mukv"]
    assert data["mukv_over_rekv_forward_tokens"] == 3.0  # 8 frames: two whole segments, no tail
    assert mukv["forwards"] == 8 * (4 + 1) + 2 and rekv["forwards"] == 4
    assert data["mukv_over_rekv_total"] > 1.0
