"""The toy-data command writes every benchmark's released layout, the dataset doctor reports what a run would score
as errors, and the toy data feeds a run.py-style job on the tiny model."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from infinipotv.config import as_run_config, register_configs
from infinipotv.data import check, toy
from infinipotv.job import read_predictions, run_job

CONF = Path(__file__).resolve().parents[2] / "conf"


def overrides_of(out: str) -> dict[str, list[str]]:
    """The toy command's printout: folder -> the run.py overrides that load it."""
    return {line.split()[0]: shlex.split(line.split(None, 1)[1]) for line in out.splitlines() if "benchmark=" in line}


def counts(out: str) -> dict[str, int]:
    """The doctor's table: row name -> count."""
    rows = (re.match(r"^(\S.*?|  \S.*?)\s{2,}(\d+)\b", line) for line in out.splitlines())
    return {m.group(1).strip(): int(m.group(2)) for m in rows if m}


@pytest.fixture(scope="session")
def toy_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    roots = {}
    for errors in (False, True):
        root = tmp_path_factory.mktemp("errors" if errors else "clean")
        toy.main([str(root)] + (["--with-errors"] if errors else []))
        roots["errors" if errors else "clean"] = root
    return roots


def test_toy_writes_every_layout_and_the_lmms_home(toy_dirs: dict[str, Path], capsys) -> None:
    root = toy_dirs["clean"]
    assert {p.name for p in root.iterdir()} == {*toy.BUILDERS, *toy.VARIANTS, "hf_home"}
    assert (root / "hf_home" / "datasets" / "longvideobench" / "lvb_val.json").is_file()
    assert (root / "mlvu_official" / "json" / "2_needle.json").is_file()
    assert (root / "egoschema_official" / "subset_answers.json").is_file()


def test_doctor_passes_every_clean_toy_set(toy_dirs: dict[str, Path], capsys) -> None:
    toy.main([str(toy_dirs["clean"] / "again")])
    printed = overrides_of(capsys.readouterr().out)
    assert set(printed) == {*toy.BUILDERS, *toy.VARIANTS}
    for folder, args in printed.items():
        assert check.main(args) == 0, folder
        out = capsys.readouterr().out
        table = counts(out)
        assert "every question can be answered" in out and table["videos missing"] == 0, folder
        assert table["questions"] == table["scorable"] >= 2 and table["videos found"] >= 1


def test_doctor_reports_missing_videos_and_bad_rows_by_cause(toy_dirs: dict[str, Path], capsys) -> None:
    root = toy_dirs["errors"] / "streamingbench"
    assert check.main(["benchmark=streamingbench", f"benchmark.root={root}"]) == 1
    out = capsys.readouterr().out
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert (
        "sample_2_real" in lines["videos missing"] and "conf/benchmark/streamingbench.yaml" in lines["videos missing"]
    )
    cause = lines["bad rows: time stamp … is not H:MM:SS"]
    assert "sample_2_real_2" in cause and "H:MM:SS in the annotation row" in cause
    assert "2 of 5 questions would be scored as errors" in out


def test_doctor_opens_videos_with_pyav(tmp_path: Path, capsys) -> None:
    cfg = toy.BUILDERS["longvideobench"](tmp_path, errors=False)
    (tmp_path / "videos" / "lvbA.mp4").write_bytes(b"not a video")
    assert check.main(["benchmark=longvideobench", f"benchmark.root={cfg.root}"]) == 1
    out = capsys.readouterr().out
    assert counts(out)["videos unreadable"] == 1 and "lvbA: " in out and "ffmpeg -i IN" in out


def test_doctor_says_in_one_line_why_nothing_loads(tmp_path: Path, capsys) -> None:
    assert check.main(["benchmark=mlvu", f"benchmark.root={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert check.main(["benchmark=nosuch"]) == 2


def test_the_doctor_follows_the_runs_subset(toy_dirs: dict[str, Path], capsys) -> None:
    root = toy_dirs["errors"] / "videomme"
    assert check.main(["benchmark=videomme", f"benchmark.root={root}", "benchmark.limit=2"]) == 0
    assert counts(capsys.readouterr().out)["questions"] == 2


@pytest.mark.parametrize("folder", ["videomme", "streamingbench"])
def test_toy_data_feeds_a_run_py_job(folder: str, toy_dirs: dict[str, Path], tmp_path: Path) -> None:
    register_configs()
    args = [
        f"benchmark={'streamingbench' if folder.startswith('streaming') else folder}",
        f"benchmark.root={toy_dirs['clean'] / folder}",
        "model=tiny_qwen2vl",
        "eval.chunk_frames=2",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = as_run_config(compose(config_name="config", overrides=args))
    metrics = run_job(cfg, tmp_path / "run")
    records = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert metrics["complete"] and metrics["n_errors"] == 0 and len(records) == metrics["n_questions"] >= 2
    assert all(isinstance(r["output"], str) and r["prompt"] for r in records)
