"""``memory.jsonl``, a run's trace of what it streamed, as the metrics read it: a step they cannot count (a key
missing, a byte count that is not a number: a hand edit, a damaged file) is left out with one warning naming the file
and line, never a TypeError; a last line cut short in a video whose trace is not written again is named in one
warning, since the memory figures then count that video's steps before it alone."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from .directory import METRICS, parse_line

TRACE_KEYS = (
    "video_id",
    "frames_seen",
    "compress",
    "total_tokens",
    "video_tokens",
    "cache_bytes",
    "peak_memory_bytes",
    "encode_seconds",
)
#: The fields of a step the metrics add up or take the peak of.
NUMBERS = (
    "frames_seen",
    "total_tokens",
    "video_tokens",
    "cache_bytes",
    "peak_memory_bytes",
    "encode_seconds",
    "accelerator_bytes",
    "host_bytes",
)
_VIDEO = re.compile(rb'^\{"video_id": ("(?:[^"\\]|\\.)*")')


def is_number(value: Any) -> bool:
    """A count or a time the metrics can add: an int or a finite float (not a bool, a string or null)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _why_not_a_step(step: Any) -> str | None:
    if not isinstance(step, dict):
        return f"a JSON {type(step).__name__}, not a step"
    missing = [k for k in TRACE_KEYS if k not in step]
    if missing:
        return f"no {', '.join(missing)} (each step needs {', '.join(TRACE_KEYS)})"
    if not isinstance(step["video_id"], str):
        return f"video_id is {step['video_id']!r}, not a text"
    wrong = next((k for k in NUMBERS if k in step and not is_number(step[k])), None)
    if wrong is not None:
        return f"{wrong} is {step[wrong]!r}, not a number"
    passes = step["compress"]
    if passes is not None and not (
        isinstance(passes, dict) and is_number(passes.get("seconds")) and is_number(passes.get("passes", 1))
    ):
        return f"compress is {passes!r}, not a compression pass (null or a mapping with its seconds and passes)"
    return None


def trace_steps(path: Path) -> list[dict]:
    """The steps of ``memory.jsonl`` the metrics can count; the others are left out with one warning naming the
    file, how many lines, and the first lines with why (the answers and the rest of the trace still count). A video
    whose steps are not numbered 0, 1, 2, ... (a step deleted or repeated by hand) is named in one warning too: its
    memory figures would change without a word."""
    if not path.is_file():
        return []
    steps: list[dict] = []
    bad: list[tuple[int, str]] = []
    numbers: dict[str | None, list[int]] = {}  # each video's step numbers, bad steps' included (None: of no video)
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            step, why = parse_line(line)
            if isinstance(step, dict) and is_number(step.get("step")):
                video = step.get("video_id")
                numbers.setdefault(video if isinstance(video, str) else None, []).append(step["step"])
            why = why or _why_not_a_step(step)
            if why is None:
                steps.append(step)
            else:
                bad.append((number, why))
    if bad:
        shown = "; ".join(f"line {n}: {why}" for n, why in bad[:3]) + ("; ..." if len(bad) > 3 else "")
        _warn(
            f"{path}: {len(bad)} line(s) not a whole trace step ({shown}); left out of the memory figures in {METRICS}"
        )
    _warn_gaps(path, numbers)
    return steps


def _warn_gaps(path: Path, numbers: dict[str | None, list[int]]) -> None:
    """One warning naming each video whose step numbers have a gap or a repeat (a job writes 0, 1, 2, ...); a number
    missing that a step of no video holds (a bad step, named already) is no gap."""
    unplaced = set(numbers.pop(None, []))
    gaps = []
    for video, found in numbers.items():
        missing = sorted(set(range(int(max(found)) + 1)) - set(found) - unplaced)
        repeated = sorted({n for n in found if found.count(n) > 1})
        said = [f"step(s) {', '.join(map(str, missing))} missing"] if missing else []
        said += [f"step(s) {', '.join(map(str, repeated))} repeated"] if repeated else []
        gaps += [f"video {video!r} {' and '.join(said)}"] if said else []
    if gaps:
        shown = "; ".join(gaps[:3]) + ("; ..." if len(gaps) > 3 else "")
        _warn(
            f"{path}: steps deleted or repeated ({shown}): the memory figures in {METRICS} count those videos as the "
            f"file holds them; run them into a new run_dir= to measure their whole trace again"
        )


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def cut_step(path: Path) -> tuple[int, str | None] | None:
    """The line number of a last line cut short (no newline, not JSON) and the video it was a step of (None when
    the cut left too little to say), or None when the file ends whole."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n") + 1
    if parse_line(data[start:])[1] is None:
        return None  # a whole step missing only its newline
    match = _VIDEO.match(data[start:])
    return data.count(b"\n") + 1, json.loads(match.group(1)) if match else None


def warn_cut(path: Path, cut: tuple[int, str | None]) -> None:
    """The one line for a last step cut short in a video whose trace is kept: the metrics lose that step."""
    line, video = cut
    of = f"video {video!r}" if video is not None else "a video"
    _warn(
        f"{path}:{line}: the last line is cut short (a write interrupted, or the file cut): it is dropped, and the "
        f"memory figures in {METRICS} count {of} without it; run it into a new run_dir= to measure its whole trace "
        f"again"
    )
