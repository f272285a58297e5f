"""Small datasets in each benchmark's released layout and shape, written by our own code, with tiny mp4 videos.

Each builder writes under ``root`` and returns the :class:`BenchmarkConfig` that loads it. The rows copy the quirks
of the real releases (several StreamingBench entries per video, H:MM:SS / MM:SS stamps, bare-text and split option
lists, CSV ids ``<category>_sample_<N>_<q>`` with the CSV's task names, MLVU's per-task files with ``findNeedle``,
an answer that is not a candidate, EgoSchema's ``questions.json`` + ``subset_answers.json`` pair). With
``errors=True`` (the test fixtures) each set also holds a question whose video is missing and malformed rows; with
``errors=False`` (``python -m infinipotv.data.toy``) every question can be answered.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from infinipotv.config import BenchmarkConfig
from infinipotv.data.video import write_video


def tiny_video(path: Path, n_frames: int = 12, size: int = 64, fps: int = 4) -> Path:
    """An mp4 of ``n_frames`` distinct frames (a moving gradient), ``n_frames / fps`` seconds long."""
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    frames = [
        np.stack(
            [np.add.outer(ramp, ramp) / 2, np.full((size, size), 20.0 * i), np.add.outer(ramp, -ramp) % 255], axis=-1
        )
        .clip(0, 255)
        .astype(np.uint8)
        for i in range(n_frames)
    ]
    return write_video(path, frames, fps)


def write_rows(rows: list[Any], path: Path) -> Path:
    """Rows as .json / .jsonl / .csv / .parquet (parquet needs pyarrow, as for the released files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=1))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".parquet":
        import pandas as pd

        pd.DataFrame(rows).to_parquet(path)
    else:
        raise ValueError(f"unknown fixture format {path.suffix}")
    return path


def _vmme(qid: str, vid: str, duration: str, task: str, answer: str, n_options: int = 4) -> dict[str, Any]:
    options = [f"{'ABCD'[i]}. Option {i + 1} of {qid}." for i in range(n_options)]
    return {
        "video_id": qid.split("-")[0],
        "duration": duration,
        "domain": "Knowledge",
        "sub_category": "Astronomy",
        "url": f"https://www.youtube.com/watch?v={vid}",
        "videoID": vid,
        "question_id": qid,
        "task_type": task,
        "question": f"Question {qid}?",
        "options": options,
        "answer": answer,
    }


def build_videomme(
    root: Path, fmt: str = "parquet", errors: bool = True, n_frames: int = 12, size: int = 64
) -> BenchmarkConfig:
    """Video vmmeA (2 questions, file present, ``n_frames`` of ``size`` pixels square at 4 fps); errors: vmmeB
    (1 question, file missing), one row with 2 options."""
    tiny_video(root / "data" / "vmmeA.mp4", n_frames=n_frames, size=size)
    rows = [
        _vmme("001-1", "vmmeA", "short", "Counting Problem", "C"),
        _vmme("001-2", "vmmeA", "short", "OCR Problems", "A"),
    ]
    if errors:
        rows += [
            _vmme("002-1", "vmmeB", "long", "Counting Problem", "D"),
            _vmme("002-2", "vmmeB", "long", "OCR Problems", "B", n_options=2),
        ]
    path = write_rows(rows, root / "videomme" / f"test-00000-of-00001.{fmt}")
    return BenchmarkConfig(name="videomme", root=str(root), annotations=str(path))


# MLVU: (task file, question_type, video, question, candidates, answer text); the Hub keeps the dev MC questions
MLVU_QUESTIONS = [
    (
        "1_plotQA",
        "plotQA",
        "plot_1.mp4",
        "What colour is the main character's coat?",
        ["Yellow", "Red", "Green", "Blue"],
        "Red",
    ),
    (
        "1_plotQA",
        "plotQA",
        "plot_1.mp4",
        "What does the main character hold at the end?",
        ["A cup", "A book", "A cup", "A key"],
        "A cup",
    ),  # a repeated candidate, as in the release
    (
        "2_needle",
        "findNeedle",
        "needle_1.mp4",
        "What does the hand coming out of the screen do?",
        ["Waves", "Points at the screen", "Takes a card", "Delivers a box"],
        "Delivers a box",
    ),
    ("4_count", "count", "count_1.mp4", "How many times does the 'jumping' scene occur?", ["2", "1", "5", "4"], "1"),
]
MLVU_ANSWER_NOT_A_CANDIDATE = (
    "2_needle",
    "findNeedle",
    "needle_1.mp4",
    "What is caught in the air?",
    ["Fishing", "Catching the drone", "Launching the drone", "Sunbathing"],
    "Catching a flying drone quadcopter",
)
MLVU_TYPES = {"findNeedle": "needle"}


def _mlvu_video_dir(task_file: str) -> str:
    return f"video/{task_file}"


