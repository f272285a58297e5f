"""wandb tracking: an offline run holding what was logged (read back from its files), off switch, failures contained."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from omegaconf import OmegaConf

from infinipotv.results import Tracker, TrackingWarning

RUN = "int4_vs_fp16/tar_van_pool_fp16_6000_videomme"


def read_offline_run(path: Path) -> dict[str, Any]:
    """Config and summary (last value per key), history (every value per key) and whether the run's exit record is
    there, from an offline run's ``run-*.wandb`` file: a LevelDB-style log of protobuf records. wandb's service may
    still be appending to it, so a record cut off at the end of the file is left for the next read."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunk = path.read_bytes(), 7, b""  # 7-byte header ":W&B" + magic + version
    out: dict[str, Any] = {"config": {}, "summary": {}, "history": {}, "exit": False}
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # block trailer padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):  # the writer is still appending this record: read it on the next try
            break
        piece, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        chunk = piece if kind in (1, 2) else chunk + piece  # FULL/FIRST start a record, MIDDLE/LAST continue it
        if kind not in (1, 4):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        which = record.WhichOneof("record_type")
        out["exit"] |= which == "exit"
        items = {
            "run": lambda: record.run.config.update,
            "config": lambda: record.config.update,
            "summary": lambda: record.summary.update,
            "history": lambda: record.history.item,
        }.get(which)
        for item in items() if items else ():
            key, value = item.key or "/".join(item.nested_key), json.loads(item.value_json)
            if which == "history":
                out["history"].setdefault(key, []).append(value)
            else:
                out["config" if which == "run" else which][key] = value
    return out


@pytest.fixture
def run_dir(sweep_dir: Path) -> Path:
    return sweep_dir / RUN


def test_offline_run_holds_config_metrics_memory_and_tables(run_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline must be the default
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = {**OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml")), "tracking": "wandb"}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    trace = [json.loads(line) for line in (run_dir / "memory.jsonl").read_text().splitlines()]
    with Tracker.open(cfg, run_dir) as tracker:
        assert tracker.enabled
        tracker.log_metrics(metrics)
        tracker.log_memory(trace)
        tracker.log_table("main", pd.DataFrame({"row": ["fp16"], "value": [62.8], "n": [None]}))
    (wandb_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 60  # wandb's service process may still be writing the file after finish()
    while not (logged := read_offline_run(wandb_file))["exit"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert logged["config"]["compress"]["name"] == "tar_van_pool" and "table" not in logged["config"]
    assert logged["summary"]["videomme/S"] == pytest.approx(74.6)
    assert logged["summary"]["videomme/breakdown/duration/long"] == pytest.approx(52.4)
    assert logged["summary"]["memory/peak_cache_bytes"] == metrics["memory"]["peak_cache_bytes"]
    assert sorted(logged["history"]["stream/cache_bytes"]) == sorted(r["cache_bytes"] for r in trace)
    assert logged["summary"]["main/nrows"] == 1 and logged["summary"]["memory_trace/nrows"] == len(trace)
    data, partial = wandb_file.read_bytes(), tmp_path / "partial.wandb"
    for cut in range(7, len(data), max(1, len(data) // 97)):  # the file as a reader racing the writer may see it
        partial.write_bytes(data[:cut])
        assert set(read_offline_run(partial)["summary"]) <= set(logged["summary"])


def test_tracking_none_does_nothing(run_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    tracker = Tracker.open({"tracking": "none"}, run_dir)
    tracker.log_metrics({"benchmark": "videomme", "scores": {"S": 1.0}})
    tracker.close()
    assert not tracker.enabled and not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="tracking must be 'none' or 'wandb'"):
        Tracker.open({"tracking": "mlflow"}, run_dir)


class Broken:
    """A wandb run whose every call fails, as a full disk or a dead service would make it."""

    def log(self, *args, **kwargs):
        raise OSError("disk full")

    finish = log


def test_wandb_failures_become_warnings(run_dir: Path, tmp_path: Path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setattr(wandb, "init", lambda **kwargs: (_ for _ in ()).throw(RuntimeError("no service")))
    with pytest.warns(TrackingWarning, match="wandb init failed.*no service.*local outputs are unaffected"):
        tracker = Tracker.open({"tracking": "wandb"}, run_dir)
    assert not tracker.enabled
    tracker = Tracker(Broken())
    with pytest.warns(TrackingWarning, match="wandb log_metrics failed.*disk full"):
        tracker.log_metrics({"benchmark": "videomme", "scores": {"S": 1.0}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # off now: no second warning, no error
        tracker.log_table("t", pd.DataFrame({"a": [1]}))
        tracker.close()
    assert (run_dir / "metrics.json").is_file()
