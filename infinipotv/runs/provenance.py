"""Provenance of a run: code version, package versions, host, threads, seed and times, as data next to the results.

A run may be answered over several sittings (a kill, a requeue, a study's next sitting), each at its own commit, on
its own host, with its own ``threads=``: ``provenance.json`` records every sitting that wrote to the run, in order
(``sittings``), each once it writes its first answer (a sitting killed after that is recorded too, without an end).
Its top-level keys are what the readers have always read: ``git_sha`` names the code of every sitting (joined by
commas where they differ, so a run resumed at another commit or on a dirty tree never passes for one made at one),
``start`` is the first sitting's and ``end`` the last's, the others the last sitting's. A file written before
sittings were recorded reads as its one sitting.

``python -m infinipotv.runs.provenance --short`` prints the commit as a study's log records it (``c5aed90`` or
``c5aed90-dirty``): the study scripts ask here rather than apply a rule of their own, so a sitting's log line and its
runs' ``provenance.json`` cannot disagree on whether the code was dirty.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from infinipotv.threads import available_cores

PACKAGES = ("infinipotv", "torch", "transformers", "hydra-core", "submitit", "av", "numpy", "pandas", "wandb")
#: What each sitting records beside its commit (``git_sha``, ``dirty``) and times.
SITTING_KEYS = ("packages", "python", "platform", "host", "threads", "cpu_threads", "cpus")
#: Standing for the sittings of answers found with no record of their code (a run killed before sittings were
#: recorded, a provenance.json lost or unreadable).
UNKNOWN = {
    "git_sha": None,
    "dirty": None,
    "start": None,
    "end": None,
    "note": "answers found with no record of their code",
}


def code_version(path: Path = Path(__file__).parent, short: bool = False) -> tuple[str, bool]:
    """The commit of the harness code (abbreviated as git does with ``short``), and whether the work tree has
    uncommitted changes outside the top-level ``results/`` (what benches and studies write there is output, not
    code: rerunning one bench after another must not mark the code as changed); ``("unknown", False)`` outside a git
    checkout."""
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
        return sha, bool(dirty)
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def git_sha(path: Path = Path(__file__).parent, short: bool = False) -> str:
    """The commit of the harness code, with a ``-dirty`` suffix when the work tree has uncommitted changes
    (:func:`code_version`)."""
    return label(dict(zip(("git_sha", "dirty"), code_version(path, short))))


def label(sitting: dict[str, Any]) -> str:
    """A sitting's code as one word: its commit, ``-dirty`` when the tree had changes, ``unknown`` when not recorded."""
    return f"{sitting.get('git_sha') or 'unknown'}{'-dirty' if sitting.get('dirty') else ''}"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sitting(threads: int | str) -> dict[str, Any]:
    """This process's sitting, begun now: its code, packages, host and threads (``threads=`` as given, and torch's
    as run.py set them). torch is imported here, where a job that has loaded it asks: the run directory's package,
    and ``--short``, load without it."""
    import torch

    sha, dirty = code_version()
    return {
        "git_sha": sha,
        "dirty": dirty,
        "packages": {name: _version(name) for name in PACKAGES},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "threads": threads,
        "cpu_threads": torch.get_num_threads(),
        "cpus": available_cores(),
        "start": now(),
        "end": None,
    }


def sittings(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    """The sittings a provenance.json records; one written before sittings were (its keys those of one sitting, its
    ``-dirty`` suffix on the commit) as that one sitting, ``threads=`` unknown."""
    if isinstance(recorded.get("sittings"), list):
        return [s for s in recorded["sittings"] if isinstance(s, dict)]
    if not recorded:
        return []
    sha = str(recorded.get("git_sha") or "")
    return [
        {
            **{key: recorded.get(key) for key in SITTING_KEYS},
            "git_sha": sha.removesuffix("-dirty") or None,
            "dirty": sha.endswith("-dirty"),
            "start": recorded.get("start"),
            "end": recorded.get("end"),
        }
    ]


def earlier_sittings(path: Path, answered: bool) -> list[dict[str, Any]]:
    """The sittings ``path`` (a run's provenance.json) records. Where the run kept answers (``answered``) and no
    sitting is recorded (a run killed before sittings were recorded, a file deleted or unreadable: one warning), one
    sitting of unknown code (:data:`UNKNOWN`) stands for them: a run is never credited to this sitting's code alone
    when it holds answers of other code."""
    recorded: Any = {}
    if path.is_file():
        try:
            recorded = json.loads(path.read_bytes())
        except (OSError, ValueError) as err:
            recorded = f"not JSON ({type(err).__name__}: {err})"
        if not isinstance(recorded, dict):
            why = recorded if isinstance(recorded, str) else f"a JSON {type(recorded).__name__}, not an object"
            print(f"warning: {path}: {why}: the code of the answers before this sitting is unknown", file=sys.stderr)
            recorded = {}
    return sittings(recorded) or ([dict(UNKNOWN)] if answered else [])


def provenance(seed: int, all_sittings: list[dict[str, Any]]) -> dict[str, Any]:
    """provenance.json of a run answered over ``all_sittings`` (in order; the last is this process's)."""
    last = all_sittings[-1]
    return {
        "git_sha": ",".join(dict.fromkeys(map(label, all_sittings))),
        **{key: last.get(key) for key in SITTING_KEYS},
        "seed": seed,
        "start": all_sittings[0].get("start"),
        "end": last.get("end"),
        "sittings": all_sittings,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.runs.provenance", description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="the abbreviated commit, as a study's log records it")
    print(git_sha(short=parser.parse_args(argv).short))
    return 0


if __name__ == "__main__":
    sys.exit(main())
