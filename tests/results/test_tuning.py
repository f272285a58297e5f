"""The development rule of a study's tuning (:mod:`infinipotv.results.tuning`): a setting replaces a method's default
(its upstream proportion) only when it gains the margin, a partial grid never chooses, and the study's script reads
the choice back as the overrides of its tuned runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from infinipotv import compress
from infinipotv.results.collect import Run
from infinipotv.results.tuning import main, tuning_report
from infinipotv.runs import CONFIG, config_conflict

SPEC = {
    "where": {"benchmark.seed": 2, "compress.budget": 144},
    "check": {"benchmark.seed": 2, "compress.budget": 288},
    "score": "overall",
    "margin": 3.0,
    "grids": {"rekv": {"compress.c_ratio": [0.25, 0.75]}, "tar_van_pool": {"compress.c_ratio": [0.5]}},
}


def run(policy: str, c_ratio: float, score: float, budget: int = 144, seed: int = 2) -> Run:
    config = {
        "experiment": "fair_peers",
        "compress": {"name": policy, "budget": budget, "c_ratio": c_ratio},
        "quant": {"name": "fp16"},
        "benchmark": {"name": "symbolic", "seed": seed},
        "model": {"family": "symbolic"},
    }
    name = f"{policy}-{c_ratio}-{budget}-{seed}"
    predictions = [{"question_id": str(i)} for i in range(100)]
    return Run((Path(name),), name, config, predictions, {"overall": score}, {}, {}, True, False)


REKV = compress.POLICIES["rekv"].default_c_ratio


def test_the_rule_keeps_the_default_within_the_margin_and_takes_a_clear_gain() -> None:
    runs = [
        run("rekv", REKV, 20.0),
        run("rekv", 0.25, 26.0),  # +6: replaces the default
        run("rekv", 0.75, 23.0),
        run("tar_van_pool", 0.75, 30.0),
        run("tar_van_pool", 0.5, 32.0),  # +2: within the margin, the default stays
        run("rekv", 0.25, 25.0, budget=288),
        run("rekv", REKV, 21.0, budget=288),
    ]
    text, chosen = tuning_report(runs, SPEC)
    assert chosen["rekv"] == {
        "knob": "compress.c_ratio",
        "default": REKV,
        "chosen": 0.25,
        "overrides": ["compress.c_ratio=0.25"],
        "complete": True,
    }
    assert chosen["tar_van_pool"]["chosen"] == 0.75 and chosen["tar_van_pool"]["overrides"] == []
    assert "| rekv | c_ratio | 0.25 |  | 26.0 | 100 | **yes** | 25.0 |" in text
    assert f"| rekv | c_ratio | {REKV:.4g} | yes | 20.0 | 100 |  | 21.0 |" in text


def test_a_grid_of_two_knobs_varies_one_at_a_time() -> None:
    """WeaveTime's split and its gate: each value runs with the other knob at its default, and a run that sets both
    stands for neither; the choice names its own knob."""
    spec = {**SPEC, "grids": {"weavetime": {"compress.c_ratio": [0.25], "compress.threshold": [0.0, 0.3]}}}
    split = compress.POLICIES["weavetime"].default_c_ratio

    def weavetime(c_ratio: float, threshold: float, score: float) -> Run:
        r = run("weavetime", c_ratio, score)
        r.config["compress"]["threshold"] = threshold
        return replace(r, id=f"{r.id}-{threshold}")

    runs = [
        weavetime(split, 0.6, 30.0),
        weavetime(0.25, 0.6, 31.0),
        weavetime(split, 0.0, 36.0),
        weavetime(split, 0.3, 33.0),
        weavetime(0.25, 0.0, 90.0),  # both moved: no trial of the grid
    ]
    text, chosen = tuning_report(runs, spec)
    assert chosen["weavetime"] == {
        "knob": "compress.threshold",
        "default": 0.6,
        "chosen": 0.0,
        "overrides": ["compress.threshold=0.0"],
        "complete": True,
    }
    assert "| weavetime | threshold | 0 |  | 36.0 | 100 | **yes** |" in text
    assert "| weavetime | c_ratio | 0.25 |  | 31.0 | 100 |  |" in text


def test_a_partial_grid_never_chooses() -> None:
    _, chosen = tuning_report([run("rekv", REKV, 20.0), run("rekv", 0.25, 40.0)], SPEC)
    assert chosen["rekv"]["complete"] is False and chosen["rekv"]["overrides"] is None


def test_the_script_reads_the_choice_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fair_peers"
    out.mkdir()
    done = {"knob": "compress.c_ratio", "default": REKV, "chosen": 0.25, "overrides": ["compress.c_ratio=0.25"]}
    kept = {**done, "chosen": REKV, "overrides": []}
    partial = {**done, "chosen": None, "overrides": None, "complete": False}
    tuning = {"rekv": {**done, "complete": True}, "swa": {**kept, "complete": True}, "van": partial}
    (out / "tuning.json").write_text(json.dumps(tuning))
    assert main(["fair_peers", "--out", str(out), "--overrides", "rekv"]) == 0
    assert main(["fair_peers", "--out", str(out), "--overrides", "swa"]) == 0
    assert capsys.readouterr().out.splitlines() == ["compress.c_ratio=0.25", ""]
    assert main(["fair_peers", "--out", str(out), "--overrides", "van"]) == 2
    assert "van has no complete tuning" in capsys.readouterr().err


def test_a_study_may_edit_its_tables_and_tuning_grid_under_finished_runs(tmp_path: Path) -> None:
    """A sitting that adds a method to the study's grid or tables resumes the runs already committed: the `table`
    and `tuning` blocks say how a study reports, not what a run computes; the run's own keys still refuse."""
    (tmp_path / CONFIG).write_text("seed: 0\nlabel: upstream\ntable: {a: 1}\ntuning: {grids: {rekv: {}}}\n")
    edited = "seed: 0\nlabel: upstream\ntable: {a: 2}\ntuning: {grids: {rekv: {}, mukv: {}}}\n"
    assert config_conflict(tmp_path, edited) is None
    assert "label" in (config_conflict(tmp_path, edited.replace("upstream", "tuned")) or "")
