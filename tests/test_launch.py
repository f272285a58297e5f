"""The tests' run.py launcher behaves as ``python SCRIPT ARGS`` would: exit codes, output, working directory,
atexit handlers, kill; and it forks from the preloaded server unless the launch sets variables of its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import launch

SCRIPT = """
import atexit, os, sys
from pathlib import Path

atexit.register(lambda: Path("atexit_ran").write_text("yes"))
print("preloaded", "transformers.models.llama.modeling_llama" in sys.modules)
print("argv", sys.argv[1:], "cwd", os.getcwd())
for name in ("WANDB_SERVICE", "HF_HOME", "OMP_NUM_THREADS"):
    print(name, os.environ.get(name))
print("to stderr", file=sys.stderr)
how = sys.argv[1]
if how == "code":
    sys.exit(int(sys.argv[2]))
if how == "message":
    sys.exit("one clear line")
if how == "raise":
    raise ValueError("boom")
if how == "sleep":
    import time
    time.sleep(600)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


def _run(script: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    started = launch.start(*args, logs=cwd / "logs", cwd=cwd, env=env, script=script)
    code = started.wait(timeout=120)
    return (code, *started.output())


@pytest.mark.parametrize(
    ("how", "code"),
    [(("code", "0"), 0), (("code", "3"), 3), (("message",), 1), (("raise",), 1)],
    ids=["exit-0", "exit-3", "exit-message", "exception"],
)
def test_exit_codes_output_and_atexit_are_a_scripts(script, tmp_path, how, code):
    got, stdout, stderr = _run(script, *how, cwd=tmp_path)
    assert got == code
    assert f"argv {list(how)} cwd {tmp_path}" in stdout and "to stderr" in stderr
    assert (tmp_path / "atexit_ran").read_text() == "yes"
    if how == ("message",):
        assert stderr.strip().splitlines()[-1] == "one clear line"
    if how == ("raise",):
        assert "ValueError: boom" in stderr


def test_a_launch_forks_unless_it_sets_variables_and_never_sees_the_test_processs_own(script, tmp_path, monkeypatch):
    """In-process tests and libraries set variables in the test process (wandb's WANDB_SERVICE): a launch starts
    from the suite's environment and still forks; variables it is given reach it, through a fresh interpreter."""
    monkeypatch.setenv("WANDB_SERVICE", "a socket of the test process")
    _, forked, _ = _run(script, "code", "0", cwd=tmp_path)
    _, fresh, _ = _run(script, "code", "0", cwd=tmp_path, env={"HF_HOME": str(tmp_path), "OMP_NUM_THREADS": None})
    assert "preloaded True" in forked and "WANDB_SERVICE None" in forked
    assert f"HF_HOME {launch.SUITE_ENV.get('HF_HOME')}" in forked
    assert "preloaded False" in fresh and f"HF_HOME {tmp_path}" in fresh and "OMP_NUM_THREADS None" in fresh


@pytest.mark.parametrize("env", [None, {"FRESH_INTERPRETER": "1"}], ids=["forked", "fresh"])
def test_kill_and_wait_behave_as_popens(script, tmp_path, env):
    started = launch.start(
        "sleep",
        logs=tmp_path / "logs",
        cwd=tmp_path,
        env=env,
        script=script,
    )
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait(timeout=0.2)
    assert started.poll() is None
    started.kill()
    assert started.wait(timeout=60) == -signal.SIGKILL and started.poll() == -signal.SIGKILL


def test_run_returns_what_subprocess_run_would(tmp_path):
    done = launch.run("compress.c_ratio=1.5", cwd=tmp_path)
    assert done.args[:2] == [sys.executable, str(launch.RUN_PY)]
    assert done.returncode == 2 and "compress.c_ratio" in done.stderr
