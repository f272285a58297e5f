"""Small StreamingBench sets in the released shapes (see :mod:`infinipotv.data.toy_sets` for the common writers).

Real-time JSON: sample_1's questions come from two entries (time windows) with other entries between them, stamps
as HH:MM:SS, H:MM:SS and MM:SS, the JSON's task names ("Object Recognition"), one bare-text option list. Omni JSON:
a split option list with empty and junk entries past D (as in the release), and a Misleading Context question (a
Contextual Understanding task in the paper). SQA: a list of lists, bare-text options. CSV: ids
``<category>_sample_<N>_<q>``, the CSV's task names ("Object Perception"), options as a Python list literal, videos
at ``<category>/sample_<N>/video.mp4``. Errors: sample_2's video is missing and one of its stamps is ``00:12450``;
an unknown omni task; an SQA option list given as one string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinipotv.config import BenchmarkConfig
from infinipotv.data.toy_sets import tiny_video, write_rows

REAL = "Real-Time Visual Understanding"
OMNI = "Omni-Source Understanding"
CSV_FILES = {"real_time": (REAL, "Real_Time_Visual_Understanding.csv"), "omni": (OMNI, "Omni_Source_Understanding.csv")}
# (JSON task name, time stamp, seconds, answer), deliberately out of time order over two entries of one video
STREAMING_QUESTIONS = [
    ("Object Recognition", "00:00:02", 2, "B"),
    ("Counting", "0:00:01", 1, "A"),
    ("Causal Reasoning", "00:03", 3, "D"),
]
CSV_TASKS = {"Object Recognition": "Object Perception"}


def _question(i: int, task: str, stamp: str, seconds: int, answer: str, bare: bool = False) -> dict[str, Any]:
    options = [f"thing {k}." for k in range(4)]
    return {
        "task_type": task,
        "question": f"What is visible at 00:00:0{seconds} (q{i})?",
        "time_stamp": stamp,
        "answer": answer,
        "options": options if bare else [f"{'ABCD'[k]}. {o}" for k, o in enumerate(options)],
        "required_ability": "working memory",
    }


def _entry(window: str, questions: list[dict[str, Any]], video: str) -> dict[str, Any]:
    return {
        "time": window,
        "questions": questions,
        "video_categories": "Life Record",
        "video_path": f"./videos/{video}.mp4",
    }


def _real_time(errors: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    first, second, third = (_question(i, *q, bare=i == 2) for i, q in enumerate(STREAMING_QUESTIONS))
    sample_1 = [_entry("[0:00:00 - 0:00:02]", [first, second], "sample_1_real")]
    later = [_entry("[0:00:02 - 0:00:03]", [third], "sample_1_real")]
    broken = [_question(9, "Counting", "00:00:01", 1, "C"), _question(10, "Counting", "00:12450", 4, "A")]
    if not errors:
        return sample_1 + later, [dict(q, n=1) for q in (first, second, third)]
    return (
        sample_1 + [_entry("0:00:00 - 0:00:03", broken, "sample_2_real")] + later,
        [*(dict(q, n=1) for q in (first, second, third)), *(dict(q, n=2) for q in broken)],
    )


def _omni(errors: bool) -> list[dict[str, Any]]:
    split = [
        "A. A man waves and the narrator says, 'Have you packed",
        "yet?'.",
        "",
        "B. A dog runs.",
        "C. A car stops.",
        "D. A bell rings.",
        "E. .",
    ]
    questions = [
        {**_question(0, "Scene Understanding", "00:00:01", 1, "A"), "options": split},
        _question(1, "Misleading Context Understanding", "00:00:02", 2, "C"),
        _question(2, "Emotion Recognition", "00:00:03", 3, "B"),
    ]
    if errors:
        questions.append(_question(3, "Audio Guessing", "00:00:03", 3, "B"))
    return [_entry("[0:00:00 - 0:00:03]", questions, "sample_1_Scene_Understanding")]


def _sqa(errors: bool) -> list[list[dict[str, Any]]]:
    video = [
        _entry(
            f"[0:00:0{t - 1} - 0:00:0{t}]",
            [_question(t, "Sequential Question Answering", f"00:00:0{t}", t, "ABC"[t - 1], bare=True)],
            "sample_1_sqa",
        )
        for t in (1, 2, 3)
    ]
    if not errors:
        return [video]
    bad = _question(9, "Sequential Question Answering", "00:00:01", 1, "A")
    return [
        video,
        [_entry("[0:00:00 - 0:00:01]", [{**bad, "options": ["A.Lebrun. Fan Z.D. Xu xin. Ma Lin."]}], "sample_2_sqa")],
    ]


def _csv(part: str, errors: bool) -> list[dict[str, Any]]:
    category = CSV_FILES[part][0]
    _, flat = _real_time(errors)
    rows = []
    numbers: dict[int, int] = {}
    for q in flat:
        k = numbers[q["n"]] = numbers.get(q["n"], 0) + 1
        if part == "omni":
            q = {**q, "task_type": "Emotion Recognition"}
        rows.append(
            {
                "question_id": f"{category}_sample_{q['n']}_{k}",
                "task_type": CSV_TASKS.get(q["task_type"], q["task_type"]),
                "question": q["question"],
                "time_stamp": q["time_stamp"],
                "answer": q["answer"],
                "options": repr([f"{'ABCD'[i]}. thing {i}." for i in range(4)]),
                "frames_required": "single",
                "temporal_clue_type": "Prior",
            }
        )
    return rows


def build_streamingbench(
    root: Path, fmt: str = "json", errors: bool = True, part: str = "real_time"
) -> BenchmarkConfig:
    """One part (``real_time``, ``omni`` or ``contextual``) as the released JSON, or (``fmt="csv"``, real_time and
    omni) as the Hub CSV. Videos: ``videos/<stem>.mp4`` for the JSON, ``<category>/sample_<N>/video.mp4`` for the
    CSV; sample_2's video is never written."""
    if fmt == "csv":
        category, name = CSV_FILES[part]
        tiny_video(root / category / "sample_1" / "video.mp4")
        path = write_rows(_csv(part, errors), root / name)
    elif part == "real_time":
        tiny_video(root / "videos" / "sample_1_real.mp4")
        path = write_rows(_real_time(errors)[0], root / "questions_real.json")
    elif part == "omni":
        tiny_video(root / "videos" / "sample_1_Scene_Understanding.mp4")
        path = write_rows(_omni(errors), root / "questions_omni.json")
    else:
        tiny_video(root / "videos" / "sample_1_sqa.mp4")
        path = write_rows(_sqa(errors), root / "questions_sqa.json")
    return BenchmarkConfig(name="streamingbench", root=str(root), annotations=str(path), part=part)


def proactive_entries() -> list[dict[str, Any]]:
    """``questions_proactive.json``'s shape: a ground-truth output and its time, no options or answer."""
    question = {
        "task_type": "Proactive Output",
        "question": 'When the score shows 3, output "3".',
        "time_stamp": "00:00:01",
        "ground_truth_time_stamp": "00:00:02",
        "ground_truth_output": "3",
        "required_ability": "working memory",
    }
    return [_entry("[0:00:00 - 0:00:03]", [question], "sample_1_proactive")]
