"""What a study's tables need beyond one run per row (issues 55 and 56): a column that draws on the row's run of one
setting, paired within that setting; Kendall's tau of each setting's ranking against the default's; the marks of a
row held over its budget's bytes or never evicting (and off the Pareto front); the default runs folder, which is the
study's own and the studies its tables name, so a reader's other runs change nothing; a run recorded before a
benchmark option existed read at the option's default."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from infinipotv.data.mlvu import TASKS as MLVU_TASKS
from infinipotv.results.collect import _with_option_defaults, load_runs
from infinipotv.results.example import _records, memory_trace, run_config, write_run
from infinipotv.results.figures import pareto_front
from infinipotv.results.report import build_report
from infinipotv.results.spec import SpecError
from infinipotv.results.stats import kendall_tau_b

N = dict.fromkeys(MLVU_TASKS, 20)  # 140 questions a run

# the accuracy of each (policy, setting): the setting b reverses the order of rekv and swa
ACCURACY = {
    ("tar_van_pool", "a"): 0.5,
    ("rekv", "a"): 0.8,
    ("swa", "a"): 0.3,
    ("tar_van_pool", "b"): 0.5,
    ("rekv", "b"): 0.3,
    ("swa", "b"): 0.8,
}

EXPERIMENT = """
experiment: robust
table:
  figures: [{kind: table, table: robust}]
  tables:
    - name: robust
      stub: [Method]
      columns:
        - {benchmark: mlvu, score: micro, label: A, paired: true, where: {benchmark.options.setting: a}}
        - {benchmark: mlvu, score: micro, label: B, paired: true,
           where: {experiment: robust, benchmark.options.setting: b}}
      rows: {by: [policy], stub: ["{policy}"], where: {experiment: [robust, base]}}
      baseline: tar_van_pool
      tau: A
"""


def _write(root: Path, folder: str, experiment: str, policy: str, setting: str, seed: int, kv: str = "fp16") -> None:
    config = run_config("mlvu", policy, kv, 6000, experiment)
    config["benchmark"]["options"] = {"setting": setting} if kv == "fp16" else {"setting": "a"}  # INT4: a's questions
    correct = {task: round(n * ACCURACY[(policy, setting)]) for task, n in N.items()}
    records = _records("mlvu", {t: (N[t], correct[t]) for t in N}, lambda task, i: {"task_type": task}, seed)
    write_run(root / folder / f"{policy}_{setting}_{kv}", config, records, memory_trace(policy, kv, 6000))


@pytest.fixture
def study(tmp_path: Path) -> Iterator[Path]:
    """A study `robust` (setting b) whose default column is another study's runs (`base`, setting a), in
    results/runs/ of a fresh working folder."""
    runs = tmp_path / "results" / "runs"
    for seed, policy in enumerate(("tar_van_pool", "rekv", "swa")):
        _write(runs, "base", "base", policy, "a", seed)
        _write(runs, "robust", "robust", policy, "b", seed + 10)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "robust.yaml").write_text(EXPERIMENT)
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(cwd)


def test_columns_draw_on_each_settings_run_paired_within_it_with_tau(study: Path) -> None:
    report = build_report("robust", out_dir="out")
    text = (study / "out" / "robust.md").read_text()
    assert "| rekv | **80.0** | 140 | +30.0 [+20.0, +40.0] | 30.0 | 140 | -20.0 [" in text
    assert "| swa | 30.0 | 140 | -20.0 [-31.4, -8.6] | **80.0** | 140 | +30.0 [" in text
    assert "| Kendall's τ vs A |  |  |  | -1.00 (3) |  |  |" in text
    frame = pd.read_csv(study / "out" / "robust.csv")
    assert frame.loc[frame["row"] == "kendall_tau", "value"].tolist() == [-1.0]
    assert (study / "out" / "figures" / "table_robust.png").is_file()
    assert report.n_runs == 6


def test_a_versus_column_pairs_each_row_with_its_own_other_column(tmp_path: Path) -> None:
    """The INT4 field: each method's INT4 run against its own FP16 run, not against the baseline row."""
    runs = tmp_path / "results" / "runs"
    for seed, policy in enumerate(("tar_van_pool", "rekv")):
        _write(runs, "field", "field", policy, "a", seed)
        _write(runs, "field", "field", policy, "b", seed + 10, kv="int4")
    experiment = tmp_path / "field.yaml"
    experiment.write_text(
        "experiment: field\ntable:\n  name: field\n  columns:\n"
        "    - {benchmark: mlvu, score: micro, label: FP16, where: {kv: fp16}}\n"
        "    - {benchmark: mlvu, score: micro, label: INT4, paired: true, versus: FP16, where: {kv: int4}}\n"
        "  rows: {by: [policy]}\n  baseline: tar_van_pool\n"
    )
    build_report(experiment, runs_dir=runs, out_dir=tmp_path / "out")
    text = (tmp_path / "out" / "field.md").read_text()
    assert "| Method | FP16 | INT4 | n | Δ INT4 vs FP16 (95% CI) |" in text
    assert "| rekv | **80.0** | 30.0 | 140 | -50.0 [" in text
    assert "| tar_van_pool | 50.0 | **50.0** | 140 | +0.0 [" in text


