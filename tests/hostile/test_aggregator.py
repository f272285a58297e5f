"""Hand-edited run files and odd inputs to the results aggregator: never a silently wrong table, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from infinipotv.data.rescore import SkippedInput, rescore
from infinipotv.results import load_runs
from infinipotv.results.__main__ import main as results_main
from infinipotv.results.collect import load_run, runs_frame
from infinipotv.results.example import memory_trace, run_config, write_run
from infinipotv.runs import CONFIG, METRICS

EXPERIMENT = """
experiment: tiny_study
table:
  name: main
  caption: {caption}
  stub: [Method]
  columns:
    - {{benchmark: videomme, score: Avg, label: Video-MME}}
    - {{benchmark: videomme, score: S, label: Short}}
  rows:
    by: [kv]
    stub: ["{{kv}}"]
    names:
      kv: {{fp16: "{label}"}}
  bold: {{}}
"""


def records(n: int = 12, right: int = 6) -> list[dict]:
    """``n`` Video-MME answers (short videos), the first ``right`` correct."""
    return [
        {
            "benchmark": "videomme",
            "question_id": f"q{i:02d}",
            "video_id": f"v{i // 3}",
            "categories": {"duration": "short", "domain": "Knowledge", "sub_category": "a", "task_type": "Counting"},
            "prompt": "",
            "options": {"A": "red", "B": "blue", "C": "green", "D": "grey"},
            "output": "A" if i < right else "B",
            "parsed": "A" if i < right else "B",
            "gold": "A",
            "correct": i < right,
            "error": None,
        }
        for i in range(n)
    ]


def make_run(root: Path, name: str = "fp16", kv: str = "fp16", recs: list[dict] | None = None, **config) -> Path:
    cfg = run_config("videomme", "tar_van_pool", kv, 6000, "tiny_study")
    for key, value in config.items():
        section, field = key.split("__")
        cfg[section][field] = value
    return write_run(root / name, cfg, recs or records(), memory_trace("tar_van_pool", kv, 6000))


def experiment(tmp_path: Path, caption: str = "Tiny study", label: str = "FP16") -> Path:
    path = tmp_path / "tiny_study.yaml"
    path.write_text(EXPERIMENT.format(caption=json.dumps(caption), label=label))
    return path


def report(tmp_path: Path, runs: Path, *args: str, capsys=None) -> tuple[int, str]:
    code = results_main([str(experiment(tmp_path)), "--runs", str(runs), "--out", str(tmp_path / "out"), *args])
    return code, capsys.readouterr().err if capsys else ""


def test_nan_correct_is_a_warning_not_a_right_answer(tmp_path: Path):
    """A prediction whose correct is NaN (or 1) is a warning and not scored, by the aggregator and rescore alike"""
    recs = records(4, right=0)
    recs[0]["correct"] = float("nan")  # json writes NaN
    recs[1]["correct"] = 1
    run_dir = make_run(tmp_path, recs=recs)
    (run_dir / METRICS).unlink()  # the aggregator scores the predictions itself
    with pytest.warns(SkippedInput, match=r"line 1: correct is NaN, not true or false; not scored"):
        run = load_run(run_dir)
    assert run.scores["overall"] == 0.0 and len(run.predictions) == 2
    assert not run.complete and "2 unreadable line(s)" in run.problems[0]
    with pytest.warns(SkippedInput, match="line 2: correct is 1"):
        scores, _ = rescore(run_dir)
    assert scores["overall"] == run.scores["overall"] and scores["n"] == 2


def test_environment_interpolations_stay_as_written(tmp_path: Path, monkeypatch):
    """${oc.env:...} in a hand-edited run config.yaml never reaches a table, CSV or JSON"""
    monkeypatch.setenv("A2_PROBE_SECRET", "hunter2")
    run_dir = make_run(tmp_path / "runs", model__checkpoint="${oc.env:A2_PROBE_SECRET}")
    config = (run_dir / CONFIG).read_text()
    config = config.replace("root: null", "root: ${oc.env:A2_PROBE_UNSET}")
    (run_dir / CONFIG).write_text(config.replace("parser: faithful", "parser: faithful\n  part: ${oc.env:HOME}"))
    (run_dir / METRICS).unlink()  # scored from the predictions: the benchmark block is typed and read
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedInput)
        (run,) = load_runs(tmp_path / "runs")
        frame = runs_frame([run]).to_csv()
    assert run.fields["model"] == "${oc.env:A2_PROBE_SECRET}" and "hunter2" not in frame
    assert run.config["benchmark"]["part"] == "${oc.env:HOME}"
    assert run.scores["overall"] == 50.0


def test_yaml_tags_in_a_run_config_skip_the_run(tmp_path: Path):
    """A run config.yaml with a !!python/object tag is skipped with a warning naming it (nothing constructed)"""
    run_dir = make_run(tmp_path / "runs")
    marker = tmp_path / "constructed"
    (run_dir / CONFIG).write_text(f"model: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.warns(SkippedInput, match=rf"{run_dir / CONFIG}: not a readable config \(ConstructorError"):
        assert load_runs(tmp_path / "runs") == []
    assert not marker.exists()


def test_yaml_tags_in_an_experiment_file_are_one_line(tmp_path: Path, capsys):
    """An experiment file with a !!python/object tag is one error line naming the file, exit 2"""
    make_run(tmp_path / "runs")
    path = tmp_path / "tagged.yaml"
    path.write_text("table: !!python/object/apply:os.system ['true']\n")
    code = results_main([str(path), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {path}: not a readable experiment file (")
    assert "could not determine a constructor" in err[0] and not (tmp_path / "out").exists()


def test_out_naming_a_file_is_one_line(tmp_path: Path, capsys):
    """--out naming a file is one error line, exit 2, and the file is left as it was"""
    make_run(tmp_path / "runs")
    (tmp_path / "out").write_text("mine")
    code, err = report(tmp_path, tmp_path / "runs", capsys=capsys)
    assert code == 2 and err.strip().splitlines() == [
        f"error: --out {tmp_path / 'out'} is a file, not a folder: name a folder (it is created if missing)"
    ]
    assert (tmp_path / "out").read_text() == "mine"


def test_the_run_chosen_among_several_is_in_the_table_with_the_rule(tmp_path: Path, capsys):
    """Several runs for one row: the table's own note names the run used, the rule, and how the others differ"""
    make_run(tmp_path / "runs", "a_seed0", recs=records(12, right=6))
    other = make_run(tmp_path / "runs", "b_seed1", recs=records(12, right=9))
    config = (other / CONFIG).read_text().replace("\nseed: 0", "\nseed: 1")
    (other / CONFIG).write_text(config)
    code, _ = report(tmp_path, tmp_path / "runs", capsys=capsys)
    assert code == 0
    for ext in ("md", "tex"):
        text = (tmp_path / "out" / f"main.{ext}").read_text()
        assert "Several runs fit a row: where several runs fit a row, it shows this experiment" in text
        assert "then the first by run directory" in text
    md = (tmp_path / "out" / "main.md").read_text()
    assert "2 runs match; using a_seed0 (not b_seed1: seed 1 vs 0)" in md
    assert "| 50.0 |" in md  # a_seed0's score: the first by run directory among equals


