"""Scoring: the paper's rows come out exactly from question counts chosen to give them; errors count as wrong."""

from __future__ import annotations

from typing import Any

import pytest

from infinipotv.config import BenchmarkConfig
from infinipotv.data.mlvu import MLVU, TASKS
from infinipotv.data.scoring import summary
from infinipotv.data.streamingbench import StreamingBench
from infinipotv.data.videomme import VideoMME


def records(field: str, counts: dict[str, tuple[int, int]], **categories: str) -> list[dict[str, Any]]:
    """``counts[value] = (correct, total)`` -> prediction records with that category value."""
    out = []
    for value, (correct, total) in counts.items():
        out += [
            {
                "benchmark": "x",
                "question_id": f"{value}-{i}",
                "video_id": f"{value}-v",
                "prompt": "",
                "categories": {field: value, **categories},
                "output": "A",
                "parsed": "A",
                "gold": "A" if i < correct else "B",
                "correct": i < correct,
                "error": None,
            }
            for i in range(total)
        ]
    return out


def bench(cls):
    return cls(BenchmarkConfig(name=cls.name, root="/nonexistent"))


# (correct, total) per task, in TASKS order, chosen so each accuracy rounds to the seed's Table 2 row.
MLVU_ROWS = {
    "FP16": (
        [(36, 41), (7, 10), (8, 11), (39, 50), (23, 36), (9, 17), (7, 20)],
        [87.8, 70.0, 72.7, 78.0, 63.9, 52.9, 35.0],
        (78.9, 71.5, 44.0, 65.8),
    ),
    "INT4": (
        [(13, 15), (37, 54), (23, 31), (4, 5), (23, 36), (5, 9), (17, 50)],
        [86.7, 68.5, 74.2, 80.0, 63.9, 55.6, 34.0],
        (77.6, 72.7, 44.8, 66.1),
    ),
}


@pytest.mark.parametrize("row", list(MLVU_ROWS))
def test_mlvu_groups_and_avg_reproduce_table_1(row: str) -> None:
    counts, tasks, (hol, single, multi, avg) = MLVU_ROWS[row]
    scores = bench(MLVU).score(records("task_type", dict(zip(TASKS, counts))))
    assert [round(scores["tasks"][t], 1) for t in TASKS] == tasks
    groups = scores["groups"]
    assert [round(groups[g], 1) for g in ("holistic", "single_detail", "multi_detail")] == [hol, single, multi]
    assert round(scores["avg"], 1) == avg and scores["overall"] == scores["avg"]
    assert scores["missing"] == [] and scores["n"] == sum(t for _, t in counts)


def test_mlvu_missing_tasks_are_reported_not_zero() -> None:
    scores = bench(MLVU).score(records("task_type", {"plotQA": (3, 4), "count": (1, 4)}))
    assert scores["missing"] == ["topic_reasoning", "anomaly_reco", "needle", "ego", "order"]
    assert scores["groups"]["holistic"] is None
    assert scores["groups"]["single_detail"] == 75.0 and scores["groups"]["multi_detail"] == 25.0
    assert scores["avg"] == 50.0 and "needle" not in scores["tasks"]


def test_videomme_slm_avg_reproduces_table_1() -> None:
    recs = records("duration", {"short": (373, 500), "medium": (307, 500), "long": (262, 500)})
    scores = bench(VideoMME).score(recs)
    assert [round(scores[c], 1) for c in ("S", "M", "L", "Avg")] == [74.6, 61.4, 52.4, 62.8]
    assert scores["breakdown"]["duration"]["short"] == scores["S"]


def test_errors_count_as_wrong_and_are_counted() -> None:
    recs = records("duration", {"short": (2, 2), "long": (1, 2)})
    recs[0]["error"] = "video file not found"  # marked correct, but errored
    scores = summary(recs, ["duration"])
    assert scores["overall"] == 50.0 and scores["n"] == 4 and scores["n_errors"] == 1
    assert scores["breakdown"]["duration"] == {"long": 50.0, "short": 50.0}
    assert scores["counts"]["duration"] == {"long": 2, "short": 2}


def test_empty_run_has_no_accuracy() -> None:
    assert summary([], ["duration"])["overall"] is None
    assert bench(VideoMME).score([])["S"] is None


def test_streamingbench_scores_per_task_and_group() -> None:
    group = "Real-Time Visual Understanding"
    recs = records("task_type", {"Counting": (1, 2), "Object Perception": (2, 2)}, group=group)
    scores = bench(StreamingBench).score(recs)
    assert scores["tasks"] == {"Counting": 50.0, "Object Perception": 100.0}
    assert scores["groups"] == {group: 75.0} and scores["overall"] == 75.0