def test_the_default_runs_are_the_studys_own_and_those_its_tables_name(study: Path) -> None:
    """A reader's own runs elsewhere under results/runs (here a better tar_van_pool of the same experiment) change
    nothing; --runs results/runs reads them all, and the table then says which run it chose."""
    build_report("robust", out_dir="clean")
    _write(study / "results" / "runs", "mine", "robust", "tar_van_pool", "b", 99)
    build_report("robust", out_dir="again")
    for name in ("robust.md", "robust.tex", "robust.csv"):
        assert (study / "again" / name).read_bytes() == (study / "clean" / name).read_bytes()
    build_report("robust", runs_dir="results/runs", out_dir="all")
    assert "2 runs match" in (study / "all" / "robust.md").read_text()


def test_rows_over_their_budgets_bytes_or_never_evicting_are_marked_and_off_the_front(study: Path) -> None:
    runs = load_runs(study / "results" / "runs")
    run = runs[0]
    over = replace(run, metrics={**run.metrics, "memory": {"peak_accelerator_bytes": run.metrics["budget_bytes"] + 1}})
    held = replace(run, metrics={**run.metrics, "time": {"compress_passes": 0, "byte_cap_passes": 0}})
    assert over.over_budget and not over.never_evicts
    assert held.never_evicts and not held.over_budget and not run.over_budget
    points = pd.DataFrame({"x": [1.0, 2.0, 3.0], "value": [50.0, 90.0, 70.0], "over_budget": [False, True, False]})
    assert pareto_front(points)["x"].tolist() == [1.0, 3.0]


def test_a_tables_budget_mib_holds_every_row_to_its_bytes(tmp_path: Path) -> None:
    """An equal-bytes row (its |M| chosen so that its peak fits another budget's bytes, as StreamingTOM's) is marked §
    against the table's ``budget_mib``, not its own |M|'s bytes; without ``budget_mib`` each run's own budget holds;
    a run with no budget (the full cache) is the reference and never held to the table's bytes."""
    runs = tmp_path / "results" / "runs"
    for seed, policy in enumerate(("tar_van_pool", "rekv")):
        _write(runs, "field", "field", policy, "a", seed)
    path = runs / "field" / "rekv_a_fp16" / "metrics.json"
    metrics = json.loads(path.read_text())
    own = metrics["budget_bytes"]
    metrics["memory"]["peak_accelerator_bytes"] = own + 1024  # over its own budget's bytes by 1 KiB
    path.write_text(json.dumps(metrics))
    reference = runs / "field" / "tar_van_pool_a_fp16" / "metrics.json"  # no budget of its own: the full cache
    full = json.loads(reference.read_text())
    full["budget_bytes"], full["memory"]["peak_accelerator_bytes"] = None, 100 * own
    reference.write_text(json.dumps(full))
    for i, (budget_mib, marked) in enumerate(((None, True), ((own + 2048) / 2**20, False), (own / 2**20, True))):
        experiment = tmp_path / f"field{i}.yaml"
        experiment.write_text(
            "experiment: field\ntable:\n  name: field\n  columns:\n"
            "    - {benchmark: mlvu, score: micro, label: All}\n"
            "  rows: {by: [policy]}\n" + ("" if budget_mib is None else f"  budget_mib: {budget_mib!r}\n")
        )
        build_report(experiment, runs_dir=runs, out_dir=tmp_path / f"out{i}")
        text = (tmp_path / f"out{i}" / "field.md").read_text()
        assert ("| rekv§ |" in text) == marked, (budget_mib, text)
        assert "| tar_van_pool |" in text


@pytest.mark.parametrize("value", [0, -1.5, "13 MiB", True])
def test_a_tables_budget_mib_must_be_a_positive_number(tmp_path: Path, value: object) -> None:
    experiment = tmp_path / "field.yaml"
    experiment.write_text(
        "experiment: field\ntable:\n  name: field\n  columns:\n    - {benchmark: mlvu, score: micro, label: All}\n"
        f"  rows: {{by: [policy]}}\n  budget_mib: {json.dumps(value)}\n"
    )
    with pytest.raises(SpecError, match="budget_mib must be a positive number"):
        build_report(experiment, runs_dir=tmp_path, out_dir=tmp_path / "out")


def test_kendall_tau_b_counts_ties() -> None:
    assert kendall_tau_b([1, 2, 3], [1, 2, 3]) == 1.0
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau_b([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(5 / 30**0.5)
    assert kendall_tau_b([1, 1], [2, 3]) is None


def test_an_option_recorded_before_it_existed_reads_at_its_default() -> None:
    """A symbolic run from before answer_cue reads as answer_cue=line, so it pairs with a run that names it."""
    old = _with_option_defaults({"name": "symbolic", "options": {"n_videos": 20}})
    new = _with_option_defaults({"name": "symbolic", "options": {"n_videos": 20, "answer_cue": "line"}})
    assert old["options"]["answer_cue"] == "line" and old["options"] == new["options"]
    assert _with_option_defaults({"name": "symbolic", "options": {"answer_cue": "kind"}})["options"]["answer_cue"] == (
        "kind"
    )
    assert _with_option_defaults({"name": "nobody", "options": {"x": 1}})["options"] == {"x": 1}
