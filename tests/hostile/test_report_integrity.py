"""A report whose numbers or files its own inputs contradict: a metrics.json that disagrees with its predictions, a
rescore with another parser, a report replaced in another format, a table named to write outside ``--out``. The
cell, its paired difference and the files written all follow the answers and the spec, or one line says why not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infinipotv.data.rescore import rescore
from infinipotv.results.__main__ import main as results_main
from infinipotv.runs import CONFIG, METRICS
from tests.hostile.run_helpers import run_experiment
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


def _two_runs(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "full", recs=records(12, right=6), compress__name="full")
    make_run(tmp_path / "runs", "tar", recs=records(12, right=9))


def test_force_in_another_format_replaces_the_report_whole(tmp_path: Path, capsys):
    """--force --format tex over a markdown report: the old main.md goes with the rest, never left beside main.tex"""
    _two_runs(tmp_path)
    assert paired_report(tmp_path, capsys, "--format", "md")[0] == 0
    (tmp_path / "out" / "README.md").write_text("mine")
    code, err, _ = paired_report(tmp_path, capsys, "--format", "tex")
    assert code == 2 and "already holds this report (main.md, " in err[-1]
    assert paired_report(tmp_path, capsys, "--format", "tex", "--force")[0] == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["README.md", "figures", "main.csv", "main.json", "main.tex", "runs.csv", "runs.json"]


def _report_with(tmp_path: Path, capsys, old: str, new: str) -> tuple[int, list[str]]:
    """The paired report with ``old`` replaced by ``new`` in its experiment file: exit code and stderr lines."""
    path = tmp_path / "edited.yaml"
    path.write_text(PAIRED.replace(old, new))
    code = results_main([str(path), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    return code, capsys.readouterr().err.strip().splitlines()


ESCAPES = {  # a table's name: the error after "table[0]: "
    "../../escape": "name '../../escape' is a file stem under --out: letters, digits, '_', '.', '-' only",
    "runs": "a table named 'runs' would be overwritten by the report's runs.csv: rename it",
}


@pytest.mark.parametrize("name", ESCAPES)
def test_a_table_named_to_escape_the_output_folder_is_refused(tmp_path: Path, capsys, name: str):
    """A table named ../../escape (or runs, the report's own runs.csv) is one error line; nothing is written"""
    _two_runs(tmp_path)
    code, err = _report_with(tmp_path, capsys, "name: main", f"name: {name}")
    assert code == 2 and err[-1] == f"error: {tmp_path / 'edited.yaml'}: table[0]: {ESCAPES[name]}", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edited.yaml", "runs"]


TYPOS = {
    "score": ("score: overall", "score: overal", "score 'overal' (did you mean 'overall'?); known: Avg, L, M, S"),
    "metric": (
        "score: overall, label: All, paired: true",
        "metric: memory.peak_cache_byte, label: Bytes",
        "metric 'memory.peak_cache_byte' (did you mean 'memory.peak_cache_bytes'?); known: ",
    ),
}


@pytest.mark.parametrize("kind", TYPOS)
def test_a_typo_in_a_columns_path_is_one_error_line(tmp_path: Path, capsys, kind: str):
    """A typo in a column's score: or metric: path is one error line naming the nearest known one, not a blank column"""
    _two_runs(tmp_path)
    old, new, said = TYPOS[kind]
    code, err = _report_with(tmp_path, capsys, old, new)
    assert code == 2 and err[-1].startswith(
        f"error: table 'main'.columns[0]: no run of benchmark 'videomme' has {said}"
    ), err
    assert not (tmp_path / "out").exists()


def test_a_table_block_that_is_a_number_is_one_line_in_run_py_and_the_aggregator(tmp_path: Path, capsys):
    """`table: 5` in an experiment file: one line naming the file, from run.py (before Hydra) and the aggregator"""
    _two_runs(tmp_path)
    code, err = _report_with(tmp_path, capsys, PAIRED.split("table:")[1], " 5\n")
    assert code == 2 and err == [
        f"error: {tmp_path / 'edited.yaml'}: table: must be a table (a mapping), a list of tables or {{tables: [...], "
        "figures: [...]}, got 5"
    ]
    done = run_experiment(
        tmp_path, "five", "# @package _global_\nexperiment: five\ntable: 5\n", f"run_dir={tmp_path / 'run'}"
    )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'experiments' / 'five.yaml'}: table: must be a table (a mapping), a list of tables or "
        "{tables: [...], figures: [...]}, got 5"
    ], done.stderr
    assert not (tmp_path / "run").exists()
