"""A report whose numbers or files its own inputs contradict: a metrics.json that disagrees with its predictions, a
rescore with another parser, a report replaced in another format, a table named to write outside ``--out``. The
cell, its paired difference and the files written all follow the answers and the spec, or one line says why not."""

from __future__ import annotations

import json
from pathlib import Path

from infinipotv.data.rescore import rescore
from infinipotv.results.__main__ import main as results_main
from infinipotv.rundir import CONFIG, METRICS
from tests.hostile.test_aggregator import make_run, records

PAIRED = """
experiment: tiny_study
table:
  name: main
  caption: Tiny
  stub: [Method]
  columns:
    - {benchmark: videomme, score: overall, label: All, paired: true}
  rows:
    by: [policy]
    stub: ["{policy}"]
"""


def paired_report(tmp_path: Path, capsys, *args: str) -> tuple[int, list[str], str]:
    """The results CLI on ``tmp_path/runs`` with a paired column (the first row, full, the baseline): its exit code,
    its stderr lines and main.md."""
    path = tmp_path / "tiny_study.yaml"
    path.write_text(PAIRED)
    code = results_main([str(path), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), *args])
    md = tmp_path / "out" / "main.md"
    return code, capsys.readouterr().err.strip().splitlines(), md.read_text() if md.is_file() else ""


def test_a_metrics_json_its_predictions_contradict_is_scored_from_them(tmp_path: Path, capsys):
    """A metrics.json saying 100.0 where its predictions score 0.0: one warning naming the run; cell and Δ agree"""
    make_run(tmp_path / "runs", "full", recs=records(12, right=6), compress__name="full")
    run_dir = make_run(tmp_path / "runs", "tar", recs=records(12, right=0))
    metrics = json.loads((run_dir / METRICS).read_text())
    metrics["scores"]["overall"] = 100.0
    (run_dir / METRICS).write_text(json.dumps(metrics))
    code, err, md = paired_report(tmp_path, capsys)
    assert code == 0
    warned = [line for line in err if line.startswith("warning: ")]
    assert warned == [
        f"warning: {run_dir / METRICS}: its scores are not its predictions' (overall is 100.0 there, 0.0 from them); "
        f"the tables use the predictions' (`python -m infinipotv.data.rescore {run_dir} --write` stores them)"
    ]
    assert "| tar_van_pool | 0.0 | 12 | -50.0 [" in md


def test_a_run_rescored_with_another_parser_counts_those_answers_in_its_difference(tmp_path: Path, capsys):
    """A run rescored with --parser strict --write: its cell and its paired difference both count the strict answers"""
    make_run(tmp_path / "runs", "full", recs=records(12, right=6), compress__name="full")
    answers = [{**r, "output": "It is a Dog", "parsed": "D", "gold": "D", "correct": True} for r in records(12)]
    run_dir = make_run(tmp_path / "runs", "tar", recs=answers)  # faithful reads D from "Dog"; strict reads nothing
    rescore(run_dir, "strict", write=True)
    code, err, md = paired_report(tmp_path, capsys)
    assert code == 0 and not [line for line in err if line.startswith("warning: ")], err
    assert "| tar_van_pool | 0.0 | 12 | -50.0 [" in md


def test_a_config_whose_policy_is_a_list_is_skipped_not_a_row(tmp_path: Path, capsys):
    """A run whose config.yaml says compress.name: [tar, van] is skipped with a warning, never a table row"""
    make_run(tmp_path / "runs", "full", recs=records(12, right=6), compress__name="full")
    run_dir = make_run(tmp_path / "runs", "listed", recs=records(12, right=9), compress__name=["tar", "van"])
    code, err, md = paired_report(tmp_path, capsys)
    assert code == 0
    assert (
        f"warning: {run_dir / CONFIG}: compress.name is ['tar', 'van'], not a name (a hand-edited config.yaml?); "
        "run directory skipped" in err
    )
    assert "tar" not in md and "| full | 50.0 |" in md
