"""The OpenMP wait policy: ``OMP_WAIT_POLICY=PASSIVE`` reaches torch's libgomp wherever a run starts (run.py, the
tests' fork server, a Slurm job's script) unless the user said how OpenMP threads wait, whose setting is kept."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from infinipotv.threads import WAIT_SETUP, WAIT_VARIABLES, wait_default
from tests import launch

UNSET = "<unset>"
# Imported first by every Python started with this folder on PYTHONPATH: records the wait variables at the moment
# torch is first imported, which is when torch loads libgomp and libgomp reads them.
PROBE = textwrap.dedent(
    """
    import os, sys

    class Probe:
        def find_spec(self, name, path=None, target=None):
            if name == "torch":
                sys.meta_path.remove(self)
                with open(os.environ["WAIT_PROBE_OUT"], "w") as out:
                    out.write(" ".join(os.environ.get(v, "<unset>") for v in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")))
            return None

    sys.meta_path.insert(0, Probe())
    """
)


def test_wait_default_keeps_a_users_choice() -> None:
    assert wait_default({}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert wait_default({"OMP_NUM_THREADS": "1"}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert wait_default({"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert wait_default({"GOMP_SPINCOUNT": "0"}) == {}


@pytest.mark.parametrize(
    ("given", "seen"),
    [
        ({}, f"{UNSET} PASSIVE"),
        ({"GOMP_SPINCOUNT": "500"}, f"500 {UNSET}"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, f"{UNSET} ACTIVE"),
    ],
    ids=["unset", "spincount", "active"],
)
def test_run_py_sets_it_before_torch_loads(tmp_path: Path, given: dict[str, str], seen: str) -> None:
    (tmp_path / "sitecustomize.py").write_text(PROBE)
    out = tmp_path / "seen"
    env = {name: None for name in WAIT_VARIABLES} | given
    env |= {"PYTHONPATH": str(tmp_path), "WAIT_PROBE_OUT": str(out)}
    # refused once the model stack is imported (a knob's own value is refused before torch loads): exit 2
    done = launch.run("+model.options.nosuch=1", env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert out.read_text() == seen


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the fork server's /proc/PID/environ")
def test_the_fork_server_loads_torch_under_it(tmp_path: Path) -> None:
    """A forked launch's parent is the server that imported torch: its environment is the one libgomp read."""
    script = tmp_path / "server_env.py"
    script.write_text(
        "import os\n"
        "env = dict(v.split('=', 1) for v in open(f'/proc/{os.getppid()}/environ').read().split('\\0') if '=' in v)\n"
        f"print(' '.join(env.get(v, '{UNSET}') for v in {WAIT_VARIABLES!r}))\n"
    )
    launched = launch.start(logs=tmp_path / "logs", script=script)
    assert launched.wait(300) == 0, launched.output()[1][-2000:]
    policy, spin = launched.output()[0].split()
    user = {name: os.environ.get(name, UNSET) for name in WAIT_VARIABLES}
    if user == dict.fromkeys(WAIT_VARIABLES, UNSET):
        assert (policy, spin) == ("PASSIVE", UNSET)
    else:
        assert (policy, spin) == (user["OMP_WAIT_POLICY"], user["GOMP_SPINCOUNT"])


def _shell(lines: list[str], env: dict[str, str]) -> str:
    script = "\n".join([*lines, 'echo "${GOMP_SPINCOUNT-<unset>} ${OMP_WAIT_POLICY-<unset>}"'])
    base = {k: v for k, v in os.environ.items() if k not in WAIT_VARIABLES}
    return subprocess.run(["bash", "-c", script], env=base | env, capture_output=True, text=True, check=True).stdout


def test_a_slurm_jobs_setup_ends_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import submitit
    from omegaconf import OmegaConf

    from hydra_plugins.infinipotv_launcher.launcher import SlurmLauncher

    class Recorder:  # what the launcher asks of submitit (a real executor needs srun on this machine)
        def __init__(self, **kwargs: object) -> None:
            self.parameters: dict[str, object] = {}

        def update_parameters(self, **kwargs: object) -> None:
            self.parameters.update(kwargs)

    monkeypatch.setattr(submitit, "AutoExecutor", Recorder)
    launcher = SlurmLauncher(submitit_folder=str(tmp_path / "%j"), name="sweep", setup=["export SITE=1"])
    launcher.config = OmegaConf.create({"hydra": {"job": {"name": "run"}}})
    setup = launcher._executor([]).parameters["slurm_setup"]
    assert setup == ["export SITE=1", WAIT_SETUP]
    assert _shell(setup, {}) == f"{UNSET} PASSIVE\n"
    assert _shell(setup, {"GOMP_SPINCOUNT": "500"}) == f"500 {UNSET}\n"
    assert _shell(setup, {"OMP_WAIT_POLICY": "ACTIVE"}) == f"{UNSET} ACTIVE\n"
    assert _shell(["export OMP_WAIT_POLICY=ACTIVE", *setup], {}) == f"{UNSET} ACTIVE\n"  # a profile's own line
