"""Compacting a study for git is irreversible, so it is checked whole before anything changes: a study is named,
never given as a path, a study over its size limit is refused untouched, and a compaction killed midway never leaves
a trimmed trace that a resume would count from as if whole."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from infinipotv.job import run_job
from infinipotv.results import compact
from infinipotv.results.compact import compact_study, main
from infinipotv.runs import COMPACT, MEMORY, RunDirError
from tests.hostile.run_helpers import files_under, toy_config


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A study of one finished run that streamed two videos (the toy Video-MME with its second video present, one
    question an error record); the data under ``data/`` beside ``runs/``."""
    root = tmp_path_factory.mktemp("compaction")
    config = toy_config(root / "data")
    videos = root / "data" / "videomme" / "data"
    shutil.copy(videos / "vmmeA.mp4", videos / "vmmeB.mp4")
    run_job(config, root / "runs" / "study" / "run")
    return root


@pytest.fixture
def copy(study, tmp_path) -> Path:
    """A copy of the study and its data, to compact (the run's config.yaml names the copied data)."""
    shutil.copytree(study, tmp_path, dirs_exist_ok=True)
    config = tmp_path / "runs" / "study" / "run" / "config.yaml"
    config.write_text(config.read_text().replace(str(study / "data"), str(tmp_path / "data")))
    return tmp_path


@pytest.mark.parametrize("name", [".", "", "..", "study/run", "ABSOLUTE"])
def test_compact_takes_a_study_name_never_a_path(copy, capsys, name):
    """python -m infinipotv.results.compact refuses a path for a study name (., .., empty, absolute) in one line,
    untouched"""
    runs = copy / "runs"
    name = str(runs / "study") if name == "ABSOLUTE" else name
    before = files_under(runs)
    assert main([name, "--runs", str(runs)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"error: {name!r} is not a study's name"), errors
    assert files_under(runs) == before


def test_a_study_over_its_limit_is_refused_before_anything_changes(copy, capsys):
    """A study over its size limit is refused in one line before any trace is trimmed or any file written"""
    runs = copy / "runs"
    before = files_under(runs)
    assert main(["study", "--runs", str(runs), "--limit-mib", "0.001"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "over the 0.001 MiB limit" in errors[0], errors
    assert files_under(runs) == before


class _Killed(BaseException):
    """The process killed at that point (nothing after it runs)."""


def test_a_compaction_killed_between_its_writes_never_leaves_a_trimmed_trace_unrecorded(copy, monkeypatch):
    """A compaction killed between its two writes never leaves a trimmed trace without its compact.json

    A resume that would answer again is refused rather than count the memory from one video, and the next compaction
    finishes the trim."""
    run_dir = copy / "runs" / "study" / "run"
    whole = (run_dir / MEMORY).read_bytes()
    written: list[Path] = []
    rewrite = compact.rewrite

    def killed_after_one_write(path: Path, text: str | bytes) -> None:
        if written:
            raise _Killed
        written.append(path)
        rewrite(path, text)

    monkeypatch.setattr(compact, "rewrite", killed_after_one_write)
    with pytest.raises(_Killed):
        compact_study(copy / "runs" / "study")
    monkeypatch.undo()
    assert (run_dir / MEMORY).read_bytes() == whole or (run_dir / COMPACT).is_file()
    retry = dataclasses.replace(toy_config(copy / "data"), retry_errors=True)  # the error record is answered again
    with pytest.raises(RunDirError, match="is a compact run"):
        run_job(retry, run_dir)
    compact_study(copy / "runs" / "study")
    trimmed = (run_dir / MEMORY).read_bytes()
    record = json.loads((run_dir / COMPACT).read_text())[MEMORY]
    assert trimmed != whole and trimmed in whole
    assert (record["bytes_before"], record["bytes_after"]) == (len(whole), len(trimmed))
