"""A run's provenance names the code of every answer in it: each sitting that wrote to the run is recorded (its
commit, dirty flag, threads, host and times), not only the last; a run or a sharded run answered by different code is
refused in the tables as two such runs are; a provenance.json written before sittings were recorded still reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infinipotv.job import run_job
from infinipotv.results.collect import load_run
from infinipotv.runs import METRICS, PREDICTIONS, PROVENANCE, provenance
from tests.hostile.run_helpers import toy_config
from tests.hostile.test_aggregator import make_run, records
from tests.hostile.test_aggregator_integrity import report

A, B = "a" * 40, "b" * 40


def _sitting(monkeypatch, run_dir: Path, sha: str, dirty: bool, threads: int | str) -> dict:
    """One sitting on ``run_dir`` at commit ``sha`` (dirty or not) with ``threads=``: its metrics."""
    monkeypatch.setattr(provenance, "code_version", lambda: (sha, dirty))
    config = toy_config(run_dir.parent / "data")
    config.threads = threads
    return run_job(config, run_dir)


def _killed_before_its_last_answer(run_dir: Path) -> None:
    """The run as a kill before its last answer leaves it: that answer and metrics.json not written."""
    answers = (run_dir / PREDICTIONS).read_bytes().splitlines(keepends=True)
    (run_dir / PREDICTIONS).write_bytes(b"".join(answers[:-1]))
    (run_dir / METRICS).unlink()


def test_every_sitting_of_a_run_is_recorded(tmp_path, monkeypatch):
    """A run resumed at another commit, on a dirty tree, with other threads records both sittings, not the last"""
    run_dir = tmp_path / "run"
    _sitting(monkeypatch, run_dir, A, False, "auto")
    _killed_before_its_last_answer(run_dir)
    _sitting(monkeypatch, run_dir, B, True, 1)
    recorded = json.loads((run_dir / PROVENANCE).read_text())
    first, second = recorded["sittings"]
    assert (first["git_sha"], first["dirty"], first["threads"]) == (A, False, "auto")
    assert (second["git_sha"], second["dirty"], second["threads"]) == (B, True, 1)
    assert recorded["git_sha"] == f"{A},{B}-dirty"
    assert (recorded["start"], recorded["end"]) == (first["start"], second["end"]) and first["end"]
    assert load_run(run_dir).mixed_code == [f"git_sha {B}-dirty vs {A}"]


def test_a_provenance_file_from_before_sittings_reads_as_its_one_sitting(tmp_path, monkeypatch):
    """A provenance.json from before sittings were recorded (as committed studies hold) is a resume's first sitting"""
    run_dir = tmp_path / "run"
    _sitting(monkeypatch, run_dir, A, True, "auto")
    old = json.loads((run_dir / PROVENANCE).read_text())
    del old["sittings"], old["threads"]
    (run_dir / PROVENANCE).write_text(json.dumps(old))
    assert load_run(run_dir).mixed_code == []
    _killed_before_its_last_answer(run_dir)
    _sitting(monkeypatch, run_dir, A, False, 1)
    first, second = json.loads((run_dir / PROVENANCE).read_text())["sittings"]
    assert (first["git_sha"], first["dirty"], first["start"]) == (A, True, old["start"])
    assert load_run(run_dir).mixed_code == [f"git_sha {A} vs {A}-dirty"]


def test_answers_found_with_no_record_of_their_code_are_not_credited_to_the_resume(tmp_path, monkeypatch):
    """Answers a resume finds with no provenance.json are credited to a sitting of unknown code, never the resume's

    A run killed before sittings were recorded wrote its provenance only at its end."""
    run_dir = tmp_path / "run"
    _sitting(monkeypatch, run_dir, A, False, "auto")
    _killed_before_its_last_answer(run_dir)
    (run_dir / PROVENANCE).unlink()
    _sitting(monkeypatch, run_dir, B, False, "auto")
    recorded = json.loads((run_dir / PROVENANCE).read_text())
    assert [s["git_sha"] for s in recorded["sittings"]] == [None, B] and recorded["git_sha"] == f"unknown,{B}"


def _provenance_of(run_dir: Path, *shas: str) -> None:
    """``run_dir``'s provenance.json naming sittings at ``shas``, in order (one: as written before sittings were)."""
    recorded = json.loads((run_dir / PROVENANCE).read_text())
    sittings = [{"git_sha": sha, "dirty": False, "packages": recorded["packages"]} for sha in shas]
    recorded["git_sha"] = ",".join(shas)
    if len(shas) > 1:
        recorded["sittings"] = sittings
    (run_dir / PROVENANCE).write_text(json.dumps(recorded))


@pytest.mark.parametrize("layout", ["one run, two sittings", "two shards"])
def test_a_run_answered_by_different_code_is_refused_as_two_runs_are(tmp_path, capsys, layout):
    """A run resumed at another commit, or shards made at different commits, is refused in the tables in one line

    The line names the run and the commits; --allow-mixed uses it."""
    if layout == "two shards":
        for shard, sha in ((0, "1111111"), (1, "2222222")):
            run_dir = make_run(tmp_path / "runs", f"s{shard}", recs=records()[shard::2], benchmark__shard=f"{shard}/2")
            _provenance_of(run_dir, sha)
        name = "s0 [2 of 2 shards]"
    else:
        _provenance_of(make_run(tmp_path / "runs", "run"), "1111111", "2222222")
        name = "run"
    code, err = report(tmp_path, capsys=capsys)
    errors = [line for line in err if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and not (tmp_path / "out").exists(), err
    assert errors[0].startswith(f"error: run {name} was answered by different code (git_sha 2222222 vs 1111111)")
    assert report(tmp_path, "--allow-mixed", capsys=capsys)[0] == 0
