"""The run directory: its files, the one reader of its JSON-lines files, and what keeps it to one run.

A run directory holds one run: :func:`claim` takes an exclusive lock for the writing job (a second writer is
refused at once, with the holder named) and refuses to resume a directory whose recorded configuration differs from
the new one, naming the keys, before anything is appended.

A job appends to ``predictions.jsonl`` and ``memory.jsonl`` line by line, flushing each; a job killed mid-write
leaves at most a cut last line. Every other write of a run file replaces it whole through :func:`rewrite` (a temp
file, fsynced, renamed over it), so a kill or a full disk leaves the old file or the new one, never a cut one.
Readers skip unreadable lines and count them; the job sorts the answers it finds before resuming
(:func:`sort_predictions`) and sets aside, never deletes, a line it cannot keep.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

PREDICTIONS, METRICS, MEMORY, PROVENANCE, CONFIG = (
    "predictions.jsonl",
    "metrics.json",
    "memory.jsonl",
    "provenance.json",
    "config.yaml",
)
#: Lines of predictions.jsonl a resume cannot keep (a second answer, a foreign id, unreadable), moved here.
REJECTED = "predictions.rejected.jsonl"
#: What :mod:`infinipotv.results.compact` trimmed of a finished run committed with its study (its memory.jsonl to one
#: video).
COMPACT = "compact.json"
LOCK = ".lock"
#: Top-level config keys that say where and how a run is reported, not what it computes: a resume may change them.
NOT_THE_RUN = ("run_dir", "tracking", "experiment", "table", "tuning", "retry_errors", "threads")


class RunDirError(RuntimeError):
    """A run directory that this job may not write: in use by another job, holding another configuration, or that
    the file system refuses (not a directory, read-only, full, over the file-size limit)."""


def unwritable(path: Path, err: OSError) -> RunDirError:
    """The one line for a run file the system would not write: what, why, and that a rerun loses nothing."""
    why = {
        errno.EFBIG: "the file-size limit (ulimit -f) is reached: raise it",
        errno.ENOSPC: "the disk is full: free some space",
        errno.EDQUOT: "the disk quota is exhausted: free some space",
        errno.EROFS: "the file system is read-only: give another run_dir=",
        errno.EACCES: "it is not writable: make it writable, or give another run_dir=",
        errno.EPERM: "it is not writable: make it writable, or give another run_dir=",
    }.get(err.errno or 0, "fix that")
    return RunDirError(
        f"cannot write {path}: {err.strerror or err} ({why}); what was written before is kept, and a rerun on "
        f"the same run_dir= resumes from it"
    )


def check_usable(run_dir: Path, key: str = "run_dir") -> None:
    """Refuse, in one line, a ``run_dir`` that cannot hold a run: one naming a file, a symbolic link to nothing (on
    the way to it), or a directory (or the nearest existing folder above a new one) that the file system will not let
    us write. run.py asks before Hydra writes its own files there (``key``: the option that named it)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{key}={run_dir} names a file, not a directory: give a directory (new or a run's)")
    folder = run_dir
    while not folder.exists():
        if folder.is_symlink():  # mkdir would end in FileExistsError
            raise RunDirError(
                f"{key}={run_dir}: {folder} is a symbolic link to {os.readlink(folder)}, which does not exist: "
                f"create that folder, or give another {key}="
            )
        folder = folder.parent
    if not folder.is_dir():
        raise RunDirError(f"{key}={run_dir} lies under {folder}, a file, not a directory: give another {key}=")
    probe = folder / f".write-test-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        raise RunDirError(
            f"{key}={run_dir}: {folder} is not writable ({err.strerror}): make it writable, or give another {key}="
        ) from None


