"""A start removes only what it wrote: a ``run_dir=`` folder holding files no run wrote is refused in one line and
left byte for byte as it was, a ``config.yaml`` that is not a run's is never overwritten, and a failed start in a
folder the user made takes back its own files alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.job import run_job
from infinipotv.ownership import discard_unused, inventory
from infinipotv.rundir import RunDirError
from tests.helpers import run_py
from tests.hostile.run_helpers import toy_config


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (relative) with its bytes, None for a folder."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def _one_error_line(out) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), out.stdout + out.stderr
    return lines[0]


@pytest.mark.parametrize(
    "files, args, said",
    [
        (
            {"config.yaml": b"lr: 0.1\n", "train.log": b"notes\n"},
            ["benchmark.limit=1"],
            "holds a config.yaml that is not a run's (no model, compress, quant, benchmark section)",
        ),
        ({"run.log": b"my own log\n"}, ["model=qwen2vl"], "holds files that no run wrote (run.log)"),
        ({"config.yaml": b"- a\n- b\n"}, ["benchmark.limit=1"], "a configuration is a mapping, not a list"),
    ],
    ids=["other-config", "only-a-log", "yaml-list"],
)
def test_a_folder_of_someone_elses_files_is_refused_and_left_as_it_was(tmp_path, files, args, said):
    """A run_dir= folder holding files no run wrote is refused in one line and left byte for byte as it was"""
    folder = tmp_path / "x"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    before = _snapshot(folder)
    line = _one_error_line(run_py(*args, f"run_dir={folder}", timeout=120))
    assert said in line and str(folder) in line, line
    assert _snapshot(folder) == before


def test_a_run_never_overwrites_a_config_yaml_that_is_not_a_runs(tmp_path):
    """The job itself (a sweep's job, an in-process run) refuses a folder whose config.yaml is not a run's"""
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "config.yaml").write_bytes(b"- a\n- b\n")
    before = _snapshot(folder)
    with pytest.raises(RunDirError, match="a configuration is a mapping, not a list"):
        run_job(toy_config(tmp_path / "data"), folder)
    assert _snapshot(folder) == before


def test_a_failed_start_in_a_folder_the_user_made_removes_only_its_own_files(tmp_path):
    """A failed start in an empty folder the user made removes its own files and keeps the folder"""
    folder = tmp_path / "mine"
    folder.mkdir()
    out = run_py("model=qwen2vl", "model.checkpoint=/nonexistent/weights", f"run_dir={folder}", timeout=120)
    assert out.returncode == 2 and "error: weights" in out.stderr, out.stderr
    assert folder.is_dir() and not list(folder.iterdir())


def test_discard_unused_keeps_what_the_folder_held_before(tmp_path):
    """A failed start's cleanup keeps every name the folder held before the start, a log of the same kind included"""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "old.log").write_text("kept\n")
    found = inventory(folder)
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("a: 1\n")
    (folder / "run.log").write_text("")
    (folder / "config.yaml").write_text("model: {}\n")
    assert discard_unused(folder, found)
    assert sorted(p.name for p in folder.iterdir()) == ["old.log"] and (folder / "old.log").read_text() == "kept\n"
    assert not discard_unused(folder, found) and folder.is_dir()
