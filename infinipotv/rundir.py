"""The run directory's files, and the one reader of its JSON-lines files.

A job appends to ``predictions.jsonl`` and ``memory.jsonl`` line by line, flushing each; a job killed mid-write
leaves at most a cut last line. Readers skip unreadable lines and count them; the job itself (``repair=True``) cuts
the file at its first unreadable line before appending to it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PREDICTIONS, METRICS, MEMORY, PROVENANCE, CONFIG = (
    "predictions.jsonl", "metrics.json", "memory.jsonl", "provenance.json", "config.yaml")


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
