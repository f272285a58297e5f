"""Hostile run directories and run files: what a kill, a full disk, a hand edit or a careless command does to a run
directory is refused in one line (file and line where a file is at fault) or repaired, and loses nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infinipotv.data.rescore import SkippedInput
from infinipotv.data.rescore import main as rescore_main
from infinipotv.job import _drop_partial_traces, run_job
from infinipotv.results.collect import load_run
from infinipotv.runs import CONFIG, METRICS, PREDICTIONS, REJECTED, RunDirError, claim, rewrite
from tests.helpers import ROOT, run_py
from tests.hostile.run_helpers import file_size_limit, files_under, run_experiment, toy_config

_SECOND_WRITER = """
import sys
from pathlib import Path
from infinipotv.runs import RunDirError, claim
try:
    with claim(Path(sys.argv[1]), sys.argv[2]):
        print("admitted")
except RunDirError as err:
    print(err, file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture(scope="session")
def finished(tmp_path_factory) -> Path:
    """A finished run of the tiny model on the toy Video-MME (its data beside it)."""
    root = tmp_path_factory.mktemp("finished")
    run_job(toy_config(root / "data"), root / "run")
    return root / "run"


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    """A copy of the finished run to tamper with, its data shared."""
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _resume_copy(run_dir: Path, finished: Path) -> dict:
    return run_job(toy_config(finished.parent / "data"), run_dir)


def test_a_failed_rewrite_of_the_trace_keeps_every_finished_video(tmp_path):
    """Traces lost on resume: a rewrite of memory.jsonl that fails midway keeps the old file whole"""
    path = tmp_path / "memory.jsonl"
    steps = [{"video_id": v, "step": i, "pad": "x" * 200} for v in ("done_a", "done_b", "partial") for i in range(8)]
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    before = path.read_bytes()
    with file_size_limit(len(before) // 3), pytest.raises(RunDirError, match="File too large.*resumes"):
        _drop_partial_traces(path, {"partial"})  # the kept two thirds do not fit: a full disk, a quota, ulimit -f
    assert path.read_bytes() == before
    _drop_partial_traces(path, {"partial"})
    assert path.read_text().splitlines() == [json.dumps(s) for s in steps if s["video_id"] != "partial"]


def test_every_rewrite_is_atomic(tmp_path):
    """Every rewrite of a run file (config, metrics, provenance, predictions) is whole or not at all"""
    path = tmp_path / "metrics.json"
    path.write_text("old\n")
    with file_size_limit(100), pytest.raises(RunDirError, match=f"cannot write {path}: File too large"):
        rewrite(path, "x" * 1000)
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_deleted_lock_file_admits_no_second_writer(tmp_path):
    """A deleted or replaced .lock admits no second writer"""
    run_dir = tmp_path / "run"
    with claim(run_dir, "a: 1\n"):
        (run_dir / ".lock").unlink()
        second = subprocess.run(
            [sys.executable, "-c", _SECOND_WRITER, str(run_dir), "a: 1\n"], cwd=ROOT, capture_output=True, text=True
        )
        assert second.returncode == 2 and "is being written by" in second.stderr, second.stdout + second.stderr
        (run_dir / ".lock").write_text("stale\n")
        third = subprocess.run(
            [sys.executable, "-c", _SECOND_WRITER, str(run_dir), "a: 1\n"], cwd=ROOT, capture_output=True, text=True
        )
        assert third.returncode == 2 and "admitted" not in third.stdout


def test_a_run_made_before_a_knob_existed_resumes_at_its_default(copy, finished):
    """A run directory written before a knob existed (its config.yaml lacks the key) resumes when the knob is at its
    default, and is refused when it is not"""
    path = copy / CONFIG
    recorded = path.read_text()
    assert "allow_outside_root: false" in recorded
    path.write_text(recorded.replace("  allow_outside_root: false\n", ""))
    before = (copy / PREDICTIONS).read_bytes()
    _resume_copy(copy, finished)
    assert (copy / PREDICTIONS).read_bytes() == before
    config = toy_config(finished.parent / "data")
    config.benchmark.allow_outside_root = True
    with pytest.raises(RunDirError, match=r"another configuration \(benchmark.allow_outside_root: False -> True\)"):
        run_job(config, copy)


def test_a_hand_edited_trace_step_is_left_out_with_a_warning(copy, finished, capsys):
    """A memory.jsonl step missing a key (a hand edit) is left out of the metrics with one warning, not a KeyError"""
    path = copy / "memory.jsonl"
    steps = [json.loads(line) for line in path.read_text().splitlines()]
    del steps[0]["cache_bytes"]
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    (copy / "metrics.json").unlink()  # a finished run keeps its metrics: they are counted again once it is gone
    metrics = _resume_copy(copy, finished)
    said = capsys.readouterr().err
    assert "memory.jsonl: 1 line(s) not a whole trace step" in said and "cache_bytes" in said
    assert metrics["complete"] and metrics["memory"]["frames"] > 0


def test_a_hand_edited_duplicate_or_foreign_answer_is_set_aside_on_resume(copy, finished, capsys):
    """Hand-edited predictions: a superseded answer and a foreign question id are set aside on resume, with a warning"""
    path = copy / PREDICTIONS
    original = path.read_bytes()
    first = json.loads(original.splitlines()[0])
    duplicate = {**first, "output": "A", "parsed": first["gold"], "correct": True}
    foreign = {**first, "question_id": "not_a_question_of_this_run", "correct": True}
    added = (json.dumps(duplicate) + "\n" + json.dumps(foreign) + "\n").encode()
    path.write_bytes(original + added)
    (copy / "metrics.json").unlink()
    metrics = _resume_copy(copy, finished)
    err = capsys.readouterr().err
    n = original.count(b"\n")
    assert metrics["n_questions"] == n == metrics["n_expected"]
    kept = path.read_bytes().splitlines(keepends=True)
    assert kept == original.splitlines(keepends=True)[1:] + added.splitlines(keepends=True)[:1]  # the later answer
    assert (copy / REJECTED).read_bytes() == original.splitlines(keepends=True)[0] + added.splitlines(keepends=True)[1]
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"line 1: answer to {first['question_id']!r} superseded by line {n + 1}" in warning[0]
    assert f"line {n + 2}: question 'not_a_question_of_this_run' is not one of this run's" in warning[0]


@pytest.mark.parametrize(
    "line",
    [b'{"question_id": "\xff\xfe"}\n', b"[" * 100_000 + b"]" * 100_000 + b"\n", b"42\n", b'{"no": "id"}\n'],
    ids=["invalid UTF-8", "deeply nested JSON", "a JSON number", "no question_id"],
)
def test_an_unreadable_prediction_line_is_set_aside_on_resume(copy, finished, capsys, line):
    """A line of predictions.jsonl that is not a prediction is set aside on resume, naming its line"""
    path = copy / PREDICTIONS
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]) + line + b"".join(lines[2:]))
    (copy / "metrics.json").unlink()
    metrics = _resume_copy(copy, finished)
    assert metrics["complete"] and path.read_bytes() == original
    assert (copy / REJECTED).read_bytes() == line
    assert "line 3: " in capsys.readouterr().err


