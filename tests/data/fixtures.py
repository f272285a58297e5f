"""Tiny datasets in each benchmark's released format, with the real field names, and tiny mp4 videos.

Every builder writes under ``root``, returns the :class:`BenchmarkConfig` that loads it, and includes the cases a
real download has: a question whose video file is missing and one malformed annotation row. The loader tests and the
job's end-to-end tests share these builders.
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
    frames = [np.stack([np.add.outer(ramp, ramp) / 2, np.full((size, size), 20.0 * i), np.add.outer(ramp, -ramp) % 255],
                       axis=-1).clip(0, 255).astype(np.uint8) for i in range(n_frames)]
    return write_video(path, frames, fps)


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
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
    return {"video_id": qid.split("-")[0], "duration": duration, "domain": "Knowledge", "sub_category": "Astronomy",
            "url": f"https://www.youtube.com/watch?v={vid}", "videoID": vid, "question_id": qid, "task_type": task,
            "question": f"Question {qid}?", "options": options, "answer": answer}


def build_videomme(root: Path, fmt: str = "json") -> BenchmarkConfig:
    """Video vmmeA (2 questions, file present), vmmeB (1 question, file missing), one row with 2 options."""
    tiny_video(root / "data" / "vmmeA.mp4")
    rows = [_vmme("001-1", "vmmeA", "short", "Counting Problem", "C"),
            _vmme("001-2", "vmmeA", "short", "OCR Problems", "A"),
            _vmme("002-1", "vmmeB", "long", "Counting Problem", "D"),
            _vmme("002-2", "vmmeB", "long", "OCR Problems", "B", n_options=2)]
    path = write_rows(rows, root / "videomme" / f"test-00000-of-00001.{fmt}")
    return BenchmarkConfig(name="videomme", root=str(root), annotations=str(path))


def build_mlvu(root: Path, fmt: str = "json") -> BenchmarkConfig:
    """Two videos in per-task folders (one missing), three questions, one row with an unknown task type."""
    tiny_video(root / "video" / "1_plotQA" / "plot_1.mp4")

    def row(qid: str, video: str, task: str, answer: str) -> dict[str, Any]:
        cands = ["red", "green", "blue", "yellow"]
        question = f"What colour is shown in {qid}?\n" + "\n".join(f"({'ABCD'[i]}) {c}" for i, c in enumerate(cands))
        return {"video_name": video, "duration": 3.0, "question": question, "candidates": cands, "answer": answer,
                "task_type": task, "question_id": qid}

    rows = [row("plotQA_0", "plot_1.mp4", "plotQA", "B"), row("plotQA_1", "plot_1.mp4", "plotQA", "D"),
            row("count_0", "count_9.mp4", "count", "A"), row("summary_0", "plot_1.mp4", "summary", "A")]
    path = write_rows(rows, root / "mlvu" / f"test-00000-of-00001.{fmt}")
    return BenchmarkConfig(name="mlvu", root=str(root), annotations=str(path))


def build_egoschema(root: Path, fmt: str = "json") -> BenchmarkConfig:
    """Video ego-a present, ego-b missing; one row whose answer is not an option index."""
    tiny_video(root / "videos" / "ego-a.mp4")

    def row(qid: str, video: str, answer: str) -> dict[str, Any]:
        options = [f"{'ABCDE'[i]}. c does thing {i} in {qid}." for i in range(5)]
        return {"question_idx": qid, "question": f"What does c do overall in {qid}?", "video_idx": video,
                "option": options, "answer": answer}

    rows = [row("q-0", "ego-a", "2"), row("q-1", "ego-b", "0"), row("q-2", "ego-a", "7")]
    path = write_rows(rows, root / "Subset" / f"test-00000-of-00001.{fmt}")
    return BenchmarkConfig(name="egoschema", root=str(root), annotations=str(path))


def build_longvideobench(root: Path) -> BenchmarkConfig:
    """lvb_val.json with option0..option4 ("N/A" unused): one 4-option and one 5-option question on a present
    video, one question on a missing video, one row whose correct_choice points at "N/A"."""
    tiny_video(root / "videos" / "lvbA.mp4")

    def row(qid: str, video: str, choice: int, n_options: int, duration_group: int) -> dict[str, Any]:
        opts = {f"option{i}": (f"event {i} of {qid}" if i < n_options else "N/A") for i in range(5)}
        return {"video_id": video, "id": qid, "video_path": f"{video}.mp4", "subtitle_path": f"{video}_en.json",
                "correct_choice": choice, "question": f"In {qid}, what happens?", **opts, "duration": 3.0,
                "duration_group": duration_group, "question_category": "E2O", "topic_category": "NP-News-Programs"}

    rows = [row("lvbA_0", "lvbA", 1, 4, 15), row("lvbA_1", "lvbA", 4, 5, 15), row("lvbB_0", "lvbB", 0, 4, 600),
            row("lvbB_1", "lvbB", 4, 4, 600)]
    path = write_rows(rows, root / "lvb_val.json")
    return BenchmarkConfig(name="longvideobench", root=str(root), annotations=str(path))


STREAMING_QUESTIONS = [  # (task_type, time_stamp, answer), deliberately out of time order
    ("Object Perception", "00:00:02", "B"),
    ("Counting", "00:00:01", "A"),
    ("Causal Reasoning", "00:00:03", "D"),
]


def _sb_question(i: int, task: str, stamp: str, answer: str) -> dict[str, Any]:
    return {"task_type": task, "question": f"What is visible at {stamp} (q{i})?", "time_stamp": stamp,
            "answer": answer, "options": [f"{'ABCD'[k]}. thing {k}." for k in range(4)],
            "required_ability": "working memory"}


def build_streamingbench(root: Path, fmt: str = "json") -> BenchmarkConfig:
    """Real-time part: sample_1 (3 questions, present), sample_2 (missing video, one question with a bad time
    stamp). ``fmt="csv"`` writes the one-question-per-row CSV instead of the JSON."""
    tiny_video(root / "videos" / "sample_1_real.mp4")
    q1 = [_sb_question(i, *q) for i, q in enumerate(STREAMING_QUESTIONS)]
    q2 = [_sb_question(9, "Counting", "00:00:01", "C"), _sb_question(10, "Counting", "soon", "A")]
    if fmt == "json":
        entries = [{"time": "[0:00:00 - 0:00:03]", "questions": q, "video_categories": "Life Record",
                    "video_path": f"./videos/sample_{n}_real.mp4"} for n, q in ((1, q1), (2, q2))]
        path = write_rows(entries, root / "questions_real.json")
    else:
        rows = [{"question_id": f"Real-Time Visual Understanding_sample_{n}_{k}", "task_type": q["task_type"],
                 "question": q["question"], "time_stamp": q["time_stamp"], "answer": q["answer"],
                 "options": repr(q["options"]), "frames_required": "single", "temporal_clue_type": "Prior"}
                for n, qs in ((1, q1), (2, q2)) for k, q in enumerate(qs, start=1)]
        path = write_rows(rows, root / "Real_Time_Visual_Understanding.csv")
    return BenchmarkConfig(name="streamingbench", root=str(root), annotations=str(path), part="real_time")


BUILDERS = {
    "videomme": build_videomme,
    "mlvu": build_mlvu,
    "egoschema": build_egoschema,
    "longvideobench": build_longvideobench,
    "streamingbench": build_streamingbench,
}
