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
from infinipotv.runs import CONFIG, MEMORY, METRICS, PREDICTIONS, REJECTED
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


def test_a_question_moved_to_another_video_is_answered_again(copy, capsys):
    """A question moved to another video under a finished run is answered again on it, one warning naming the move

    Its old answer read the other video's frames: it is set aside, never kept."""
    config = toy_config(copy / "data")
    shutil.copy(copy / "data" / "videomme" / "data" / "vmmeA.mp4", copy / "data" / "videomme" / "data" / "vmmeC.mp4")
    table = pd.read_parquet(config.benchmark.annotations)
    qid = table.loc[1, "question_id"]
    table.loc[1, "videoID"] = "vmmeC"
    table.to_parquet(config.benchmark.annotations)
    capsys.readouterr()
    metrics = run_job(config, copy / "run")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert (
        len(warnings) == 1
        and f"question {qid!r} changed since it was answered (video_id: 'vmmeA' -> 'vmmeC')" in (warnings[0])
    ), warnings
    after = {r["question_id"]: r for r in lines(copy / "run" / PREDICTIONS)}
    assert after[qid]["video_id"] == "vmmeC" and after[qid]["error"] is None and metrics["complete"]
    assert [r["question_id"] for r in lines(copy / "run" / REJECTED)] == [qid]


def test_a_deleted_trace_step_is_named(copy, capsys):
    """A memory.jsonl step deleted by hand (not a cut line): one warning naming the video and the missing step"""
    path = copy / "run" / MEMORY
    steps = path.read_text().splitlines(keepends=True)
    path.write_text("".join(steps[:1] + steps[2:]))
    (copy / "run" / METRICS).unlink()  # a finished run keeps its metrics: they are counted again once it is gone
    capsys.readouterr()
    run_job(toy_config(copy / "data"), copy / "run")
    said = capsys.readouterr().err
    assert f"warning: {path}: steps deleted or repeated (video 'vmmeA' step(s) 1 missing)" in said, said


#: Hand edits of a finished run's files: the file, what is done to its second line, and what the warning says.
_EDITS = {
    "step-no-encode-seconds": (MEMORY, lambda step: step.pop("encode_seconds"), "line 2: no encode_seconds"),
    "step-video-id-a-list": (MEMORY, lambda step: step.update(video_id=["vmmeA"]), "line 2: video_id is ['vmmeA']"),
    "step-passes-a-text": (
        MEMORY,
        lambda step: step.update(compress={"seconds": 0.1, "passes": "2"}),
        "line 2: compress is {'seconds': 0.1, 'passes': '2'}, not a compression pass",
    ),
    "answer-no-video-id": (PREDICTIONS, lambda record: record.pop("video_id"), "line 2: no video_id"),
    "answer-error-5": (PREDICTIONS, lambda record: record.update(error=5), "line 2: error is 5, not null or a text"),
}


@pytest.mark.parametrize("name", list(_EDITS))
def test_a_hand_edited_run_file_is_one_line_on_resume(copy, capsys, name):
    """A trace step or a kept answer of the wrong shape is one warning naming its file and line on resume, not a crash

    The step is left out of the memory figures; the answer is set aside and its question answered again; metrics.json
    is written."""
    file, edit, said = _EDITS[name]
    path = copy / "run" / file
    records = lines(path)
    edit(records[1])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (copy / "run" / METRICS).unlink()  # the resume of a run killed before its metrics, which it then counts
    capsys.readouterr()
    metrics = run_job(toy_config(copy / "data"), copy / "run")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and f"{path}" in warnings[0] and said in warnings[0], warnings
    assert metrics["complete"] and json.loads((copy / "run" / METRICS).read_text()) == metrics
