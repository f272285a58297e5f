"""The rescore CLI on a hand-written run directory: re-parse, re-score, print, and write only when asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infinipotv.data.rescore import main, rescore

REPO = Path(__file__).resolve().parents[2]
PROMPT = "In q?\nA. one\nB. two\nC. three\nD. four\nAnswer with the option's letter from the given choices directly.\n"


def record(qid: str, output: str, gold: str, parsed: str | None, error: str | None = None) -> str:
    return json.dumps(
        {
            "benchmark": "longvideobench",
            "question_id": qid,
            "video_id": "v",
            "prompt": PROMPT,
            "categories": {"duration_group": "15", "question_category": "E2O", "topic_category": "T"},
            "output": output,
            "parsed": parsed,
            "gold": gold,
            "correct": parsed == gold,
            "error": error,
        }
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.yaml").write_text(
        "model:\n  family: symbolic\nbenchmark:\n  name: longvideobench\n  root: /nonexistent\n  parser: faithful\n"
        "  limit: 3\n  seed: 0\n"
    )
    lines = [
        record("q1", "D", "B", "D"),  # an earlier attempt, superseded after a resume
        record("q1", "Answer: B", "B", "A"),
        record("q2", "C", "C", "C"),
        record("q3", "", "A", None, error="video file not found: /nonexistent/videos/v.mp4"),
        '{"question_id": "q9", "outp',
    ]  # a job killed mid-write
    (tmp_path / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "metrics.json").write_text(json.dumps({"memory": {"peak_bytes": 1}}))
    return tmp_path


def test_rescore_with_the_configured_parser(run_dir: Path) -> None:
    scores, text = rescore(run_dir)
    assert (round(scores["overall"], 1), scores["n"], scores["n_errors"]) == (33.3, 3, 1)
    assert "| overall | 33.3 |" in text and "0 of 3 answers parse differently" in text and "1 unreadable" in text
    assert "### breakdown: question_category" in text
    assert json.loads((run_dir / "metrics.json").read_text()) == {"memory": {"peak_bytes": 1}}  # no --write


def test_strict_parser_fixes_the_quirk_and_write_updates_metrics(run_dir: Path, capsys) -> None:
    assert main([str(run_dir), "--parser", "strict", "--write"]) == 0
    assert "| overall | 66.7 |" in capsys.readouterr().out
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["memory"] == {"peak_bytes": 1} and metrics["parser"] == "strict"
    assert round(metrics["scores"]["overall"], 1) == 66.7 and metrics["subset"]["is_subset"] is True


def test_cli_module_runs(run_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "infinipotv.data.rescore", str(run_dir), "--parser", "strict"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
    ).stdout
    assert "longvideobench rescored with the strict parser" in out and "1 of 3 answers parse differently" in out


def test_missing_run_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        rescore(tmp_path)
