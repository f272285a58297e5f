"""A start removes only what it wrote: a ``run_dir=`` folder holding files no run wrote is refused in one line and
left byte for byte as it was, a ``config.yaml`` that is not a run's is never overwritten, and a failed start in a
folder the user made takes back its own files alone."""

from __future__ import annotations

import pytest

from infinipotv.job import run_job
from infinipotv.runs import RunDirError, discard_unused, inventory
from tests.helpers import run_py
from tests.hostile.run_helpers import files_under, toy_config

#: What a start records as its configuration (a run's sections), as far as what it leaves is recognized by.
_A_RUNS_CONFIG = "model: {}\ncompress: {}\nquant: {}\nbenchmark: {}\n"


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
    before = files_under(folder)
    line = _one_error_line(run_py(*args, f"run_dir={folder}", timeout=120))
    assert said in line and str(folder) in line, line
    assert files_under(folder) == before


def test_a_run_never_overwrites_a_config_yaml_that_is_not_a_runs(tmp_path):
    """The job itself (a sweep's job, an in-process run) refuses a folder whose config.yaml is not a run's"""
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "config.yaml").write_bytes(b"- a\n- b\n")
    before = files_under(folder)
    with pytest.raises(RunDirError, match="a configuration is a mapping, not a list"):
        run_job(toy_config(tmp_path / "data"), folder)
    assert files_under(folder) == before


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
    (folder / ".hydra" / "config.yaml").write_text(_A_RUNS_CONFIG)
    (folder / "run.log").write_text("")
    (folder / "config.yaml").write_text(_A_RUNS_CONFIG)
    assert discard_unused(folder, found)
    assert sorted(p.name for p in folder.iterdir()) == ["old.log"] and (folder / "old.log").read_text() == "kept\n"
    assert not discard_unused(folder, found) and folder.is_dir()


@pytest.mark.parametrize(
    "files, said",
    [
        ({"train.log": b"logs\n"}, "hydra.run.dir={folder} holds files that no run wrote (train.log)"),
        ({}, None),
    ],
    ids=["a-users-log", "an-empty-folder"],
)
def test_a_hydra_run_dir_is_guarded_as_a_run_dir_is(tmp_path, files, said):
    """A folder named by hydra.run.dir= is guarded as a run_dir= is, and a failed start never removes it

    One of someone else's files is refused in one line and left as it was; a failed start in an empty one takes back
    its own files and keeps the folder."""
    folder = tmp_path / "u1"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    before = files_under(folder)
    out = run_py("model=qwen2vl", "model.checkpoint=/nonexistent/weights", f"hydra.run.dir={folder}", timeout=120)
    line = _one_error_line(out)
    assert said.format(folder=folder) in line if said else "error: weights" in line, line
    assert folder.is_dir() and files_under(folder) == before


#: Another Hydra application's output folder: its recorded command and log (the log of a job named ``train``, or of
#: one also named ``run``), in Hydra's own layout and format.
_HYDRA_LOG = b"[2026-12-06 04:00:00,000][__main__][INFO] - epoch 1: loss 0.3\n"
_OTHER_APPS = {
    "train": {
        ".hydra/config.yaml": b"lr: 0.1\n",
        ".hydra/hydra.yaml": b"hydra:\n  job:\n    name: train\n",
        ".hydra/overrides.yaml": b"- lr=0.1\n",
        "train.log": _HYDRA_LOG,
    },
    "also-named-run": {
        ".hydra/config.yaml": b"lr: 0.1\nepochs: 3\n",
        ".hydra/hydra.yaml": b"hydra:\n  job:\n    name: run\n",
        ".hydra/overrides.yaml": b"- lr=0.1\n",
        "run.log": _HYDRA_LOG,
    },
}


@pytest.mark.parametrize("app", sorted(_OTHER_APPS))
def test_another_hydra_applications_folder_is_not_adopted(tmp_path, app):
    """Another Hydra application's output folder (.hydra/ and its log) is refused as a run_dir=, left as it was

    What a start leaves is recognized by its name and its content, not by any .hydra/ or any *.log."""
    folder = tmp_path / "outputs"
    for name, data in _OTHER_APPS[app].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    before = files_under(folder)
    line = _one_error_line(run_py("model=qwen2vl", f"run_dir={folder}", timeout=120))
    assert f"run_dir={folder} holds files that no run wrote (" in line and ".hydra" in line, line
    assert files_under(folder) == before


def test_a_failed_starts_cleanup_never_removes_a_log_it_did_not_write(tmp_path):
    """A failed start's cleanup removes nothing when the folder gained a file that is not a start's (a train.log)

    What a start writes is recognized by its name and its content; another program's log written there meanwhile is
    kept, and so is everything else."""
    folder = tmp_path / "run"
    folder.mkdir()
    found = inventory(folder)
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text(_A_RUNS_CONFIG)
    (folder / "run.log").write_text("")
    (folder / "train.log").write_bytes(_HYDRA_LOG)  # not ours: another program's
    before = files_under(folder)
    assert not discard_unused(folder, found)
    assert files_under(folder) == before
