"""StreamingBench's released annotation files, flattened to one row per question with a stable id.

The JSON files (``questions_real.json``, ``questions_omni.json``) are lists of entries, one per time window, and
several entries share one video; ``questions_sqa.json`` is a list of lists (one inner list per video, in the order its
questions are asked); the Hub CSVs hold one question per row with ids ``<category>_sample_<N>_<q>``, whose sample
numbers repeat across categories. Task names are normalised to the paper's (the JSON says "Object Recognition" where
the CSV and the paper say "Object Perception"), and every task belongs to the group the paper reports it in.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from infinipotv.data.loading import RowError, is_blank

GROUPS = {  # the paper's three groups and their tasks, as the paper names them
    "Real-Time Visual Understanding": (
        "Object Perception",
        "Causal Reasoning",
        "Clips Summarize",
        "Attribute Perception",
        "Event Understanding",
        "Text-Rich Understanding",
        "Prospective Reasoning",
        "Spatial Understanding",
        "Action Perception",
        "Counting",
    ),
    "Omni-Source Understanding": (
        "Emotion Recognition",
        "Scene Understanding",
        "Source Discrimination",
        "Multimodal Alignment",
    ),
    "Contextual Understanding": (
        "Misleading Context Understanding",
        "Anomaly Context Understanding",
        "Sequential Question Answering",
        "Proactive Output",
    ),
}
TASK_GROUP = {task: group for group, tasks in GROUPS.items() for task in tasks}
ALIASES = {
    "Object Recognition": "Object Perception",
    "Attribute Recognition": "Attribute Perception",
    "Action Recognition": "Action Perception",
}  # the released JSON's names -> the paper's (and the CSV's)
N_OPTIONS = 4  # StreamingBench's prompt asks for "the four options provided"
_LABEL = re.compile(r"^\s*\(?([A-F])[.)]")
_CSV_ID = re.compile(r"^(?P<category>.+)_sample_(?P<n>\d+)_(?P<q>\d+)$")


def task_and_group(raw: Any) -> tuple[str, str]:
    """The paper's task name and its group; an unknown task is a bad row."""
    task = ALIASES.get(str(raw).strip(), str(raw).strip())
    if task not in TASK_GROUP:
        raise RowError(f"task_type {raw!r} is not one of StreamingBench's 18 tasks")
    return task, TASK_GROUP[task]


def repair_options(raw: Any) -> list[str]:
    """A released option list as StreamingBench's four options.

    Bare-text lists are kept as they are (the prompt labels them A-D, as upstream does). A few omni lists split one
    option over two entries, hold empty entries, or add junk past D ("E. .", "F. Translated with ..."); upstream
    formats only the first four entries, which shows a fragment as an option and drops D. Here a labelled entry
    starts an option, an unlabelled one continues the previous option, empty entries are dropped, and options past
    D are left out.
    """
    if not isinstance(raw, list):
        raise RowError(f"options must be a list, got {raw!r}")
    if not any(isinstance(o, str) and _LABEL.match(o) for o in raw):
        return raw
    merged: list[str] = []
    for entry in raw:
        if is_blank(entry):
            continue
        if _LABEL.match(str(entry)) or not merged:
            merged.append(str(entry).strip())
        else:
            merged[-1] = f"{merged[-1]} {str(entry).strip()}"
    return merged[:N_OPTIONS] if len(merged) > N_OPTIONS else merged


def csv_options(raw: Any) -> Any:
    """The CSV stores the option list as a Python literal string."""
    if not isinstance(raw, str):
        return raw
    try:
        return ast.literal_eval(raw)
    except (SyntaxError, ValueError):
        raise RowError(f"options {raw!r} is not a list literal") from None


def _entry_problem(entry: dict[str, Any]) -> str | None:
    if is_blank(entry.get("video_path")):
        return "entry has no video_path"
    if not isinstance(entry.get("questions"), list):
        return "entry has no 'questions' list"
    return None


def flatten_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JSON's entries -> one row per question. A video's questions from all its entries are numbered together
    in file order, so ``<video stem>_<k>`` is unique and stays the same as long as the released file does."""
    counts: dict[str, int] = {}
    rows = []
    for e, entry in enumerate(entries):
        problem = entry.get("_problem") or _entry_problem(entry)
        if problem:
            rows.append({"question_id": f"entry{e}", "_problem": f"entry {e}: {problem}"})
            continue
        path = str(entry["video_path"])
        vid = Path(path).stem
        for q in entry["questions"]:
            counts[vid] = counts.get(vid, 0) + 1
            row = q if isinstance(q, dict) else {"_problem": f"question is a {type(q).__name__}, not an object"}
            rows.append({**row, "question_id": f"{vid}_{counts[vid]}", "video_id": vid, "video_path": path})
    return rows


def flatten_sqa(videos: list[Any]) -> list[dict[str, Any]]:
    """``questions_sqa.json``: a list of videos, each a list of entries; the same ids as :func:`flatten_entries`."""
    entries = []
    for v, video in enumerate(videos):
        if isinstance(video, list):
            entries += video
        else:
            entries.append({"_problem": f"video {v} is a {type(video).__name__}, not a list of entries"})
    return flatten_entries(entries)


def flatten_csv(rows: list[dict[str, Any]], pattern: str) -> list[dict[str, Any]]:
    """Hub CSV rows: the video is ``<category>_sample_<N>`` (categories never merge), its file ``pattern`` filled
    with ``category`` and ``n``."""
    flat = []
    for row in rows:
        m = _CSV_ID.match(str(row.get("question_id", "")))
        if m is None:
            flat.append({**row, "_problem": f"question_id {row.get('question_id')!r} is not <category>_sample_<N>_<q>"})
            continue
        category, n = m.group("category"), m.group("n")
        flat.append({**row, "video_id": f"{category}_sample_{n}", "video_path": pattern.format(category=category, n=n)})
    return flat


def is_proactive(entries: list[Any]) -> bool:
    """Proactive-output questions carry a ground-truth output instead of options and an answer."""
    return any(
        isinstance(e, dict)
        and any(isinstance(q, dict) and "ground_truth_output" in q for q in e.get("questions") or [])
        for e in entries
    )