def test_the_aggregator_keeps_one_record_per_question_of_the_run(copy, recwarn):
    """The aggregator counts one answer per question of the run: a second answer and a foreign id are warned about"""
    path = copy / PREDICTIONS
    original = path.read_bytes()
    first = json.loads(original.splitlines()[0])
    duplicate = {**first, "correct": True, "output": "changed"}
    foreign = {**first, "question_id": "not_a_question_of_this_run", "correct": True}
    path.write_bytes(original + (json.dumps(duplicate) + "\n" + json.dumps(foreign) + "\n").encode())
    run = load_run(copy)
    assert len(run.predictions) == original.count(b"\n")
    assert {r["question_id"]: r for r in run.predictions}[first["question_id"]] == duplicate  # as a resume keeps
    messages = " ".join(str(w.message) for w in recwarn)
    assert "supersedes the earlier one" in messages and "not_a_question_of_this_run" in messages


def test_an_empty_config_yaml_is_named_as_empty(copy):
    """An empty config.yaml in a run dir with answers is refused as empty, not as another configuration"""
    text = (copy / CONFIG).read_text()
    (copy / CONFIG).write_text("")
    with pytest.raises(RunDirError, match=f"{copy / CONFIG} is empty"):
        with claim(copy, text):
            pass


def test_a_truncated_config_yaml_is_named_with_its_line(copy):
    """A config.yaml cut short in a run dir with answers is refused naming the file and line"""
    text = (copy / CONFIG).read_text()
    cut = text[: len(text) // 2].rstrip("\n")  # mid-line: a cut that ends a line reads as another configuration
    (copy / CONFIG).write_text(cut)
    with pytest.raises(RunDirError, match=rf"{copy / CONFIG}:{cut.count(chr(10)) + 1}: the file is cut short"):
        with claim(copy, text):
            pass
    (copy / CONFIG).write_text("model:\n  family: qwen2vl\n tiny: true\n")  # the third line is indented wrong
    with pytest.raises(RunDirError, match=rf"{copy / CONFIG}:3: not a readable configuration"):
        with claim(copy, text):
            pass


def test_a_broken_config_yaml_without_answers_is_written_again(tmp_path):
    """An empty config.yaml left by a start killed before any answer is written again, and the run goes on"""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / CONFIG).write_text("")
    with claim(run_dir, "seed: 0\n"):
        pass
    assert (run_dir / CONFIG).read_text() == "seed: 0\n"


def test_a_lock_that_is_a_directory_is_one_line(tmp_path):
    """A .lock that is a directory is refused in one line"""
    (tmp_path / "run" / ".lock").mkdir(parents=True)
    with pytest.raises(RunDirError, match=r"\.lock is a directory, not the run's lock file: remove it"):
        with claim(tmp_path / "run", "seed: 0\n"):
            pass


def _one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stderr
    return errors[0]


