"""bench.retrieval_ranks ranks a question's needle frames under ReKV's own score (it refuses to measure any other),
and runs end to end on the fair study's development config (smoke: one generated video, its first 40 frames)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.retrieval_ranks import _Ranks, main, summarize


def test_a_needle_on_the_highest_scores_ranks_1_and_one_on_the_lowest_0() -> None:
    ranks = _Ranks()
    ranks.needle = range(3, 5)
    ranks.record(torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]), torch.tensor([3, 4]))  # the needle scores highest
    ranks.record(torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0]), torch.tensor([0, 1]))  # and lowest
    top, bottom = ranks.rows
    assert top["percentile"] == 1 - 0.25 / 2 and top["hit"] == 1  # ranks 3/4 and 4/4
    assert bottom["percentile"] == 0.25 / 2 and bottom["hit"] == 0
    assert top["hit_chance"] == pytest.approx(1 - 3 / 10)  # 2 of 5 at random miss both needle frames 3 times in 10
    summary = summarize([[top], [bottom]])
    assert summary["percentile"] == pytest.approx(0.5) and summary["hit"] == 0.5
    assert summary["percentile_ci95"][0] <= 0.5 <= summary["percentile_ci95"][1]


def test_a_needle_past_the_candidates_is_not_counted() -> None:
    ranks = _Ranks()
    ranks.needle = range(4, 8)
    ranks.record(torch.arange(5.0), torch.tensor([4]))
    assert ranks.rows == [] and summarize([]) == {"questions": 0}


def test_smoke_run_on_the_study_config(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        main(["--smoke", "--threads", "1", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    data = json.loads((tmp_path / "retrieval_ranks.json").read_text())
    assert data["smoke"] and data["questions"] >= 1 and data["policy"] == "rekv" and data["seed"] == 2
    assert len(data["per_layer"]) == 30 and 0 <= data["percentile"] <= 1 and 0 < data["hit_chance"] < 1
    assert data["percentile_ci95"][0] <= data["percentile"] <= data["percentile_ci95"][1]
    assert "| 29 |" in (tmp_path / "retrieval_ranks.md").read_text()
