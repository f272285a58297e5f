"""The tuning rule and its command on inputs that would choose from too little or end in a traceback: a grid value
whose run was killed after one answer (100.0 on n = 1), or asked a subset, never chooses; no tuning.json, a corrupt
one, an unknown experiment or a runs folder that does not exist is one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infinipotv.results.tuning import main
from infinipotv.runs import METRICS, PREDICTIONS, PROVENANCE
from tests.hostile.test_aggregator import make_run, records

EXPERIMENT = """
experiment: tiny_study
tuning:
  where: {compress.budget: 6000}
  score: overall
  margin: 3.0
  grids:
    tar_van_pool: {compress.c_ratio: [0.5]}
"""


def tune(tmp_path: Path, *args: str, capsys) -> tuple[int, list[str]]:
    """The tuning command on ``tmp_path``'s experiment file, runs and output folder: its exit code and stderr."""
    experiment = tmp_path / "tiny_study.yaml"
    experiment.write_text(EXPERIMENT)
    argv = [str(experiment), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), *args]
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


def _default_and_grid_value(tmp_path: Path, **grid_config) -> Path:
    """The default (c_ratio 0.75: 6 of 12 right) and the grid's 0.5, every answer right: its run directory."""
    make_run(tmp_path / "runs", "default", recs=records(12, right=6))
    return make_run(tmp_path / "runs", "half", recs=records(12, right=12), compress__c_ratio=0.5, **grid_config)


def _killed_after_one_answer(run_dir: Path) -> None:
    lines = (run_dir / PREDICTIONS).read_text().splitlines(keepends=True)
    (run_dir / PREDICTIONS).write_text(lines[0])
    (run_dir / METRICS).unlink()


def test_a_grid_value_killed_after_one_answer_never_chooses(tmp_path: Path, capsys):
    """Tuning: a grid value whose run was killed after 1 answer (100.0 on n = 1) is not chosen; complete is false"""
    _killed_after_one_answer(_default_and_grid_value(tmp_path))
    code, err = tune(tmp_path, capsys=capsys)
    assert code == 0, err
    chosen = json.loads((tmp_path / "out" / "tuning.json").read_text())["tar_van_pool"]
    assert chosen["complete"] is False and chosen["chosen"] is None and chosen["overrides"] is None
    table = (tmp_path / "out" / "tuning.md").read_text()
    assert (
        "| tar_van_pool | c_ratio | 0.5 |  | – (partial: metrics.json missing (the job did not finish)) | 1 |" in table
    )
    assert main([str(tmp_path / "tiny_study.yaml"), "--out", str(tmp_path / "out"), "--overrides", "tar_van_pool"]) == 2


def test_a_grid_value_asked_a_subset_never_chooses(tmp_path: Path, capsys):
    """Tuning: a grid value whose run asked a subset of the development questions (benchmark.limit) is not chosen"""
    _default_and_grid_value(tmp_path, benchmark__limit=12)
    code, err = tune(tmp_path, capsys=capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "tuning.json").read_text())["tar_van_pool"]["complete"] is False
    assert "– (a subset of the development questions)" in (tmp_path / "out" / "tuning.md").read_text()


def test_a_grid_value_whose_shards_ran_at_two_commits_never_chooses(tmp_path: Path, capsys):
    """Tuning: a grid value whose two shards were made at different commits is not chosen"""
    make_run(tmp_path / "runs", "default", recs=records(12, right=6))
    answers = records(12, right=12)
    for i, sha in enumerate(("aaaaaaa", "bbbbbbb")):
        shard = make_run(
            tmp_path / "runs", f"half{i}", recs=answers[i::2], compress__c_ratio=0.5, benchmark__shard=f"{i}/2"
        )
        (shard / PROVENANCE).write_text(json.dumps({"git_sha": sha}))
    assert tune(tmp_path, capsys=capsys)[0] == 0
    assert json.loads((tmp_path / "out" / "tuning.json").read_text())["tar_van_pool"]["complete"] is False
    assert "– (made at 2 commits (aaaaaaa, bbbbbbb))" in (tmp_path / "out" / "tuning.md").read_text()


def test_a_complete_grid_chooses(tmp_path: Path, capsys):
    """Tuning: with every value run whole at one commit, the rule chooses and tuning.json says complete"""
    _default_and_grid_value(tmp_path)
    assert tune(tmp_path, capsys=capsys)[0] == 0
    chosen = json.loads((tmp_path / "out" / "tuning.json").read_text())["tar_van_pool"]
    assert chosen["complete"] is True and chosen["overrides"] == ["compress.c_ratio=0.5"]


BAD_INPUT = {  # case: the one line expected
    "no tuning.json": r"^error: .*tuning.json does not exist: run `python -m infinipotv.results.tuning",
    "corrupt tuning.json": r"^error: .*tuning.json is not JSON \(Expecting .*\): run .* again",
    "tuning.json a list": r"^error: tar_van_pool has no complete tuning in .*tuning.json$",
    "unknown experiment": r"^error: no experiment file experiments/no_such_study.yaml; known experiments: ",
    "missing --runs": r"^error: runs folder .*nowhere does not exist; pass --runs DIR",
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_the_tuning_command_on_bad_input_is_one_line(tmp_path: Path, capsys, case: str):
    """The tuning command without tuning.json, with a corrupt one, an unknown experiment or no runs folder: one line"""
    out = tmp_path / "out"
    out.mkdir()
    if case == "corrupt tuning.json":
        (out / "tuning.json").write_text('{"tar_van_pool": {"complete": tr')
    if case == "tuning.json a list":
        (out / "tuning.json").write_text("[]")
    if case == "unknown experiment":
        code = main(["no_such_study", "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
    elif case == "missing --runs":
        code, err = tune(tmp_path, "--runs", str(tmp_path / "nowhere"), capsys=capsys)
    else:
        code, err = tune(tmp_path, "--overrides", "tar_van_pool", capsys=capsys)
    assert code == 2 and len(err) == 1, err
    assert re.match(BAD_INPUT[case], err[0]), err[0]
