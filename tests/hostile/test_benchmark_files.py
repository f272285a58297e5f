"""Annotation files and videos as the real releases shape them, and as a careless or hostile hand leaves them:
MLVU's official answer is a candidate's text (never a letter), LongVideoBench's ``correct_choice`` is an index (never
``true``) and its options are never empty, a file of no rows is no benchmark, and a video path that is a FIFO is never
opened. The loader, the run and the dataset doctor say the same thing, in one line each."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infinipotv.config import BenchmarkConfig
from infinipotv.data.loading import DataError, benchmark_class, read_records
from infinipotv.data.toy_sets import build_longvideobench, build_mlvu, build_videomme
from tests.helpers import lines, run_py
from tests.hostile.test_null_rows import doctor, edit_rows, outcome

#: Official plotQA rows whose candidates are letters (the answer names the candidate whose TEXT it is) and one whose
#: answer is a letter where the official files give a candidate's text.
LETTER_TEXTS: list[dict[str, Any]] = [
    {
        "video": "plot_1.mp4",
        "duration": 3.0,
        "question": "Which door does the main character open: the one marked A, B, C or D?",
        "candidates": ["B", "A", "D", "C"],
        "answer": "A",
        "question_type": "plotQA",
    },
    {
        "video": "plot_1.mp4",
        "duration": 3.0,
        "question": "What colour is the main character's hat?",
        "candidates": ["Red", "Blue", "Green", "Yellow"],
        "answer": "A",
        "question_type": "plotQA",
    },
]


def _official_mlvu(tmp_path: Path) -> BenchmarkConfig:
    cfg = build_mlvu(tmp_path / "mlvu", fmt="official", errors=False)
    path = Path(cfg.annotations) / "1_plotQA.json"
    path.write_text(json.dumps([*json.loads(path.read_text()), *LETTER_TEXTS], indent=1))
    return cfg


def test_mlvus_official_answer_is_a_candidates_text_never_a_letter(tmp_path: Path, capsys):
    """MLVU official: answer "A" among candidates [B, A, D, C] keys option B; a letter no candidate is, a bad row"""
    cfg = _official_mlvu(tmp_path)
    questions = {q.qid: (q, s.error) for s in benchmark_class("mlvu")(cfg).samples() for q in s.questions}
    letters, by_letter = questions["plotQA_2"], questions["plotQA_3"]
    assert letters[1] is None and letters[0].gold == "B" and letters[0].options["B"] == "A"
    assert by_letter[1].endswith(
        "(plotQA_3): answer 'A' is not a candidate (the official files give the answer as a candidate's text)"
    )
    assert questions["plotQA_0"][0].gold == "B" and questions["plotQA_1"][0].gold == "C"  # "Red"; the last "A cup"
    code, out = doctor(cfg, capsys)
    assert code == 1 and "1 of 6 questions would be scored as errors" in out
    assert "bad rows: answer … is not a candidate" in out and "the official answer is a candidate's text" in out


def test_the_hub_mlvu_answer_stays_a_letter(tmp_path: Path):
    """MLVU Hub parquet (answer a letter): the same questions keep the same gold letters"""
    cfg = build_mlvu(tmp_path / "mlvu", fmt="json", errors=False)
    gold = {q.qid: q.gold for s in benchmark_class("mlvu")(cfg).samples() for q in s.questions}
    assert gold == {"plotQA_0": "B", "plotQA_1": "C", "needle_0": "D", "count_0": "B"}


@pytest.mark.parametrize(
    "value, said",
    [
        (True, "correct_choice True must be an option index 0-3"),
        ("1.5", "correct_choice '1.5' must be an option index 0-3"),
    ],
    ids=["true", "1.5"],
)
def test_a_longvideobench_choice_that_is_no_index_is_a_bad_row(tmp_path: Path, capsys, value: Any, said: str):
    """LongVideoBench correct_choice: true (or "1.5") is a bad row, as EgoSchema refuses it, in loader and doctor"""
    cfg = build_longvideobench(tmp_path / "lvb", errors=False)
    edit_rows(Path(cfg.annotations), lambda rows: rows[0].update(correct_choice=value))
    found = outcome(cfg)
    assert found["lvbA_0"] is not None and found["lvbA_0"].endswith(said) and found["lvbA_1"] is None
    code, out = doctor(cfg, capsys)
    assert code == 1 and "1 of 2 questions would be scored as errors" in out


def test_an_empty_longvideobench_option_is_a_bad_row_never_a_bare_letter(tmp_path: Path, capsys):
    """LongVideoBench option1: "" is a bad row (never shown as "B. "), in the loader and the doctor"""
    cfg = build_longvideobench(tmp_path / "lvb", errors=False)
    edit_rows(Path(cfg.annotations), lambda rows: rows[0].update(option1="  "))
    found = outcome(cfg)
    assert found["lvbA_0"].endswith("(lvbA_0): option1 is empty") and found["lvbA_1"] is None
    code, out = doctor(cfg, capsys)
    assert code == 1 and "bad rows: option1 is empty" in out


@pytest.mark.parametrize("suffix", ["json", "jsonl", "csv"])
def test_an_annotation_file_of_no_rows_is_one_line(tmp_path: Path, suffix: str):
    """An annotation file holding [] (no rows) is one line naming it, never a run of 0 questions that exits 0"""
    path = tmp_path / f"rows.{suffix}"
    path.write_text({"json": "[]\n", "jsonl": "\n", "csv": "video_id,id\n"}[suffix])
    with pytest.raises(DataError, match=rf"^{path} holds no annotation rows \(an empty list\): re-download"):
        read_records(path)


def run_videomme(cfg: BenchmarkConfig, run_dir: Path) -> subprocess.CompletedProcess[str]:
    """run.py: the tiny Qwen2-VL, compressed, on the toy Video-MME ``cfg`` into ``run_dir``."""
    return run_py(
        "model=tiny_qwen2vl",
        "compress=tar_van_pool",
        "compress.budget=96",
        "eval.chunk_frames=2",
        "benchmark=videomme",
        f"benchmark.root={cfg.root}",
        f"benchmark.annotations={cfg.annotations}",
        f"run_dir={run_dir}",
        "threads=1",
        timeout=300,
    )


def test_run_py_on_an_annotation_file_of_no_rows_is_one_line(tmp_path: Path):
    """run.py on a Video-MME file holding []: exit 2 with one line naming the file, no run left behind"""
    cfg = build_videomme(tmp_path / "data", fmt="json", errors=False)
    Path(cfg.annotations).write_text("[]")
    run_dir = tmp_path / "run"
    done = run_videomme(cfg, run_dir)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {cfg.annotations} holds no annotation rows (an empty list): re-download the released file"
    )
    assert not (run_dir / "predictions.jsonl").exists()


def test_a_video_that_is_a_fifo_is_never_opened(tmp_path: Path, capsys):
    """A video path that is a FIFO: its questions' error records and the doctor say so in one line; nothing blocks"""
    cfg = build_videomme(tmp_path / "data", fmt="json", errors=False)
    video = Path(cfg.root) / "data" / "vmmeA.mp4"
    video.unlink()
    os.mkfifo(video)
    said = (
        f"video {video} is a FIFO (named pipe), not a regular file: only regular files are decoded; put the video "
        "file itself there"
    )
    code, out = doctor(cfg, capsys)
    assert code == 1 and f"vmmeA: {said}" in out and re.search(r"\nvideos missing +0\n", out), out
    run_dir = tmp_path / "run"
    done = run_videomme(cfg, run_dir)
    assert done.returncode == 1, done.stderr[-2000:]  # every question failed: no result, as documented
    assert [r["error"] for r in lines(run_dir / "predictions.jsonl")] == [f"VideoError: {said}"] * 2


def test_the_official_rows_keep_the_releases_shape(tmp_path: Path):
    """The letter-text fixture rows have the official per-task file's keys, as the toy set's own rows do"""
    cfg = _official_mlvu(tmp_path)
    rows = read_records(Path(cfg.annotations) / "1_plotQA.json")
    assert {frozenset(r) for r in rows} == {frozenset(LETTER_TEXTS[0])}
