"""The run directory: its files, the one reader of its JSON-lines files, and what keeps it to one run.

A run directory holds one run: :func:`claim` takes an exclusive lock for the writing job (a second writer is
refused at once, with the holder named) and refuses to resume a directory whose recorded configuration differs from
the new one, naming the keys, before anything is appended.

A job appends to ``predictions.jsonl`` and ``memory.jsonl`` line by line, flushing each; a job killed mid-write
leaves at most a cut last line. Readers skip unreadable lines and count them; the job itself (``repair=True``) cuts
the file at its first unreadable line before appending to it again.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

PREDICTIONS, METRICS, MEMORY, PROVENANCE, CONFIG = (
    "predictions.jsonl",
    "metrics.json",
    "memory.jsonl",
    "provenance.json",
    "config.yaml",
)
LOCK = ".lock"
#: Top-level config keys that say where, how fast or how a run is reported, not what it computes: a resume may
#: change them.
NOT_THE_RUN = ("run_dir", "tracking", "experiment", "table", "retry_errors", "threads")


class RunDirError(RuntimeError):
    """A run directory that this job may not write: in use by another job, or holding another configuration."""


@contextmanager
def claim(run_dir: Path, config_yaml: str) -> Iterator[None]:
    """Hold ``run_dir`` for one writer while the block runs, and make sure it holds this configuration.

    The lock is a POSIX record lock on ``.lock`` (held by the process, released by the kernel when it dies, so a
    killed job never leaves a stale lock; it also works on NFS). The configuration is written on the first run
    and compared on every later one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / LOCK).open("a+") as lock:
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise RunDirError(
                f"run directory {run_dir} is being written by {holder}: wait for that job to end, or "
                f"give this one another run_dir="
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        lock.flush()
        _check_config(run_dir / CONFIG, config_yaml)
        yield


def _check_config(path: Path, config_yaml: str) -> None:
    if not path.exists():
        path.write_text(config_yaml)
        return
    problem = config_conflict(path.parent, config_yaml)
    if problem:
        raise RunDirError(problem)


def config_conflict(run_dir: Path, config_yaml: str) -> str | None:
    """Why ``run_dir`` may not take a run of ``config_yaml`` (it holds a run of another configuration), or None.
    The job checks it when it starts, and the sweep check before anything is submitted."""
    path = run_dir / CONFIG
    if not path.is_file():
        return None
    before, after = (_flat(OmegaConf.to_container(OmegaConf.create(text))) for text in (path.read_text(), config_yaml))
    changed = [
        key
        for key in sorted(set(before) | set(after))
        if key.split(".")[0] not in NOT_THE_RUN and before.get(key, "<unset>") != after.get(key, "<unset>")
    ]
    if not changed:
        return None
    shown = "; ".join(f"{key}: {before.get(key, '<unset>')!r} -> {after.get(key, '<unset>')!r}" for key in changed[:6])
    more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
    return (
        f"{run_dir} holds a run of another configuration ({shown}{more}): resume it with its own settings "
        f"({path}), or give this run another run directory"
    )


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as {dotted key: leaf value}."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(_flat(value, f"{prefix}{key}."))
        return flat or {prefix[:-1]: {}}
    return {prefix[:-1]: tree}


def read_jsonl(path: Path, repair: bool = False) -> tuple[list[dict[str, Any]], int]:
    """The readable records of a JSON-lines file (none if it does not exist) and the number of unreadable lines."""
    if not path.exists():
        return [], 0
    records: list[dict[str, Any]] = []
    bad, good_bytes = 0, 0
    with path.open("rb") as f:
        for line in f:
            try:
                if line.strip():
                    records.append(json.loads(line))
            except json.JSONDecodeError:
                bad += 1
                if repair:
                    break
                continue
            good_bytes += len(line)
    if repair and bad:
        with path.open("r+b") as f:
            f.truncate(good_bytes)
    return records, bad
