"""An answer-time gate's share (WeaveTime's ``gate.retrieval_share`` in metrics.json) is counted from the answers:
a sharded run's is its shards' answers together, not its first shard's, so a table column reading it is right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infinipotv.data.scoring import gate_counts
from infinipotv.results import build_table, load_runs, parse_table
from infinipotv.results.example import MLVU_CORRECT, _mlvu_records, memory_trace, run_config, write_run
from infinipotv.runs import METRICS


def _with_gates(records: list[dict], retrieve_every: int) -> list[dict]:
    return [
        {**r, "gate": {"branch": "retrieval" if i % retrieve_every == 0 else "cache_only", "entropy": 0.5}}
        for i, r in enumerate(records)
    ]


def test_the_share_of_a_sharded_run_counts_every_shards_answers(tmp_path: Path, published) -> None:
    records = _mlvu_records(MLVU_CORRECT[("tar_van_pool", "fp16", 6000)], seed=0)
    half = len(records) // 2
    parts = [_with_gates(records[:half], 1), _with_gates(records[half:], 4)]  # all retrieve, then a quarter
    for i, part in enumerate(parts):
        config = run_config("mlvu", "weavetime", "fp16", 6000, "field")
        config["benchmark"]["shard"] = f"{i}/2"
        run_dir = tmp_path / f"shard{i}"
        write_run(run_dir, config, part, memory_trace("weavetime", "fp16", 6000))
        metrics = json.loads((run_dir / METRICS).read_text())
        metrics["gate"] = gate_counts(part)  # as the job writes it
        (run_dir / METRICS).write_text(json.dumps(metrics))
    (run,) = load_runs(tmp_path)
    expected = gate_counts(parts[0] + parts[1])
    assert run.metrics["gate"] == expected and expected["n"] == len(records)
    assert expected["retrieval_share"] == pytest.approx((half + -(-(len(records) - half) // 4)) / len(records))
    spec = {
        "name": "gate",
        "stub": ["Method"],
        "columns": [{"benchmark": "mlvu", "metric": "gate.retrieval_share", "label": "Retrieval share", "decimals": 3}],
        "rows": {"by": ["policy"], "stub": ["{policy}"]},
    }
    table = build_table(parse_table(spec), [run], published, experiment="field")
    assert table.rows[0].cells[0].value == pytest.approx(expected["retrieval_share"])


def test_records_without_a_gate_have_no_share() -> None:
    assert gate_counts([{"question_id": "q"}]) is None
    assert gate_counts([{"gate": {"branch": "cache_only"}}]) == {"cache_only": 1, "n": 1, "retrieval_share": 0.0}