@contextmanager
def claim(run_dir: Path, config_yaml: str, defaults_yaml: str = "") -> Iterator[None]:
    """Hold ``run_dir`` for one writer while the block runs, and make sure it holds this configuration.

    The lock is on the directory itself (``flock``), so deleting or replacing ``.lock`` cannot admit a second
    writer, and on ``.lock`` as well (a POSIX record lock, which NFS shares between hosts where directory locks are
    not supported); ``.lock`` also names the holder. The kernel releases both when the job dies, so a killed job
    never leaves a stale lock. The configuration is written on the first run and compared on every later one
    (``defaults_yaml``: the schema's defaults, which a key missing from an older run's file is taken to hold)."""
    check_usable(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise unwritable(run_dir, err) from None
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _held(run_dir) from None
        except OSError:
            pass  # no directory locks here (NFS): the record lock on .lock below holds alone
        with _lock_file(run_dir):
            _check_config(run_dir, config_yaml, defaults_yaml)
            yield
    finally:
        os.close(folder)


@contextmanager
def _lock_file(run_dir: Path) -> Iterator[None]:
    path = run_dir / LOCK
    if path.is_dir():
        raise RunDirError(f"{path} is a directory, not the run's lock file: remove it (rmdir {path}) and rerun")
    try:
        lock = path.open("a+")
    except OSError as err:
        raise unwritable(path, err) from None
    with lock:
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise _held(run_dir) from None
        try:
            lock.seek(0)
            lock.truncate()
            lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            lock.flush()
        except OSError as err:
            raise unwritable(path, err) from None
        yield


def _held(run_dir: Path) -> RunDirError:
    try:
        holder = (run_dir / LOCK).read_text().strip()
    except (OSError, UnicodeDecodeError):
        holder = ""
    return RunDirError(
        f"run directory {run_dir} is being written by {holder or 'another process'}: wait for that job to end, or "
        f"give this one another run_dir="
    )


def _check_config(run_dir: Path, config_yaml: str, defaults_yaml: str) -> None:
    path = run_dir / CONFIG
    if is_blank(path) and not _has_answers(run_dir):  # an empty file holds nothing to lose; any other is never replaced
        rewrite(path, config_yaml)
        return
    if not path.exists():
        rewrite(path, config_yaml)
        return
    problem = config_conflict(run_dir, config_yaml, defaults_yaml)
    if problem:
        raise RunDirError(problem)


def is_blank(path: Path) -> bool:
    """Whether ``path`` is a file holding nothing but white space."""
    try:
        return path.is_file() and not path.read_bytes().strip()
    except OSError:
        return False


def _has_answers(run_dir: Path) -> bool:
    path = run_dir / PREDICTIONS
    return path.is_file() and path.stat().st_size > 0


def recorded_config(path: Path) -> dict[str, Any]:
    """The configuration a run directory recorded (interpolations left as written), or a RunDirError naming the file
    and line when it holds none: empty, cut short, not YAML, not a mapping."""
    fix = "restore it, or give this run another run directory"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RunDirError(f"{path} cannot be read ({type(err).__name__}: {err}): {fix}") from None
    if not text.strip():
        raise RunDirError(f"{path} is empty, so the run it holds cannot be checked against this one: {fix}")
    if not text.endswith("\n"):
        line = text.count("\n") + 1
        raise RunDirError(f"{path}:{line}: the file is cut short (no final newline: a write was interrupted): {fix}")
    try:
        tree = OmegaConf.to_container(OmegaConf.create(text))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RunDirError(f"{where}: not a readable configuration ({problem}): {fix}") from None
    except Exception as err:  # noqa: BLE001 (OmegaConf's own errors: a broken file all the same)
        raise RunDirError(f"{path}: not a readable configuration ({type(err).__name__}: {err}): {fix}") from None
    if not isinstance(tree, dict):
        raise RunDirError(f"{path}: a configuration is a mapping, not a {type(tree).__name__}: {fix}")
    return tree


def config_conflict(run_dir: Path, config_yaml: str, defaults_yaml: str = "") -> str | None:
    """Why ``run_dir`` may not take a run of ``config_yaml`` (it holds a run of another configuration, or a
    configuration that cannot be read), or None. The job checks it when it starts. A key the recorded file lacks
    holds its value in ``defaults_yaml`` (a knob added since that run was made, at the default it ran with), so an
    upgrade does not strand the run directories made before it."""
    path = run_dir / CONFIG
    if not path.is_file():
        return None
    try:
        before = _flat(recorded_config(path))
    except RunDirError as err:
        return str(err)
    after = _flat(OmegaConf.to_container(OmegaConf.create(config_yaml)))
    defaults = _flat(OmegaConf.to_container(OmegaConf.create(defaults_yaml))) if defaults_yaml else {}
    before = {**{k: v for k, v in defaults.items() if k in after}, **before}
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


def rewrite(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` atomically: written to a temp file beside it, fsynced, renamed over it, and
    the rename fsynced. A kill, a full disk or a file-size limit at any point leaves the old file or the new one
    (then a RunDirError saying so)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as err:
        with suppress(OSError):  # a read-only file system refuses even to unlink a file it never made
            tmp.unlink(missing_ok=True)
        raise unwritable(path, err) from None


def parse_line(line: bytes) -> tuple[Any, str | None]:
    """One line of a JSON-lines run file as its value, or None and why it is not one (not UTF-8, not JSON, nested
    too deeply to read)."""
    try:
        return json.loads(line.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as err:
        return None, f"not JSON ({err.msg})"
    except RecursionError:
        return None, "JSON nested too deeply to read"


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The readable records (JSON objects) of a JSON-lines file (none if it does not exist) and the number of
    lines that are not one."""
    if not path.is_file():
        return [], 0
    records: list[dict[str, Any]] = []
    bad = 0
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            value, _ = parse_line(line)
            if isinstance(value, dict):
                records.append(value)
            else:
                bad += 1
    return records, bad


def cut_last_line(path: Path) -> None:
    """Drop a last line a kill cut short (it lacks its newline and is not JSON), so that appending goes on cleanly;
    a complete last line missing only its newline gets it back. Truncation is one system call: nothing else moves."""
    if not path.is_file():
        return
    with path.open("r+b") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return
        start = data.rfind(b"\n") + 1
        if parse_line(data[start:])[1] is None:
            f.write(b"\n")
        else:
            f.truncate(start)


@dataclass
class Sorted:
    """predictions.jsonl sorted for a resume: the records kept (one per question of this run), and the lines set
    aside with their line numbers and why."""

    kept: list[dict[str, Any]]
    set_aside: list[tuple[int, bytes, str]]

    def warning(self, path: Path) -> str | None:
        """One line naming what was set aside (the first three lines and why), or None."""
        if not self.set_aside:
            return None
        shown = "; ".join(f"line {n}: {why}" for n, _, why in self.set_aside[:3])
        more = f"; and {len(self.set_aside) - 3} more" if len(self.set_aside) > 3 else ""
        return (
            f"{path}: kept {len(self.kept)} answers, set aside {len(self.set_aside)} line(s) in "
            f"{path.with_name(REJECTED).name} ({shown}{more})"
        )


def sort_predictions(
    path: Path,
    known: Collection[str],
    drop_errors: bool = False,
    stale: Callable[[dict[str, Any]], str | None] | None = None,
) -> Sorted:
    """The answers a resume keeps: the last record of each question of this run (``known`` ids), as the aggregator
    reads the file. An answer a later one supersedes, an id the run does not ask, a line that is not a prediction,
    an answer ``stale`` says why to answer again (its question changed since), and with ``drop_errors`` an error
    record (answered again) are not kept; all but the error records are set aside, never deleted. A last line cut by
    a kill is
    dropped first (:func:`cut_last_line`). When anything is not kept the file is rewritten whole
    (:func:`rewrite`) after the set-aside lines are appended to ``predictions.rejected.jsonl``."""
    cut_last_line(path)
    if not path.is_file():
        return Sorted([], [])
    kept: dict[str, tuple[bytes, dict[str, Any]]] = {}
    set_aside: list[tuple[int, bytes, str]] = []
    lines_of: dict[str, int] = {}  # the line number of each kept record
    dropped = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            record, why = parse_line(line)
            line = line if line.endswith(b"\n") else line + b"\n"
            qid = record.get("question_id") if isinstance(record, dict) else None
            if why is None and qid is None:
                why = "not a prediction (no question_id)"
            elif why is None and str(qid) not in known:
                why = f"question {qid!r} is not one of this run's"
            elif why is None and stale is not None:
                why = stale(record)
            if why is None and str(qid) in kept:
                earlier = kept.pop(str(qid))[0]
                set_aside.append((lines_of[str(qid)], earlier, f"answer to {qid!r} superseded by line {number}"))
            if why is not None:
                set_aside.append((number, line, why))
            elif drop_errors and record.get("error") is not None:
                dropped += 1
            else:
                kept[str(qid)] = (line, record)
                lines_of[str(qid)] = number
    set_aside.sort()
    if set_aside or dropped:
        if set_aside:
            _append(path.with_name(REJECTED), b"".join(line for _, line, _ in set_aside))
        rewrite(path, b"".join(line for line, _ in kept.values()))
    return Sorted([record for _, record in kept.values()], set_aside)


def _append(path: Path, data: bytes) -> None:
    try:
        with path.open("ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise unwritable(path, err) from None
