"""``python run.py ...`` for the tests, forked from an interpreter that has already imported what every run imports.

A run.py launch spends ~8 s of a 2-core VM importing torch, transformers' modeling code, Hydra and pandas before it
reads its first frame, and the suite launches run.py ~60 times. Here each launch is a fork of one server process per
test worker that imported those modules once (multiprocessing's forkserver), and then runs run.py as the command
line does: its own process (a kill kills it), working directory, ``sys.argv``, stdout and stderr, exit code and
atexit handlers. What a fork cannot reproduce is what a module reads from the environment when it is imported
(``HF_HOME``, thread counts, the OpenMP wait policy libgomp reads when torch loads it: the server starts in
:data:`SUITE_ENV`, which holds run.py's default for it), so a launch given its own variables starts a fresh
interpreter. Tests about a fresh
interpreter itself (what a refusal imports) start their own.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Iterator, Mapping

from infinipotv.threads import wait_default

ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "run.py"

# What every run imports once its config has passed; a module missing here is imported by the launch that needs it.
PRELOAD = [
    "hydra",
    "infinipotv.job",
    "infinipotv.results.tracking",
    "transformers.models.llama.modeling_llama",
    "transformers.models.qwen2_vl.modeling_qwen2_vl",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
    "transformers.models.llava_onevision.modeling_llava_onevision",
]

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


# What every launch starts from: the tests' environment as the suite began, one thread per run (workers share the
# cores). Not the test process's environment at the launch: in-process tests and libraries set variables there
# (wandb's WANDB_SERVICE socket, torch's TORCHINDUCTOR_CACHE_DIR, HF_HUB_OFFLINE once a checkpoint loads) that a
# run.py started by hand would not have, and that a fork could not honour anyway. With run.py's OpenMP wait policy
# where the suite's environment sets none (infinipotv.threads.set_wait_default), as the server's torch loads it.
SUITE_ENV: Mapping[str, str] = MappingProxyType(
    {**os.environ, **wait_default(os.environ), "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
)


def _run_script(argv: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str) -> None:
    """The forked child: ``python ARGV`` from ``cwd``, its output in the two files, its exit code as Python's."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = list(argv)
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    code: object = 0
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        code = done.code
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # multiprocessing's children skip them; an interpreter runs them at exit
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code or 0)


@contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    before = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


class Launch:
    """A running ``python run.py``, as much of ``subprocess.Popen`` as the tests use: pid, poll, kill, wait; its
    stdout and stderr go to files in ``logs``."""

    def __init__(self, argv: list[str], cwd: Path, changes: Mapping[str, str | None], logs: Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.argv = argv
        self._outputs = (logs / "stdout", logs / "stderr")
        self._process: multiprocessing.process.BaseProcess | None = None
        self._fresh: subprocess.Popen | None = None
        env = {k: v for k, v in {**SUITE_ENV, **changes}.items() if v is not None}
        if not changes:
            self._process = _CONTEXT.Process(
                target=_run_script, args=(argv, str(cwd), env, *(str(path) for path in self._outputs))
            )
            with _environ(SUITE_ENV):  # the first launch starts the server, in this environment
                self._process.start()
        else:  # a module may read a changed variable when it is imported (HF_HOME): a fresh interpreter
            with open(self._outputs[0], "wb") as out, open(self._outputs[1], "wb") as err:
                self._fresh = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=out, stderr=err)

    @property
    def pid(self) -> int:
        return self._process.pid if self._process is not None else self._fresh.pid

    def poll(self) -> int | None:
        return self._fresh.poll() if self._fresh is not None else self._process.exitcode

    def kill(self) -> None:
        (self._fresh if self._fresh is not None else self._process).kill()

    def wait(self, timeout: float | None = None) -> int:
        if self._fresh is not None:
            return self._fresh.wait(timeout)
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.argv, timeout)
        return self._process.exitcode

    def output(self) -> tuple[str, str]:
        """What the run printed so far: (stdout, stderr)."""
        stdout, stderr = (path.read_text(errors="replace") if path.exists() else "" for path in self._outputs)
        return stdout, stderr  # nothing yet: a child that failed before it ran (its exit code says so)


def start(
    *overrides: str,
    logs: Path,
    cwd: Path = ROOT,
    env: Mapping[str, str | None] | None = None,
    script: Path = RUN_PY,
) -> Launch:
    """``python run.py OVERRIDES`` started, not awaited; its output in ``logs``. ``env``: variables set (None: unset)
    over :data:`SUITE_ENV` for this launch, which then starts a fresh interpreter; without, it forks."""
    return Launch([str(script), *overrides], cwd, env or {}, logs)


def run(
    *overrides: str, timeout: float = 300, cwd: Path = ROOT, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess:
    """``python run.py OVERRIDES`` to its end, as ``subprocess.run(..., capture_output=True, text=True)``."""
    with tempfile.TemporaryDirectory(prefix="run_py_") as logs:
        launch = start(*overrides, logs=Path(logs), cwd=cwd, env=env)
        try:
            code = launch.wait(timeout)
        except subprocess.TimeoutExpired:
            launch.kill()
            launch.wait()
            raise
        stdout, stderr = launch.output()
    return subprocess.CompletedProcess([sys.executable, *launch.argv], code, stdout, stderr)
