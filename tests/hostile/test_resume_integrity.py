"""What a resume finds changed under a finished run is named in one line, never silently kept: an edited
annotation (its answers are set aside and answered again), a memory.jsonl cut mid-line (its file and line), a byte
count that is not a number (its file and line, not a TypeError)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from infinipotv.job import run_job
from infinipotv.rundir import CONFIG, MEMORY, METRICS, PREDICTIONS, REJECTED
from tests.helpers import lines
from tests.hostile.run_helpers import toy_config


@pytest.fixture(scope="session")
def finished(tmp_path_factory) -> Path:
    """A finished run of the tiny model on the toy Video-MME; its data under ``data/`` beside it."""
    root = tmp_path_factory.mktemp("integrity")
    run_job(toy_config(root / "data"), root / "run")
    return root


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    """A copy of the finished run and its data, to tamper with (its config.yaml names the copied data)."""
    shutil.copytree(finished / "data", tmp_path / "data")
    shutil.copytree(finished / "run", tmp_path / "run")
    config = tmp_path / "run" / CONFIG
    config.write_text(config.read_text().replace(str(finished / "data"), str(tmp_path / "data")))
    return tmp_path


def test_an_edited_annotation_is_answered_again_with_one_warning(copy, capsys):
    """An annotation edited under a finished run: its old answer is set aside (one line naming the change) and the
    question answered again with the new gold"""
    config = toy_config(copy / "data")
    table = pd.read_parquet(config.benchmark.annotations)
    qid, gold = table.loc[0, "question_id"], table.loc[0, "answer"]
    new_gold = "A" if gold != "A" else "B"
    table.loc[0, "answer"] = new_gold
    table.to_parquet(config.benchmark.annotations)
    before = {r["question_id"]: r for r in lines(copy / "run" / PREDICTIONS)}
    capsys.readouterr()
    metrics = run_job(config, copy / "run")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, warnings
    assert f"question {qid!r} changed since it was answered (gold: {gold!r} -> {new_gold!r})" in warnings[0]
    after = {r["question_id"]: r for r in lines(copy / "run" / PREDICTIONS)}
    assert after[qid]["gold"] == new_gold and metrics["complete"] and set(after) == set(before)
    assert all(after[q] == before[q] for q in before if q != qid)  # the other answers are kept as they were
    assert [r["question_id"] for r in lines(copy / "run" / REJECTED)] == [qid]


def test_a_memory_trace_cut_mid_line_is_named_with_its_line(copy, capsys):
    """A memory.jsonl cut mid-line under a finished run: one warning naming the file and line, not a silent change
    of the metrics"""
    path = copy / "run" / MEMORY
    data = path.read_bytes()
    n_lines = data.count(b"\n")
    last = data[:-1].rfind(b"\n") + 1
    path.write_bytes(data[: last + (len(data) - last) // 2])  # the last step cut in its middle
    capsys.readouterr()
    run_job(toy_config(copy / "data"), copy / "run")
    said = capsys.readouterr().err
    assert f"warning: {path}:{n_lines}: the last line is cut short" in said, said
    assert path.read_bytes() == data[:last]


def test_a_byte_count_that_is_not_a_number_is_named_with_its_line(copy, capsys):
    """A memory.jsonl step whose byte count is a string: one warning naming the file and line, the step left out,
    no TypeError"""
    path = copy / "run" / MEMORY
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    steps[1]["accelerator_bytes"] = "9999999999999"
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    (copy / "run" / METRICS).unlink()  # a finished run keeps its metrics: they are counted again once it is gone
    capsys.readouterr()
    metrics = run_job(toy_config(copy / "data"), copy / "run")
    said = capsys.readouterr().err
    assert f"warning: {path}: 1 line(s) not a whole trace step (line 2: accelerator_bytes is '9999999999999'" in said
    assert metrics["memory"]["peak_accelerator_bytes"] < 9999999999999
    assert json.loads((copy / "run" / METRICS).read_text())["memory"] == metrics["memory"]
