"""The aggregator and rescore on inputs that would change the numbers silently: answers to questions the run never
had, typos in a table spec, impossible metrics, one config run by two versions of the code, a config.yaml cut short,
and a report that fails halfway. Each is one clear line, and nothing already written is lost."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from infinipotv.data.rescore import SkippedInput, rescore
from infinipotv.job import run_job
from infinipotv.results import load_runs
from infinipotv.results.__main__ import main as results_main
from infinipotv.results.collect import load_run
from infinipotv.runs import CONFIG, METRICS, PREDICTIONS, PROVENANCE
from tests.hostile.run_helpers import toy_config
from tests.hostile.test_aggregator import make_run, records

TABLE = """
experiment: tiny_study
table:
  name: main
  caption: {caption}
  stub: [Method]
  columns:
    - {{benchmark: {benchmark}, score: Avg, label: Video-MME}}
    - {{benchmark: videomme, score: S, label: Short}}
    - {{benchmark: videomme, metric: memory.peak_cache_bytes, label: Bytes, better: lower}}
  rows:
    by: [{by}, kv]
    stub: ["{{policy}} {{kv}}"]
  bold: {{}}
"""
FILES = ("main.md", "main.tex", "main.csv", "main.json")


def experiment(tmp_path: Path, by: str = "policy", benchmark: str = "videomme", caption: str = "Tiny") -> Path:
    path = tmp_path / "tiny_study.yaml"
    path.write_text(TABLE.format(by=by, benchmark=benchmark, caption=json.dumps(caption)))
    return path


def report(tmp_path: Path, *args: str, out: Path | None = None, capsys=None, **spec) -> tuple[int, list[str]]:
    """The results CLI on ``tmp_path/runs`` into ``out`` (``tmp_path/out``): its exit code and stderr lines."""
    out = out or tmp_path / "out"
    argv = [str(experiment(tmp_path, **spec)), "--runs", str(tmp_path / "runs"), "--out", str(out), *args]
    code = results_main(argv)
    return code, capsys.readouterr().err.strip().splitlines() if capsys else []


def _errors(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("error: ")]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of the tiny model on the toy Video-MME (its data beside it)."""
    root = tmp_path_factory.mktemp("finished")
    run_job(toy_config(root / "data"), root / "run")
    return root / "run"


