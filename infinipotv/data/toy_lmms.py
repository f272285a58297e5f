"""A tiny $HF_HOME laid out as lmms-eval's local tasks expect it, for the four task families we share with it.

Every question has its video (lmms-eval's Video-MME and MLVU utils exit the process on a missing one) and valid
category names (its aggregators index fixed category tables). The same tree loads in our own benchmarks with
``benchmark.root`` set to the family's folder, which is what the prompt-parity checks use.
"""

from __future__ import annotations

from pathlib import Path

from infinipotv.config import BenchmarkConfig
from infinipotv.data.toy_sets import tiny_video, write_rows

#: lmms-eval task name -> (our benchmark name, the family's folder under $HF_HOME)
FAMILIES = {
    "videomme_local": ("videomme", "videomme"),
    "mlvu_dev_local": ("mlvu", "mlvu"),
    "egoschema_subset_local": ("egoschema", "egoschema"),
    "longvideobench_val_v_local": ("longvideobench", "datasets/longvideobench"),
}


def _videomme(home: Path, n_frames: int) -> None:
    root = home / "videomme"
    rows = []
    for vid, duration, domain, sub in (
        ("vmmeA", "short", "Knowledge", "Astronomy"),
        ("vmmeB", "medium", "Life Record", "Travel"),
    ):
        tiny_video(root / "data" / f"{vid}.mp4", n_frames)
        for k, (task, answer) in enumerate((("Counting Problem", "C"), ("OCR Problems", "A"))):
            qid = f"{vid}-{k}"
            rows.append(
                {
                    "video_id": vid,
                    "duration": duration,
                    "domain": domain,
                    "sub_category": sub,
                    "url": f"https://www.youtube.com/watch?v={vid}",
                    "videoID": vid,
                    "question_id": qid,
                    "task_type": task,
                    "question": f"What is shown in {qid}?",
                    "options": [f"{x}. Thing {i} of {qid}." for i, x in enumerate("ABCD")],
                    "answer": answer,
                }
            )
    write_rows(rows, root / "videomme" / "test-00000-of-00001.parquet")


def _mlvu(home: Path, n_frames: int) -> None:
    root = home / "mlvu"
    rows = []
    for video, task, answers in (("plot_1.mp4", "plotQA", "BD"), ("count_1.mp4", "count", "A")):
        tiny_video(root / video, n_frames)
        for k, answer in enumerate(answers):
            cands = ["red", "green", "blue", "yellow"]
            question = f"What colour is in {video} ({k})?\n" + "\n".join(f"({x}) {c}" for x, c in zip("ABCD", cands))
            rows.append(
                {
                    "video_name": video,
                    "duration": 3.0,
                    "question": question,
                    "candidates": cands,
                    "answer": answer,
                    "task_type": task,
                    "question_id": f"{task}_{k}",
                }
            )
    write_rows(rows, root / "mlvu" / "test-00000-of-00001.parquet")


def _egoschema(home: Path, n_frames: int) -> None:
    root = home / "egoschema"
    rows = []
    for vid, answer in (("ego-a", "2"), ("ego-b", "0")):
        tiny_video(root / "videos" / f"{vid}.mp4", n_frames)
        rows.append(
            {
                "question_idx": vid,
                "question": f"What does c do overall in {vid}?",
                "video_idx": vid,
                "option": [f"{x}. c does thing {i} in {vid}." for i, x in enumerate("ABCDE")],
                "answer": answer,
            }
        )
    write_rows(rows, root / "Subset" / "test-00000-of-00001.parquet")


def _longvideobench(home: Path, n_frames: int) -> None:
    root = home / "datasets" / "longvideobench"
    tiny_video(root / "videos" / "lvbA.mp4", n_frames)
    rows = []
    for k, (choice, n_options) in enumerate(((1, 4), (4, 5))):
        qid = f"lvbA_{k}"
        opts = {f"option{i}": (f"event {i} of {qid}" if i < n_options else "N/A") for i in range(5)}
        rows.append(
            {
                "video_id": "lvbA",
                "id": qid,
                "video_path": "lvbA.mp4",
                "subtitle_path": "lvbA_en.json",
                "correct_choice": choice,
                "question": f"In {qid}, what happens?",
                **opts,
                "duration": 3.0,
                "duration_group": 15,
                "question_category": "E2O",
                "topic_category": "NP-News-Programs",
            }
        )
    write_rows(rows, root / "lvb_val.json")


def build_hf_home(home: Path, n_frames: int = 12) -> Path:
    """All four families under ``home``, videos of ``n_frames`` frames at 4 fps; returns ``home`` (the HF_HOME)."""
    for build in (_videomme, _mlvu, _egoschema, _longvideobench):
        build(home, n_frames)
    return home


def our_config(home: Path, task: str) -> BenchmarkConfig:
    """Our benchmark config reading the same files as lmms-eval task ``task``."""
    name, folder = FAMILIES[task]
    return BenchmarkConfig(name=name, root=str(home / folder))
