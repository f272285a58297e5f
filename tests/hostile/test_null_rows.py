"""Null cells in annotation rows: a null option or question id makes its row bad, in the loader and the doctor alike,
never an option list compacted under its answer key nor the text "None"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from infinipotv.config import BenchmarkConfig
from infinipotv.data import check
from infinipotv.data.loading import benchmark_class
from infinipotv.data.toy_sets import build_egoschema, build_longvideobench, build_mlvu, build_videomme
from infinipotv.data.toy_streaming import build_streamingbench


def edit_rows(path: Path, edit: Callable[[list[Any]], None]) -> None:
    rows = json.loads(path.read_text())
    edit(rows)
    path.write_text(json.dumps(rows))


def outcome(cfg: BenchmarkConfig) -> dict[str, str | None]:
    """Question id -> the error of its sample (None: it would be answered and scored)."""
    return {q.qid: s.error for s in benchmark_class(cfg.name)(cfg).samples() for q in s.questions}


def doctor(cfg: BenchmarkConfig, capsys) -> tuple[int, str]:
    args = [f"benchmark={cfg.name}", f"benchmark.root={cfg.root}", f"benchmark.annotations={cfg.annotations}"]
    code = check.main([*args, "--open", "0"])
    return code, capsys.readouterr().out


def test_a_null_longvideobench_option_is_a_bad_row_not_a_shifted_answer_key(tmp_path: Path, capsys):
    """A LongVideoBench option1: null is a bad row in the loader and the doctor, not 3 options under another gold"""
    cfg = build_longvideobench(tmp_path / "lvb", errors=False)
    edit_rows(Path(cfg.annotations), lambda rows: rows[0].update(option1=None))  # lvbA_0: correct_choice 1
    found = outcome(cfg)
    assert found["lvbA_0"] is not None and found["lvbA_0"].endswith("(lvbA_0): option1 is null")
    assert found["lvbA_1"] is None
    code, out = doctor(cfg, capsys)
    assert code == 1
    assert "bad rows: option1 is null" in out and "1 of 2 questions would be scored as errors" in out


def test_a_used_longvideobench_option_after_an_unused_one_is_a_bad_row(tmp_path: Path):
    """A LongVideoBench option used after an "N/A" one is a bad row (dropping the N/A would shift the letters)"""
    cfg = build_longvideobench(tmp_path / "lvb", errors=False)
    edit_rows(Path(cfg.annotations), lambda rows: rows[0].update(option2="N/A", option4="late"))
    shift = 'option2 is "N/A" but a later option is used: the letters after it would shift'
    assert outcome(cfg)["lvbA_0"].endswith(shift)


def test_a_null_in_a_longvideobench_candidates_list_is_a_bad_row(tmp_path: Path):
    """A null in LongVideoBench's candidates list is a bad row naming its place"""
    cfg = build_longvideobench(tmp_path / "lvb", errors=False)

    def candidates(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            row["candidates"] = [row.pop(f"option{i}") for i in range(5) if row[f"option{i}"] != "N/A"]
        rows[0]["candidates"][1] = None

    edit_rows(Path(cfg.annotations), candidates)
    found = outcome(cfg)
    assert found["lvbA_0"].endswith("candidates[1] is null") and found["lvbA_1"] is None


def _null_option(rows: list[dict[str, Any]], field: str) -> str:
    rows[0][field][1] = None
    return rows[0]


CASES = {  # benchmark: (build the toy set, null the second option of the first question; that question's id)
    "videomme": (build_videomme, "json", lambda rows: _null_option(rows, "options")["question_id"]),
    "mlvu": (build_mlvu, "json", lambda rows: _null_option(rows, "candidates")["question_id"]),
    "egoschema": (build_egoschema, "json", lambda rows: _null_option(rows, "option")["question_idx"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_null_option_is_a_bad_row_in_every_hub_format(tmp_path: Path, name: str):
    """A null option is a bad row in Video-MME, MLVU and EgoSchema (Hub rows)"""
    build, fmt, edit = CASES[name]
    cfg = build(tmp_path / name, fmt=fmt, errors=False)
    qid = []
    edit_rows(Path(cfg.annotations), lambda rows: qid.append(edit(rows)))
    assert outcome(cfg)[qid[0]].endswith("option B is null")


def test_a_null_option_is_a_bad_row_in_the_official_mlvu_and_egoschema_files(tmp_path: Path):
    """A null option is a bad row in MLVU's per-task JSONs and EgoSchema's questions.json"""
    mlvu = build_mlvu(tmp_path / "mlvu", fmt="official", errors=False)
    task_file = sorted((tmp_path / "mlvu" / "json").glob("*.json"))[0]
    edit_rows(task_file, lambda rows: rows[0]["candidates"].__setitem__(1, None))
    bad = [error for error in outcome(mlvu).values() if error]
    assert len(bad) == 1 and bad[0].endswith("option B is null")
    ego = build_egoschema(tmp_path / "ego", fmt="official", errors=False)
    edit_rows(Path(ego.annotations), lambda rows: rows[0].update({"option 1": None}))
    found = outcome(ego)
    assert found["0a1b2c3d-ego-a"].endswith("option B is null") and found["4e5f6a7b-ego-b"] is None


def test_a_null_streamingbench_option_is_a_bad_row(tmp_path: Path):
    """A null StreamingBench option is a bad row: in a bare-text list (sqa) and in a labelled one (real-time)"""
    bare = build_streamingbench(tmp_path / "sqa", errors=False, part="contextual")
    edit_rows(Path(bare.annotations), lambda videos: videos[0][0]["questions"][0]["options"].__setitem__(1, None))
    bad = [error for error in outcome(bare).values() if error]
    assert len(bad) == 1 and bad[0].endswith("option B is null")
    labelled = build_streamingbench(tmp_path / "real", errors=False)
    edit_rows(Path(labelled.annotations), lambda entries: entries[0]["questions"][0]["options"].__setitem__(1, None))
    bad = [error for error in outcome(labelled).values() if error]
    assert len(bad) == 1 and bad[0].endswith("option 'C. thing 2.' is labelled C at position B")


def symbolic_set(tmp_path: Path) -> BenchmarkConfig:
    """A one-video symbolic set written by its generator, then read from its annotations.json."""
    cfg = BenchmarkConfig(name="symbolic", root=str(tmp_path), options={"n_videos": 1, "frames": 48})
    bench = benchmark_class("symbolic")(cfg)
    bench.load()
    return BenchmarkConfig(name="symbolic", root=str(tmp_path), annotations=str(bench.annotations), options=cfg.options)


def test_null_question_ids_are_bad_rows_not_the_text_none(tmp_path: Path, capsys):
    """Two null question ids are two bad rows (not "None" answered, then a duplicate), in the loader and the doctor"""
    cfg = symbolic_set(tmp_path)
    path = Path(cfg.annotations)
    rows = json.loads(path.read_text())
    n = len(rows)
    rows[0]["question_id"] = rows[1]["question_id"] = None
    path.write_text(json.dumps(rows))
    found = outcome(cfg)
    assert "None" not in found and len(found) == n
    bad = {qid: error for qid, error in found.items() if error}
    assert sorted(bad) == ["symbolic-row0", "symbolic-row1"]
    assert all(error.endswith("question_id is empty") for error in bad.values())
    code, out = doctor(cfg, capsys)
    assert code == 1 and "bad rows: question_id is empty" in out and "duplicate" not in out
    assert f"2 of {n} questions would be scored as errors" in out