def build_mlvu(root: Path, fmt: str = "parquet", errors: bool = True) -> BenchmarkConfig:
    """The Hub dev parquet (``fmt``) or, with ``fmt="official"``, the per-task JSONs under ``json/`` (plus an
    open-ended ``9_summary.json``, which is left out). Videos under ``video/<task file>/``. Errors: a question on a
    missing video and, officially, an answer that is not among the candidates (the Hub leaves it out) or, in the
    Hub file, an unknown task type."""
    questions = list(MLVU_QUESTIONS)
    if errors:
        questions.append(
            (
                "4_count",
                "count",
                "count_9.mp4",
                "How many times does the 'sitting' scene occur?",
                ["3", "2", "1", "6"],
                "2",
            )
        )
    for task_file, _, video, *_ in questions:
        if video != "count_9.mp4" and not (root / _mlvu_video_dir(task_file) / video).exists():
            tiny_video(root / _mlvu_video_dir(task_file) / video)
    if fmt == "official":
        by_file: dict[str, list[dict[str, Any]]] = {}
        for task_file, qtype, video, question, cands, answer in questions + (
            [MLVU_ANSWER_NOT_A_CANDIDATE] if errors else []
        ):
            by_file.setdefault(task_file, []).append(
                {
                    "video": video,
                    "duration": 3.0,
                    "question": question,
                    "candidates": cands,
                    "answer": answer,
                    "question_type": qtype,
                }
            )
        by_file["9_summary"] = [
            {
                "video": "plot_1.mp4",
                "duration": 3.0,
                "question": "Please summarize this video.",
                "answer": "A person walks.",
                "question_type": "summary",
            }
        ]
        for task_file, rows in by_file.items():
            write_rows(rows, root / "json" / f"{task_file}.json")
        return BenchmarkConfig(name="mlvu", root=str(root), annotations=str(root / "json"))
    counts: dict[str, int] = {}
    rows = []
    for _, qtype, video, question, cands, answer in questions:
        task = MLVU_TYPES.get(qtype, qtype)
        k = counts[task] = counts.get(task, -1) + 1
        letter = "ABCD"[len(cands) - 1 - cands[::-1].index(answer)]
        text = question + "".join(f"\n({x}) {c}" for x, c in zip("ABCD", cands))
        rows.append(
            {
                "video_name": video,
                "duration": 3.0,
                "question": text,
                "candidates": cands,
                "answer": letter,
                "task_type": task,
                "question_id": f"{task}_{k}",
            }
        )
    if errors:
        rows.append({**rows[0], "task_type": "summary", "question_id": "summary_0"})
    path = write_rows(rows, root / "mlvu" / f"test-00000-of-00001.{fmt}")
    return BenchmarkConfig(name="mlvu", root=str(root), annotations=str(path))


# EgoSchema: (q_uid, answer index or None when the answer is not public)
EGO_QUESTIONS = [("0a1b2c3d-ego-a", 2), ("4e5f6a7b-ego-b", 0), ("8c9d0e1f-ego-c", None)]


def build_egoschema(root: Path, fmt: str = "parquet", errors: bool = True) -> BenchmarkConfig:
    """The Hub ``Subset`` parquet (``fmt``) or, with ``fmt="official"``, ``questions.json`` + ``subset_answers.json``.
    The third question has no public answer (not in the subset). Errors: ego-b's video is missing, and one answer
    that is out of range (Hub) or names an unknown q_uid (official)."""
    present = EGO_QUESTIONS if not errors else [EGO_QUESTIONS[0], EGO_QUESTIONS[2]]
    for uid, _ in present:
        tiny_video(root / "videos" / f"{uid}.mp4")

    def options(uid: str) -> list[str]:
        return [f"c does thing {i} in {uid}." for i in range(5)]

    if fmt == "official":
        questions = [
            {
                "q_uid": uid,
                "google_drive_id": f"drive-{uid}",
                "question": f"What does c do overall in {uid}?",
                **{f"option {i}": o for i, o in enumerate(options(uid))},
            }
            for uid, _ in EGO_QUESTIONS
        ]
        answers = {uid: a for uid, a in EGO_QUESTIONS if a is not None}
        if errors:
            answers["ffffffff-unknown"] = 1
        write_rows(questions, root / "questions.json")
        (root / "subset_answers.json").write_text(json.dumps(answers))
        return BenchmarkConfig(name="egoschema", root=str(root), annotations=str(root / "questions.json"))
    rows = [
        {
            "question_idx": uid,
            "question": f"What does c do overall in {uid}?",
            "video_idx": uid,
            "option": [f"{'ABCDE'[i]}. {o}" for i, o in enumerate(options(uid))],
            "answer": str(a),
        }
        for uid, a in EGO_QUESTIONS
        if a is not None
    ]
    if errors:
        rows.append({**rows[0], "question_idx": "q-bad", "answer": "7"})
    path = write_rows(rows, root / "Subset" / f"test-00000-of-00001.{fmt}")
    return BenchmarkConfig(name="egoschema", root=str(root), annotations=str(path))


def build_longvideobench(root: Path, fmt: str = "json", errors: bool = True) -> BenchmarkConfig:
    """lvb_val.json with option0..option4 ("N/A" unused): one 4-option and one 5-option question on a present
    video; errors: one question on a missing video, one row whose correct_choice points at "N/A"."""
    tiny_video(root / "videos" / "lvbA.mp4")

    def row(qid: str, video: str, choice: int, n_options: int, duration_group: int) -> dict[str, Any]:
        opts = {f"option{i}": (f"event {i} of {qid}" if i < n_options else "N/A") for i in range(5)}
        return {
            "video_id": video,
            "id": qid,
            "video_path": f"{video}.mp4",
            "subtitle_path": f"{video}_en.json",
            "correct_choice": choice,
            "question": f"In {qid}, what happens?",
            **opts,
            "duration": 3.0,
            "duration_group": duration_group,
            "question_category": "E2O",
            "topic_category": "NP-News-Programs",
        }

    rows = [row("lvbA_0", "lvbA", 1, 4, 15), row("lvbA_1", "lvbA", 4, 5, 15)]
    if errors:
        rows += [row("lvbB_0", "lvbB", 0, 4, 600), row("lvbB_1", "lvbB", 4, 4, 600)]
    path = write_rows(rows, root / f"lvb_val.{fmt}")
    return BenchmarkConfig(name="longvideobench", root=str(root), annotations=str(path))