def _with_foreign_answer(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run with one more answer, right, to a question the run was never asked."""
    run_dir = Path(shutil.copytree(finished, tmp_path / "run"))
    record = json.loads((run_dir / PREDICTIONS).read_text().splitlines()[0])
    gold = record["gold"]
    record.update(question_id="not_this_runs", output=gold, parsed=gold, correct=True, error=None)
    with (run_dir / PREDICTIONS).open("a") as f:
        f.write(json.dumps(record) + "\n")
    return run_dir


def test_rescore_leaves_out_answers_to_questions_the_run_never_had(finished, tmp_path):
    """rescore: an answer to a question the run never had is left out, with one warning naming the file and count"""
    expected, _ = rescore(finished)
    run_dir = _with_foreign_answer(finished, tmp_path)
    with pytest.warns(SkippedInput) as caught:
        scores, text = rescore(run_dir)
    foreign = [str(w.message) for w in caught if "not this run's" in str(w.message)]
    assert foreign == [
        f"{run_dir / PREDICTIONS}: 1 answer(s) to questions that are not this run's ('not_this_runs'); not counted"
    ]
    assert scores == expected and scores["n"] == len(json.loads((run_dir / METRICS).read_text())["question_ids"])
    assert "1 answers to questions that are not this run's left out" in text


def test_the_aggregator_without_metrics_leaves_out_foreign_answers(finished, tmp_path):
    """Aggregator, no metrics.json: answers to questions the run never had are left out (its benchmark's selection)"""
    expected = load_run(finished).scores
    run_dir = _with_foreign_answer(finished, tmp_path)
    (run_dir / METRICS).unlink()
    with pytest.warns(SkippedInput, match=r"1 answer\(s\) to questions that are not this run's"):
        run = load_run(run_dir)
    assert run.scores == expected and len(run.predictions) == expected["n"]
    assert "1 answer(s) to questions the run did not ask in predictions.jsonl" in run.problems


def _two_policies(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "tar", recs=records(12, right=6))
    make_run(tmp_path / "runs", "full", recs=records(12, right=9), compress__name="full")


def test_a_misspelt_row_key_is_one_error_line(tmp_path, capsys):
    """A misspelt key in rows.by is one error line naming it and the known keys; nothing is written"""
    _two_policies(tmp_path)
    code, err = report(tmp_path, capsys=capsys, by="polcy")
    assert code == 2 and len(_errors(err)) == 1, err
    assert _errors(err)[0].startswith(
        "error: table 'main'.rows.by: unknown key 'polcy' (did you mean 'policy'?); known: model, policy, kv"
    )
    assert "compress.budget" in err[-1] and not (tmp_path / "out").exists()
    code, _ = report(tmp_path, capsys=capsys)
    assert code == 0 and "| full fp16 | **75.0** |" in (tmp_path / "out" / "main.md").read_text()


def test_a_misspelt_benchmark_is_one_error_line(tmp_path, capsys):
    """A column naming an unknown benchmark is one error line listing the known ones, not a column of –"""
    _two_policies(tmp_path)
    code, err = report(tmp_path, capsys=capsys, benchmark="symbolicc")
    assert code == 2 and len(_errors(err)) == 1, err
    assert "table 'main'.columns[0]: unknown benchmark 'symbolicc' (did you mean 'symbolic'?); known: " in err[-1]
    assert not (tmp_path / "out").exists()


def test_a_benchmark_without_runs_is_a_note(tmp_path, capsys):
    """A column of a known benchmark that no run has is a note, never a silently empty column"""
    _two_policies(tmp_path)
    code, err = report(tmp_path, capsys=capsys, benchmark="mlvu")
    assert code == 0
    assert "note: table 'main'.columns[0]: no run of benchmark 'mlvu'; the column's run cells are –" in err


def test_a_filter_value_without_runs_is_a_note(tmp_path, capsys):
    """A where value no run has is a note naming the values the runs do have"""
    _two_policies(tmp_path)
    path = experiment(tmp_path)
    where = "    where: {policy: [tar_van_pool, tarvan]}"
    path.write_text(path.read_text().replace("    by: [policy, kv]", f"    by: [policy, kv]\n{where}"))
    code = results_main([str(path), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0
    assert (
        'note: table \'main\'.rows.where: policy="tarvan" matches no run (the runs have "full", "tar_van_pool")' in err
    )


def test_a_failed_build_with_force_leaves_the_old_report_whole(tmp_path, capsys):
    """--force over a report, and the build fails (LaTeX): all four old files stay as they were, nothing left behind"""
    _two_policies(tmp_path)
    assert report(tmp_path, capsys=capsys)[0] == 0
    before = {name: (tmp_path / "out" / name).read_bytes() for name in FILES}
    figures = sorted(p.name for p in (tmp_path / "out" / "figures").iterdir())
    code, err = report(tmp_path, "--force", capsys=capsys, caption="Модель")
    assert code == 2 and _errors(err)[0].startswith("error: table 'main' as LaTeX: ")
    assert {name: (tmp_path / "out" / name).read_bytes() for name in FILES} == before
    assert sorted(p.name for p in (tmp_path / "out" / "figures").iterdir()) == figures
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "runs", "tiny_study.yaml"]
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_bad_baseline_writes_nothing(tmp_path, capsys):
    """A --baseline no row has: one error line, and a fresh output folder is never created"""
    _two_policies(tmp_path)
    code, err = report(tmp_path, "--baseline", "nosuchrow", capsys=capsys)
    assert code == 2 and _errors(err) == ["error: --baseline 'nosuchrow' matches no run row of any table of tiny_study"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "tiny_study.yaml"]


def test_force_replaces_the_report_whole(tmp_path, capsys):
    """--force that succeeds replaces every file of the report, figures included, and keeps the folder's others"""
    _two_policies(tmp_path)
    assert report(tmp_path, capsys=capsys)[0] == 0
    (tmp_path / "out" / "README").write_text("mine")
    (tmp_path / "out" / "figures" / "stale.png").write_bytes(b"old")
    assert report(tmp_path, "--force", capsys=capsys, caption="Second")[0] == 0
    assert (
        "Second" in (tmp_path / "out" / "main.md").read_text()
        and "Second" in (tmp_path / "out" / "main.tex").read_text()
    )
    assert (tmp_path / "out" / "README").read_text() == "mine"
    assert not (tmp_path / "out" / "figures" / "stale.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "runs", "tiny_study.yaml"]
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def _set_metrics(run_dir: Path, edit) -> None:
    metrics = json.loads((run_dir / METRICS).read_text())
    edit(metrics)
    (run_dir / METRICS).write_text(json.dumps(metrics))


@pytest.mark.parametrize(
    "value", [175.0, float("nan"), -3.0, "50.0", True], ids=["175", "nan", "negative", "text", "bool"]
)
def test_an_impossible_score_is_scored_from_the_predictions(tmp_path, capsys, value):
    """A score no accuracy can be (175, NaN, -3, text) in metrics.json: one warning, and scored from the predictions"""
    run_dir = make_run(tmp_path / "runs", "tar", recs=records(12, right=6))
    _set_metrics(run_dir, lambda m: m["scores"].update(Avg=value))
    code, err = report(tmp_path, capsys=capsys)
    assert code == 0
    shown = json.dumps(value)
    assert (
        f"warning: {run_dir / METRICS}: Avg is {shown}: not a score in [0, 100]; scored from the run's "
        "predictions instead" in err
    )
    assert "| tar_van_pool fp16 | 50.0 | 50.0 |" in (tmp_path / "out" / "main.md").read_text()


@pytest.mark.parametrize("value", [-5, float("nan")], ids=["negative", "nan"])
def test_an_impossible_measurement_is_a_note_not_a_number(tmp_path, capsys, value):
    """A negative or NaN byte count in metrics.json is a note naming it, and never shown as a number"""
    run_dir = make_run(tmp_path / "runs", "tar", recs=records(12, right=6))
    _set_metrics(run_dir, lambda m: m["memory"].update(peak_cache_bytes=value))
    code, err = report(tmp_path, capsys=capsys)
    assert code == 0
    assert (
        f"note: tar: memory.peak_cache_bytes in its metrics.json is {value}, which no measurement can be; "
        "not shown" in err
    )
    assert "| tar_van_pool fp16 | 50.0 | 50.0 | – |" in (tmp_path / "out" / "main.md").read_text()


def _one_config_two_codes(tmp_path: Path) -> None:
    for name, sha, version, end in (("a", "1111111", "4.45.2", "01:00"), ("b", "2222222", "4.46.0", "02:00")):
        run_dir = make_run(tmp_path / "runs", name, recs=records(12, right=6 if name == "a" else 9))
        provenance = json.loads((run_dir / PROVENANCE).read_text())
        provenance.update(git_sha=sha, packages={"torch": "2.5.1", "transformers": version}, end=f"2026-01-01T{end}")
        (run_dir / PROVENANCE).write_text(json.dumps(provenance))


def test_one_config_at_two_commits_is_refused_unless_allowed(tmp_path, capsys):
    """Two runs of one config at different commits and versions: refused, naming both; --allow-mixed notes them"""
    _one_config_two_codes(tmp_path)
    code, err = report(tmp_path, capsys=capsys)
    assert code == 2 and len(_errors(err)) == 1 and not (tmp_path / "out").exists()
    assert _errors(err)[0].startswith(
        "error: runs a and b are one config run by different code (git_sha 2222222 vs 1111111, transformers 4.46.0 "
        "vs 4.45.2): rerun one at the other's code, move one out of the runs folder, or pass --allow-mixed"
    )
    code, err = report(tmp_path, "--allow-mixed", capsys=capsys)
    assert code == 0
    md = (tmp_path / "out" / "main.md").read_text()
    assert (
        "using b (not a: same config run by other code (git_sha 1111111 vs 2222222, transformers 4.45.2 vs 4.46.0))"
        in md
    )


def test_one_config_rerun_at_one_commit_is_not_mixed(tmp_path, capsys):
    """Two runs of one config by the same code are no mix: the usual choice, no error"""
    _one_config_two_codes(tmp_path)
    provenance = json.loads((tmp_path / "runs" / "a" / PROVENANCE).read_text())
    (tmp_path / "runs" / "b" / PROVENANCE).write_text(json.dumps({**provenance, "end": "2026-01-01T02:00"}))
    assert report(tmp_path, capsys=capsys)[0] == 0


CUT = {
    "empty": lambda text: "",
    "blank lines": lambda text: "\n\n",
    "a comment": lambda text: "# nothing\n",
    "no benchmark section": lambda text: text.split("benchmark:")[0],
    "cut in the model": lambda text: text[: text.index("compress:") - 20],
    "benchmark without a name": lambda text: text.replace("  name: videomme\n", ""),
    "benchmark a list": lambda text: text.split("benchmark:")[0] + "benchmark: [videomme]\n",
    "benchmark with a bad type": lambda text: text.replace("  limit: null", "  limit: many"),
}


@pytest.mark.parametrize("cut", CUT, ids=list(CUT))
def test_a_cut_config_skips_its_run_with_a_warning(tmp_path, capsys, cut):
    """A run whose config.yaml is empty, cut short or has no benchmark is skipped with a warning naming the file"""
    make_run(tmp_path / "runs", "good")
    bad = make_run(tmp_path / "runs", "bad", recs=records(12, right=9))
    (bad / CONFIG).write_text(CUT[cut]((bad / CONFIG).read_text()))
    with pytest.warns(SkippedInput, match=rf"^{bad / CONFIG}: .*; run directory skipped$"):
        assert [r.id for r in load_runs(tmp_path / "runs")] == ["good"]
    code, err = report(tmp_path, capsys=capsys)
    assert code == 0 and any(line.startswith(f"warning: {bad / CONFIG}: ") for line in err)


def test_every_prefix_of_a_config_reads_or_is_skipped(tmp_path):
    """Every line prefix of a run's config.yaml either reads as a run or skips it with a warning: never a traceback"""
    run_dir = make_run(tmp_path / "runs", "cut")
    text = (run_dir / CONFIG).read_text()
    lines = text.splitlines(keepends=True)
    for n in range(len(lines) + 1):
        (run_dir / CONFIG).write_text("".join(lines[:n]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SkippedInput)
            runs = load_runs(tmp_path / "runs")
        skipped = [w for w in caught if str(w.message).startswith(f"{run_dir / CONFIG}: ")]
        assert len(runs) + len(skipped) == 1, (n, runs, [str(w.message) for w in caught])