def test_a_score_missing_from_metrics_is_scored_from_the_predictions(tmp_path: Path, capsys):
    """A metrics.json without a score the table needs: scored from the predictions, with a note (never a silent –)"""
    run_dir = make_run(tmp_path / "runs")
    metrics = json.loads((run_dir / METRICS).read_text())
    del metrics["scores"]["Avg"]
    (run_dir / METRICS).write_text(json.dumps(metrics))
    code, err = report(tmp_path, tmp_path / "runs", capsys=capsys)
    assert code == 0
    assert "note: fp16: its metrics.json has no score Avg; scored from its 12 predictions" in err
    assert "| FP16 | 50.0 | 50.0 |" in (tmp_path / "out" / "main.md").read_text()


def test_a_pipe_in_a_row_label_is_escaped_in_markdown(tmp_path: Path, capsys):
    """A | in a markdown row label is escaped, so the row keeps its columns"""
    make_run(tmp_path / "runs")
    code = results_main(
        [str(experiment(tmp_path, label="A|B")), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    )
    assert code == 0
    row = next(line for line in (tmp_path / "out" / "main.md").read_text().splitlines() if "A\\|B" in line)
    assert row == "| A\\|B | 50.0 | 50.0 |"


@pytest.mark.parametrize(
    "caption, compiles",
    [("Précis: α-sweep, naïve Δ ≤ 3 — ok", True), ("Модель 模型", False)],
    ids=["accents-greek", "cyrillic-cjk"],
)
def test_non_latin_caption_compiles_or_is_one_line(tmp_path: Path, capsys, caption, compiles):
    """A caption with accents and Greek compiles under pdflatex; another script is one error line naming the table"""
    make_run(tmp_path / "runs")
    path = tmp_path / "tiny_study.yaml"
    path.write_text(EXPERIMENT.format(caption=json.dumps(caption), label="FP16"))
    code = results_main([str(path), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    if not compiles:
        assert code == 2 and len(err) == 1
        assert err[0].startswith("error: table 'main' as LaTeX: ") and "CYRILLIC CAPITAL LETTER EM" in err[0]
        return
    assert code == 0
    if shutil.which("pdflatex") is None:
        pytest.skip("no TeX engine installed")
    body = (tmp_path / "out" / "main.tex").read_text()
    document = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}" + body + "\\end{document}"
    (tmp_path / "t.tex").write_text(document)
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
