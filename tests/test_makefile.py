"""``make run ARGS=...`` passes run.py's overrides (``threads=1`` on a busy machine, README), ``make test ARGS=...``
pytest's arguments (a quick subset: ``-m "not slow"``); without ARGS both run as before; ``make smoke`` names test
files that exist. Read from ``make -n``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT


def _commands(target: str, tmp_path: Path, *args: str) -> list[str]:
    """The commands ``make TARGET`` would run, with an installed venv of its own (so no install step shows)."""
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    (venv / ".installed").touch()  # newer than pyproject.toml and constraints.txt: install is done
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={venv}", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_passes_args(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    assert _commands("run", tmp_path, "ARGS=threads=1 quant=int4") == [f"{python} run.py threads=1 quant=int4"]
    assert _commands("run", tmp_path) == [f"{python} run.py "]
    assert _commands("test", tmp_path, 'ARGS=-m "not slow"')[-1] == f'{python} -m pytest -m "not slow"'


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_smoke_set_names_test_files_that_exist(tmp_path: Path) -> None:
    """``make smoke`` runs a fixed list of test files: a file renamed or moved would silently leave it."""
    files = [arg for arg in _commands("smoke", tmp_path)[-1].split() if arg.startswith("tests/")]
    assert files and all((ROOT / name).is_file() for name in files), files