def test_a_run_dir_naming_a_file_is_one_line(tmp_path):
    """run_dir naming a file is refused in one line"""
    (tmp_path / "file").write_text("mine\n")
    line = _one_error_line(run_py("model=tiny_qwen2vl", f"run_dir={tmp_path / 'file'}", timeout=120))
    assert "names a file, not a directory" in line and (tmp_path / "file").read_text() == "mine\n"


def test_an_experiment_file_with_a_yaml_tag_is_one_line(tmp_path):
    """an experiment file with a YAML tag is refused by run.py in one line, and nothing runs"""
    tagged = "# @package _global_\nexperiment: tagged\nfoo: !!python/object/apply:os.system [touch pwned]\n"
    out = run_experiment(tmp_path, "tagged", tagged, f"run_dir={tmp_path / 'run'}")
    line = _one_error_line(out)
    assert "tagged.yaml: not a readable experiment file" in line and "python/object/apply" in line
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "run").exists()


@contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only, for root too (the immutable attribute) where chattr is allowed, else by its mode."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("root without chattr: a read-only folder cannot be made here")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)


def test_a_read_only_run_dir_is_one_line(copy):
    """A read-only run dir is refused in one line, its files untouched"""
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    with _read_only(copy):
        line = _one_error_line(run_py("model=tiny_qwen2vl", f"run_dir={copy}", timeout=120))
    assert "is not writable" in line and {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before


@pytest.mark.slow
def test_the_file_size_limit_stops_the_run_in_one_line_and_loses_nothing(tmp_path):
    """A file-size limit hit mid-run stops it in one line; every answer written is kept and a rerun resumes"""
    args = [
        "model=tiny_qwen2vl",
        "compress=tar_van_pool",
        "compress.budget=96",
        "eval.chunk_frames=2",
        "benchmark=symbolic",
        "benchmark.options.n_videos=2",
        "benchmark.options.frames=48",
        f"benchmark.root={tmp_path / 'data'}",
    ]
    whole = run_py(*args, f"run_dir={tmp_path / 'whole'}")  # also writes the videos, before any limit
    assert whole.returncode == 0, whole.stderr
    limit = 15_000  # past the first video's trace (~10.6 KB), short of the second's

    def limited() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    cut = subprocess.run(
        [sys.executable, "run.py", *args, f"run_dir={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limited,
    )
    line = _one_error_line(cut)
    assert "File too large (the file-size limit (ulimit -f) is reached" in line, line
    written = (run_dir / PREDICTIONS).read_bytes()
    assert all(f.read_bytes().endswith(b"\n") for f in (run_dir / PREDICTIONS, run_dir / "memory.jsonl"))
    resumed = run_py(*args, f"run_dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    final = (run_dir / PREDICTIONS).read_bytes()
    assert final.startswith(written) and final == (tmp_path / "whole" / PREDICTIONS).read_bytes()


def test_a_run_dir_that_is_a_link_to_nothing_is_one_line(tmp_path):
    """A run_dir= that is a symbolic link to nothing is refused in one line, not Hydra's FileExistsError"""
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "gone")
    line = _one_error_line(run_py("model=tiny_qwen2vl", f"run_dir={link}", timeout=120))
    assert f"run_dir={link}: {link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in line, line
    assert link.is_symlink() and not (tmp_path / "gone").exists()


@contextmanager
def _read_only_file_system(folder: Path, files: Path) -> Iterator[Path]:
    """A copy of the folder ``files`` on a file system mounted read-only at ``folder`` (a tmpfs: root only)."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("no tmpfs can be mounted here (not root?): a read-only file system cannot be made")
    try:
        shutil.copytree(files, folder / files.name)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / files.name
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_rewrite_on_a_read_only_file_system_is_one_line(finished, tmp_path, capsys):
    """rescore --write on a read-only file system is one line, not a traceback from the rewrite's own cleanup"""
    with _read_only_file_system(tmp_path / "ro", finished) as run_dir:
        before = files_under(run_dir)
        assert rescore_main([str(run_dir), "--write"]) == 2
        errors = capsys.readouterr().err.strip().splitlines()
        assert len(errors) == 1 and errors[0].startswith(f"error: cannot write {run_dir / METRICS}: Read-only file")
        assert files_under(run_dir) == before


@pytest.mark.parametrize(
    "field, value, said",
    [("output", 5, "output is 5, not a text"), ("options", "A. red", 'options is "A. red", not a mapping of letters')],
    ids=["output-a-number", "options-a-text"],
)
def test_rescore_and_the_aggregator_skip_a_prediction_they_cannot_parse(copy, capsys, field, value, said):
    """Rescore and the aggregator skip a prediction whose output or options they cannot parse, naming its line

    An output that is not text (5) or options given as a text: a warning names the file, line and field, and the
    other answers are scored."""
    path = copy / PREDICTIONS
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(json.dumps({**json.loads(lines[0]), field: value}).encode() + b"\n" + b"".join(lines[1:]))
    assert rescore_main([str(copy)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and f"{path} line 1: {said}" in warnings[0], warnings
    with pytest.warns(SkippedInput, match=f"line 1: {said}"):
        assert len(load_run(copy).predictions) == len(lines) - 1
