"""Provenance of a run: code version, package versions, host, seed and times, as data next to the results.

``python -m infinipotv.provenance --short`` prints the commit as a study's log records it (``c5aed90`` or
``c5aed90-dirty``): the study scripts ask here rather than apply a rule of their own, so a sitting's log line and its
runs' ``provenance.json`` cannot disagree on whether the code was dirty.
"""

from __future__ import annotations

import argparse
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch

from infinipotv.threads import available_cores

PACKAGES = ("infinipotv", "torch", "transformers", "hydra-core", "submitit", "av", "numpy", "pandas", "wandb")


def git_sha(path: Path = Path(__file__).parent, short: bool = False) -> str:
    """The commit of the harness code (abbreviated as git does with ``short``), with a ``-dirty`` suffix when the
    work tree has uncommitted changes outside the top-level ``results/`` (what benches and studies write there is
    output, not code: rerunning one bench after another must not mark the code as changed)."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", *(["--short"] if short else []), "HEAD"],
            cwd=path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude)results"],
            cwd=path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def provenance(seed: int) -> dict:
    return {
        "git_sha": git_sha(),
        "packages": {name: _version(name) for name in PACKAGES},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_threads": torch.get_num_threads(),  # torch's, as run.py set them (threads=)
        "cpus": available_cores(),
        "seed": seed,
        "start": now(),
        "end": None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.provenance", description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="the abbreviated commit, as a study's log records it")
    print(git_sha(short=parser.parse_args(argv).short))
    return 0


if __name__ == "__main__":
    sys.exit(main())
