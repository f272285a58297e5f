"""The retrieval benches run end to end at tiny sizes and record bytes by place for every method."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch


def test_retrieval_benches_run_in_smoke_mode(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        data = importlib.import_module("bench.retrieval_memory").main(["--smoke", "--out", str(tmp_path)])
        peers = importlib.import_module("bench.gpu_peers").main(["--smoke", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert json.loads((tmp_path / "retrieval_memory.json").read_text())["smoke"] is True
    rekv = next(r for r in data["runs"] if r["method"] == "rekv")
    hosts = [c["host_bytes"] for c in rekv["checkpoints"]]
    assert hosts == sorted(hosts) and hosts[-1] == 8 * hosts[0]  # every frame offloaded: host bytes follow the stream
    assert len({c["accelerator_peak_bytes"] for c in rekv["checkpoints"]}) == 1  # the accelerator is flat
    streamkv = next(r for r in data["runs"] if r["method"] == "streamkv")
    assert len({c["accelerator_peak_bytes"] for c in streamkv["checkpoints"]}) == 1
    assert 0 < streamkv["checkpoints"][-1]["host_bytes"] < hosts[-1]  # each closed segment keeps some of its frames
    weavetime = next(r for r in data["runs"] if r["method"] == "weavetime")  # no second copy of the keys
    assert [c["host_bytes"] for c in weavetime["checkpoints"]] == hosts
    assert len({c["accelerator_peak_bytes"] for c in weavetime["checkpoints"]}) == 1
    mukv = next(r for r in data["runs"] if r["method"] == "mukv")  # the prefix and |M| retrieved tokens at most:
    peaks = [c["accelerator_peak_bytes"] for c in mukv["checkpoints"]]  # 6 frames hold 1 of the 2 segments it reads
    assert peaks == sorted(peaks) and len(set(peaks[1:])) == 1
    mukv_hosts = [c["host_bytes"] for c in mukv["checkpoints"]]
    assert mukv_hosts == sorted(mukv_hosts) and 6 <= mukv_hosts[-1] / mukv_hosts[0] <= 10  # every block kept
    by_method = {(r["model"], r["method"]): r for r in peers["runs"]}
    assert by_method[("llava_ov", "tar_van_pool")]["host_bytes"] == 0 < by_method[("llava_ov", "rekv")]["host_bytes"]
    assert {m for _, m in by_method} == {"tar_van_pool", "rekv", "livevlm", "streammem", "streamingvlm", "streamingtom"}


def test_host_memory_at_real_shapes_reads_the_stores_own_bytes(tmp_path: Path) -> None:
    """bench.retrieval_host_shapes at tiny length: KIVI-coded host stores by part, about a third (INT4) and a fifth
    (INT2) of FP16 for ReKV, WeaveTime's the same as ReKV's, LiveVLM's not scaled in time (bounded)."""
    data = importlib.import_module("bench.retrieval_host_shapes").main(["--smoke", "--out", str(tmp_path)])
    by = {(r["method"], r["storage"]): r for r in data["runs"]}
    assert 0.30 < by[("rekv", "int4")]["vs_fp16"] < 0.36 and 0.18 < by[("rekv", "int2")]["vs_fp16"] < 0.23
    assert {"key_codes", "key_scale_zero", "value_codes", "bookkeeping"} <= set(
        by[("rekv", "int4")]["parts_hour_model"]
    )
    assert by[("weavetime", "int4")]["total_hour_bytes"] == by[("rekv", "int4")]["total_hour_bytes"]
    assert by[("livevlm", "fp16")]["scale"]["time"] == 1.0
