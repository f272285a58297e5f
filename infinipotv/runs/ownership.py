"""Which folders a run may write into, and what a failed start may remove: only what that same start created.

A ``run_dir=`` is a new folder, an empty one, or a run's own directory (to resume it): one whose ``config.yaml`` is
a run's configuration, or, before a start recorded one, that holds only what a start writes first (Hydra's
``.hydra/`` and log, the lock, empty run files), each recognized by its name and its content (another Hydra
application's ``.hydra/`` or log is not ours). Any other folder holds files we did not write, and is refused in one
line before anything is written there (:func:`check_ours`): run.py asks before Hydra writes its own files (of a
``run_dir=`` or a ``hydra.run.dir=`` alike), the job again once it holds the lock. A ``config.yaml`` that is not a
run's (a YAML list, a mapping of other settings) is never overwritten.

A start that fails before its first answer removes what it wrote (:func:`discard_unused`), and nothing else: the
names the folder held before the start (:func:`inventory`) stay, and the folder itself goes only if the start made it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import yaml

from .directory import CONFIG, LOCK, MEMORY, PREDICTIONS, RunDirError, is_blank, recorded_config

#: The sections every run's config.yaml holds (:class:`infinipotv.config.RunConfig`): a mapping without them is
#: someone else's file.
RUN_SECTIONS = ("model", "compress", "quant", "benchmark")
#: Hydra's name for run.py's job: it names the log (``run.log``) and ``.hydra/hydra.yaml`` records it.
JOB_NAME = "run"
#: The first line of a log Hydra writes (its default format), and what the lock file holds (its holder).
_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[[^\]\n]*\]\[[A-Z]+\] - ")
_LOCK_TEXT = re.compile(rb"(pid \d+ on \S+\n)?")


def inventory(run_dir: Path) -> frozenset[str] | None:
    """The names ``run_dir`` holds now (None if it does not exist): what a start found there, so that a failed
    start removes only what it added."""
    if not run_dir.is_dir():
        return None
    return frozenset(entry.name for entry in run_dir.iterdir())


def _started_entry(entry: Path) -> bool:
    """Whether ``entry`` is something a start of this harness writes before its first answer, holding no result:
    Hydra's ``.hydra/`` and log, the lock, the recorded config, empty run files. Each is recognized by its name and
    its content, so that another program's file of the same kind (a ``train.log``, another Hydra application's
    ``.hydra/``) is never taken for one: a folder holding it is not adopted, and a failed start never removes it."""
    if entry.is_symlink():
        return False
    if entry.name == ".hydra":
        return entry.is_dir() and all(_hydra_record(e) for e in entry.iterdir())
    if not entry.is_file():
        return False
    if entry.name in (PREDICTIONS, MEMORY):
        return not entry.stat().st_size
    return _read(entry, _STARTED.get(entry.name))


def _read(path: Path, fits: Callable[[bytes], bool] | None) -> bool:
    """Whether ``path`` holds what ``fits`` recognizes (False for no rule, or a file that cannot be read)."""
    try:
        return fits is not None and fits(path.read_bytes())
    except OSError:
        return False


def _yaml(data: bytes) -> Any:
    """YAML text as plain values (tags never constructed); None for text that is not YAML."""
    try:
        return yaml.safe_load(data)
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return None


def _run_config(data: bytes) -> bool:
    """A run's configuration (its sections as mappings), or nothing: what run.py's config.yaml files hold."""
    tree = _yaml(data)
    return not data.strip() or (isinstance(tree, dict) and all(isinstance(tree.get(s), dict) for s in RUN_SECTIONS))


def _hydra_config(data: bytes) -> bool:
    """Hydra's own settings of run.py's job (``hydra.job.name``), or nothing."""
    tree = _yaml(data)
    hydra = tree.get("hydra") if isinstance(tree, dict) else None
    job = hydra.get("job") if isinstance(hydra, dict) else None
    return not data.strip() or (isinstance(job, dict) and job.get("name") == JOB_NAME)


def _overrides(data: bytes) -> bool:
    """The command line's overrides, as Hydra records them (a list of texts), or nothing."""
    tree = _yaml(data)
    return not data.strip() or (isinstance(tree, list) and all(isinstance(o, str) for o in tree))


#: What a start writes in a run directory and in its ``.hydra/``, by name, with the rule its content fits.
_STARTED: dict[str, Callable[[bytes], bool]] = {
    CONFIG: _run_config,
    LOCK: lambda data: _LOCK_TEXT.fullmatch(data) is not None,
    f"{JOB_NAME}.log": lambda data: not data or _LOG_LINE.match(data) is not None,
}
_HYDRA_FILES: dict[str, Callable[[bytes], bool]] = {
    "config.yaml": _run_config,
    "hydra.yaml": _hydra_config,
    "overrides.yaml": _overrides,
}


def _hydra_record(entry: Path) -> bool:
    return entry.is_file() and not entry.is_symlink() and _read(entry, _HYDRA_FILES.get(entry.name))


def _held(run_dir: Path) -> bool:
    """Whether another process holds ``run_dir``'s directory lock (:func:`infinipotv.runs.claim`). The probe is a
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


def check_ours(run_dir: Path, key: str = "run_dir") -> None:
    """Refuse, in one line, a ``run_dir`` that holds files no run wrote, or a ``config.yaml`` that is not a run's;
    a new folder, an empty one and a run's own directory pass, and so does one a job holds (the lock's refusal names
    the holder). Nothing is written or removed either way. ``key``: the option that named the folder."""
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
                f"{key}={run_dir} holds a {CONFIG} that is not a run's (no {', '.join(missing)} section): it is "
                f"left as it is; {fix}"
            )
        return
    foreign = sorted(entry.name for entry in entries if not _started_entry(entry))
    if foreign or not ((run_dir / ".hydra").is_dir() or (run_dir / LOCK).exists()):
        shown = ", ".join((foreign or sorted(e.name for e in entries))[:5])
        raise RunDirError(f"{key}={run_dir} holds files that no run wrote ({shown}): they are left as they are; {fix}")


def _holds_results(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds an answer or a trace (a run's, to resume): then a failed start keeps it whole."""
    return any((run_dir / name).is_file() and (run_dir / name).stat().st_size for name in (PREDICTIONS, MEMORY))


def discard_unused(run_dir: Path, before: Collection[str] | None = None) -> bool:
    """Remove what a failed start wrote into ``run_dir`` when it holds nothing of a run, so that a run that failed
    before its first question leaves nothing behind. ``before``: the names the folder held before this start
    (:func:`inventory`; None: the start made the folder). Those names stay, and so does the folder unless the start
    made it. Everything else the folder holds must be what a start leaves before its first answer, recognized by
    name and content (:func:`_started_entry`), or nothing is removed: so is a folder holding an answer or a trace,
    and one another job holds. Returns whether anything was removed."""
    if not run_dir.is_dir():
        return False
    kept = set(before or ())
    added = [entry for entry in run_dir.iterdir() if entry.name not in kept]
    if not added or not all(_started_entry(entry) for entry in added) or _holds_results(run_dir):
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
