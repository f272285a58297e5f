"""The study scripts (experiments/study.sh and the studies that source it) on a lane that fails, a typo'd phase, and a
sitting started anywhere: a failed lane fails the study once both lanes have ended, an unknown phase runs nothing,
and a sitting's log names the commit by the rule its runs' provenance.json follows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infinipotv.runs.provenance import git_sha
from tests.helpers import ROOT

EXPERIMENT = "probe_study"


def study(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """``body`` run in bash after sourcing study.sh as a study does, in ``tmp_path`` (its log goes there), with this
    checkout's package first on the path, as a study run from the repository's root has it."""
    script = f"EXPERIMENT={EXPERIMENT}\nsource {ROOT / 'experiments' / 'study.sh'}\n{body}"
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def log_lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "results" / "runs" / EXPERIMENT / "study.log").read_text().splitlines()


@pytest.mark.parametrize("failing", ["lane_a", "lane_b"])
def test_a_failed_lane_fails_the_study_once_both_lanes_have_ended(tmp_path: Path, failing: str):
    """study.sh: a failed lane fails the study once both lanes have ended, and nothing is compacted after it"""
    lanes = {"lane_a": "sleep 2; touch a_ended", "lane_b": "sleep 2; touch b_ended"}
    lanes[failing] = "false"
    body = "\n".join(f"{name}() {{ {code}; }}" for name, code in lanes.items())
    done = study(tmp_path, f"{body}\nrun_lanes lane_a lane_b\ntouch compacted")
    assert done.returncode == 1, done.stderr
    other = "b" if failing == "lane_a" else "a"
    assert (tmp_path / f"{other}_ended").exists() and not (tmp_path / "compacted").exists()
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"error: lane {failing} of {EXPERIMENT} failed"), errors
    assert log_lines(tmp_path)[-1].endswith(f"failed: {failing}")


def test_a_sittings_log_names_the_commit_as_its_runs_provenance_does(tmp_path: Path):
    """study.sh logs a sitting's commit by provenance.json's own rule for -dirty, wherever the study is started"""
    done = study(tmp_path, "lane_a() { :; }\nlane_b() { :; }\nrun_lanes lane_a lane_b")
    assert done.returncode == 0, done.stderr
    assert log_lines(tmp_path)[0].endswith(f"lane_a + lane_b start at {git_sha(short=True)}")


def test_the_one_rule_for_dirty_counts_code_not_output(tmp_path: Path):
    """The one -dirty rule: a change to tracked code is dirty; output under results/ and untracked files are not"""
    git = ["git", "-c", "user.email=probe@example.com", "-c", "user.name=probe"]
    (tmp_path / "results").mkdir()
    (tmp_path / "code.py").write_text("a = 1\n")
    (tmp_path / "results" / "table.md").write_text("| a |\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "start"]):
        subprocess.run([*git, *args], cwd=tmp_path, check=True)
    (tmp_path / "results" / "table.md").write_text("| b |\n")
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert not git_sha(tmp_path).endswith("-dirty")
    (tmp_path / "code.py").write_text("a = 2\n")
    assert git_sha(tmp_path).endswith("-dirty") and git_sha(tmp_path, short=True).endswith("-dirty")


def test_an_unknown_phase_of_the_fair_study_is_one_line_and_runs_nothing(tmp_path: Path):
    """fair_peers.sh with an unknown phase (tset) is one line listing the phases, before any step runs"""
    calls = tmp_path / "calls"
    recorder = tmp_path / "python"
    recorder.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    recorder.chmod(0o755)
    script = ROOT / "experiments" / "fair_peers.sh"
    done = subprocess.run(
        ["bash", str(script), "tset"], env={**os.environ, "PY": str(recorder)}, capture_output=True, text=True
    )
    assert done.returncode == 2 and not calls.exists()
    assert done.stderr.strip().splitlines() == [
        "error: unknown phase 'tset'; the phases: dev, m144, test, all (the default): bash "
        "experiments/fair_peers.sh [dev|m144|test|all]"
    ]
