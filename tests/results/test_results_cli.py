"""``python -m infinipotv.results``: every output an experiment asks for, from the example sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from infinipotv.results.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def run_cli(sweep_dir: Path, out: Path, *extra: str, experiment: str = "int4_vs_fp16") -> int:
    return main(
        [
            experiment,
            "--runs",
            str(sweep_dir),
            "--out",
            str(out),
            "--experiments-dir",
            str(REPO / "experiments"),
            *extra,
        ]
    )


def test_cli_writes_tables_statistics_and_figures(sweep_dir: Path, tmp_path: Path):
    assert run_cli(sweep_dir, tmp_path, "--stats", "--n", "--n-boot", "2000") == 0
    for name in ("main", "mlvu_tasks"):
        for ext in ("md", "tex", "csv", "json"):
            assert (tmp_path / f"{name}.{ext}").stat().st_size > 0
    assert "**Paired difference vs fp16**" in (tmp_path / "main.md").read_text()
    cells = pd.read_csv(tmp_path / "main.csv")
    int4_avg = cells[(cells.row == "int4") & (cells.column == "MLVU Avg")].iloc[0]
    assert int4_avg.value == pytest.approx(66.113, abs=1e-3) and int4_avg.n == 2174 and int4_avg.bold
    assert int4_avg["diff"] == pytest.approx(66.113 - 65.760, abs=1e-2)
    assert int4_avg.ci_low < int4_avg["diff"] < int4_avg.ci_high
    assert 0 < int4_avg.p_value <= 1 and int4_avg.baseline == "fp16"
    assert json.loads((tmp_path / "mlvu_tasks.json").read_text())[0]["table"] == "mlvu_tasks"
    tidy = pd.read_csv(tmp_path / "runs.csv")
    used = (
        "tar_van_pool_fp16_6000_videomme",
        "tar_van_pool_int4_6000_videomme",
        "tar_van_pool_fp16_6000_mlvu",
        "tar_van_pool_int4_6000_mlvu",
        "full_fp16_mlvu",
    )
    assert set(tidy.run) == {f"int4_vs_fp16/{d}" for d in used}
    for stem in ("memory_trace_videomme", "memory_trace_mlvu"):
        for ext in ("png", "pdf"):
            assert (tmp_path / "figures" / f"{stem}.{ext}").stat().st_size > 1000
    assert "164 B" in (tmp_path / "bytes_per_token.md").read_text()  # seed Table 3, from infinipotv.kv.bytes_table


def test_cli_statistics_only_in_files_without_stats_flag(sweep_dir: Path, tmp_path: Path):
    assert run_cli(sweep_dir, tmp_path, "--format", "md", "--baseline", "int4", "--n-boot", "500") == 0
    assert not (tmp_path / "main.tex").exists()
    assert "Paired difference" not in (tmp_path / "main.md").read_text()
    cells = pd.read_csv(tmp_path / "mlvu_tasks.csv")
    assert set(cells.baseline) == {"int4"} and cells[cells.row == "fp16"]["diff"].notna().all()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "bf16"], "--baseline 'bf16' matches no run row"),
        (["--format", "html"], "unknown format(s) ['html']"),
        (["--runs", "/nonexistent"], "runs folder /nonexistent does not exist"),
        (["--experiments-dir", "/nonexistent"], "no experiment file /nonexistent/int4_vs_fp16.yaml"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_line(args, message, sweep_dir: Path, tmp_path: Path, capsys):
    assert run_cli(sweep_dir, tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_accuracy_vs_budget_figure_for_a_budget_sweep(sweep_dir: Path, tmp_path: Path):
    assert run_cli(sweep_dir, tmp_path, "--n-boot", "200", experiment="budget_sweep") == 0
    for ext in ("png", "pdf"):
        assert (tmp_path / "figures" / f"accuracy_vs_budget_mlvu_avg.{ext}").stat().st_size > 1000
    assert "Table A5" not in (tmp_path / "budget_sweep.md").read_text()  # the source is named, not the table
    assert "infinipotv_paper_v2" in (tmp_path / "budget_sweep.md").read_text()
