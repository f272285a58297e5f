"""Which folders a run may write into, and what a failed start may remove: only what that same start created.

A ``run_dir=`` is a new folder, an empty one, or a run's own directory (to resume it): one whose ``config.yaml`` is
a run's configuration, or, before a start recorded one, that holds only what a start writes first (Hydra's
``.hydra/`` and log, the lock, empty run files). Any other folder holds files we did not write, and is refused in
one line before anything is written there (:func:`check_ours`): run.py asks before Hydra writes its own files, the
job again once it holds the lock. A ``config.yaml`` that is not a run's (a YAML list, a mapping of other settings) is
never overwritten.

A start that fails before its first answer removes what it wrote (:func:`discard_unused`), and nothing else: the
names the folder held before the start (:func:`inventory`) stay, and the folder itself goes only if the start made it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Collection
from pathlib import Path

from infinipotv.rundir import CONFIG, LOCK, MEMORY, PREDICTIONS, RunDirError, is_blank, recorded_config

#: The sections every run's config.yaml holds (:class:`infinipotv.config.RunConfig`): a mapping without them is
#: someone else's file.
RUN_SECTIONS = ("model", "compress", "quant", "benchmark")
#: What a start leaves before its first answer (Hydra's record of the command, its log, the lock, the recorded config,
#: empty run files): a directory holding nothing else holds no result.
_STARTED = {".hydra", LOCK, CONFIG, PREDICTIONS, MEMORY}
_HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}


def inventory(run_dir: Path) -> frozenset[str] | None:
    """The names ``run_dir`` holds now (None if it does not exist): what a start found there, so that a failed
    start removes only what it added."""
    if not run_dir.is_dir():
        return None
    return frozenset(entry.name for entry in run_dir.iterdir())


def _started_entry(entry: Path) -> bool:
    """Whether ``entry`` is something a start writes before its first answer, holding no result."""
    if entry.name == ".hydra":
        return entry.is_dir() and {e.name for e in entry.iterdir()} <= _HYDRA_FILES
    if entry.name in (PREDICTIONS, MEMORY):
        return entry.is_file() and not entry.stat().st_size
    return entry.name in _STARTED or (entry.suffix == ".log" and entry.is_file())


def _held(run_dir: Path) -> bool:
    """Whether another process holds ``run_dir``'s directory lock (:func:`infinipotv.rundir.claim`). The probe is a
    shared lock, released at once; where the file system has no directory locks it says no."""
    try:
        folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(folder, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(folder)  # releases the probe
    return False


def check_ours(run_dir: Path) -> None:
    """Refuse, in one line, a ``run_dir`` that holds files no run wrote, or a ``config.yaml`` that is not a run's;
    a new folder, an empty one and a run's own directory pass, and so does one a job holds (the lock's refusal names
    the holder). Nothing is written or removed either way."""
    if not run_dir.is_dir() or _held(run_dir):  # a job writes there: claim refuses, naming it
        return
    entries = list(run_dir.iterdir())
    if not entries:
        return
    fix = "give a new or empty folder, or a run's own directory to resume it"
    config = run_dir / CONFIG
    if config.exists() and not is_blank(config):  # an empty one holds nothing: the job writes it again
        tree = recorded_config(config)  # an unreadable one: a RunDirError naming the file and line
        missing = [s for s in RUN_SECTIONS if not isinstance(tree.get(s), dict)]
        if missing:
            raise RunDirError(
                f"run_dir={run_dir} holds a {CONFIG} that is not a run's (no {', '.join(missing)} section): it is "
                f"left as it is; {fix}"
            )
        return
    foreign = sorted(entry.name for entry in entries if not _started_entry(entry))
    if foreign or not ((run_dir / ".hydra").is_dir() or (run_dir / LOCK).exists()):
        shown = ", ".join((foreign or sorted(e.name for e in entries))[:5])
        raise RunDirError(
            f"run_dir={run_dir} holds files that no run wrote ({shown}): they are left as they are; {fix}"
        )


def discard_unused(run_dir: Path, before: Collection[str] | None = None) -> bool:
    """Remove what a failed start wrote into ``run_dir`` when it holds nothing of a run, only what a start leaves
    before its first answer, so that a run that failed before its first question leaves nothing behind. ``before``:
    the names the folder held before this start (:func:`inventory`; None: the start made the folder). Those names
    stay, and so does the folder unless the start made it. A folder holding an answer or a trace is kept whole, and
    so is one another job holds. Returns whether anything was removed."""
    if not run_dir.is_dir():
        return False
    kept = set(before or ())
    added = [entry for entry in run_dir.iterdir() if entry.name not in kept]
    if not added or not all(_started_entry(entry) for entry in run_dir.iterdir()):
        return False
    try:
        folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a job holding it may be loading its model: keep it
        if before is None:
            shutil.rmtree(run_dir)
            return True
        for entry in added:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except OSError:
        return False
    finally:
        os.close(folder)
    return True
