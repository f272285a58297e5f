"""Tables a reader can trust: never two models in one table without a model column, never an empty report, never
committed outputs replaced unasked, corrupt files skipped by name (the aggregator and ``rescore`` alike)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from infinipotv.data.rescore import main as rescore_main
from infinipotv.results import load_runs
from infinipotv.results.__main__ import main
from infinipotv.results.example import write_example_sweep

REPO = Path(__file__).resolve().parents[2]
FP16_VIDEOMME = "int4_vs_fp16/tar_van_pool_fp16_6000_videomme"
FP16_MLVU = "int4_vs_fp16/tar_van_pool_fp16_6000_mlvu"


def run_cli(
    runs: Path, out: Path, *extra: str, experiment: str = "int4_vs_fp16", experiments: Path = REPO / "experiments"
) -> int:
    return main(
        [
            experiment,
            "--runs",
            str(runs),
            "--out",
            str(out),
            "--experiments-dir",
            str(experiments),
            "--n-boot",
            "200",
            *extra,
        ]
    )


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    write_example_sweep(root)
    return root


def other_model_run(
    sweep: Path,
    source: str = FP16_VIDEOMME,
    checkpoint: str = "Qwen/Qwen2.5-VL-7B-Instruct",
    tiny: bool = False,
    **benchmark: object,
) -> Path:
    """A copy of one run of the example sweep, as another model (or benchmark selection) would have written it."""
    dest = sweep / "extra" / Path(source).name
    shutil.copytree(sweep / source, dest)
    config = OmegaConf.load(dest / "config.yaml")
    config.model.checkpoint, config.model.tiny = checkpoint, tiny
    config.benchmark.update(benchmark)
    OmegaConf.save(config, dest / "config.yaml")
    (dest / "provenance.json").write_text(json.dumps({"end": "2030-01-01T00:00:00"}))  # the newest: chosen first
    return dest


def test_a_table_without_a_model_column_refuses_runs_of_two_models(sweep, tmp_path, capsys):
    other_model_run(sweep)
    assert run_cli(sweep, tmp_path / "out") == 2
    line = one_error_line(capsys)
    assert (
        "table 'main' would mix 2 models: Qwen2-VL-7B-Instruct (5 runs), Qwen2.5-VL-7B-Instruct (1 run)" in line
        and "--model NAME" in line
    ), line
    assert not (tmp_path / "out").exists()  # nothing written


def test_model_picks_one_model_and_the_caption_names_it(sweep, tmp_path):
    other_model_run(sweep)
    assert run_cli(sweep, tmp_path / "out", "--model", "Qwen2-VL-7B-Instruct") == 0
    md = (tmp_path / "out" / "main.md").read_text()
    caption = md.splitlines()[0]
    assert caption.startswith("**Main results at equal tokens") and caption.endswith("(model: Qwen2-VL-7B-Instruct)**")
    cells = pd.read_csv(tmp_path / "out" / "main.csv")
    assert set(cells["model"].dropna()) == {"Qwen2-VL-7B-Instruct"}
    assert "random weights" not in md


def test_a_table_keyed_by_model_shows_both_models_and_names_tiny_ones(sweep, tmp_path):
    other_model_run(sweep, checkpoint="Qwen/Qwen2.5-VL-3B-Instruct", tiny=True)
    experiment = tmp_path / "by_model.yaml"
    experiment.write_text(
        OmegaConf.to_yaml(
            {
                "experiment": "int4_vs_fp16",
                "table": {
                    "name": "by_model",
                    "stub": ["Model", "KV"],
                    "columns": [{"benchmark": "videomme", "score": "Avg", "label": "Avg"}],
                    "rows": {"by": ["model", "kv"], "stub": ["{model}", "{kv}"]},
                },
            }
        )
    )
    assert run_cli(sweep, tmp_path / "out", experiment=str(experiment)) == 0
    md = (tmp_path / "out" / "by_model.md").read_text()
    assert "| Qwen2.5-VL-3B-Instruct-tiny | fp16 |" in md and "| Qwen2-VL-7B-Instruct | int4 |" in md
    assert "(model:" not in md.splitlines()[0]  # the column names them
    assert "seeded random weights: the scores check the pipeline, not a method" in md.splitlines()[0]  # caption
    assert r"\caption{" in (tex := (tmp_path / "out" / "by_model.tex").read_text()) and "random weights" in tex


def test_a_paired_statistic_needs_both_runs_asked_the_same_questions(sweep, tmp_path, capsys):
    limited = other_model_run(sweep, checkpoint="Qwen/Qwen2-VL-7B-Instruct", limit=100)
    shutil.rmtree(sweep / FP16_VIDEOMME)  # the limited copy is now the fp16 row's only videomme run
    assert run_cli(sweep, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert (
        f"row int4 / videomme: no paired statistics: int4_vs_fp16/tar_van_pool_int4_6000_videomme and the "
        f"baseline's extra/{limited.name} were asked different questions (limit None vs 100"
    ) in err, err
    cells = pd.read_csv(tmp_path / "out" / "main.csv")
    int4 = cells[(cells.row == "int4")]
    assert int4[int4.benchmark == "videomme"]["diff"].isna().all()
    assert int4[int4.benchmark == "mlvu"]["diff"].notna().all()  # the same selection: compared
    paired = tmp_path / "paired.yaml"  # a table that shows Δ says why a row has none, not only the terminal
    columns = [
        {"benchmark": b, "score": s, "label": b, "paired": True} for b, s in (("videomme", "Avg"), ("mlvu", "avg"))
    ]
    paired.write_text(
        OmegaConf.to_yaml(
            {
                "experiment": "int4_vs_fp16",
                "table": {"name": "paired", "baseline": "fp16", "columns": columns, "rows": {"by": ["kv"]}},
            }
        )
    )
    assert run_cli(sweep, tmp_path / "paired", experiment=str(paired)) == 0
    md = " ".join((tmp_path / "paired" / "paired.md").read_text().split())
    assert "No Δ for int4: asked other questions than fp16 (a subset, or another selection)" in md, md


def test_no_matching_run_is_an_error_and_leaves_committed_outputs_untouched(sweep, tmp_path, capsys):
    out = tmp_path / "committed"
    shutil.copytree(REPO / "results" / "cpu_symbolic", out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert run_cli(sweep, out, experiment="cpu_symbolic") == 2
    line = one_error_line(capsys)
    assert (
        f"no run under {sweep} matches experiment cpu_symbolic (8 runs there (experiments: budget_sweep, int4_vs_fp16"
        in line
    )
    assert "python run.py -m +experiment=cpu_symbolic" in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_an_empty_runs_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    assert run_cli(tmp_path / "runs", tmp_path / "out") == 2
    assert "no run there" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_existing_outputs_are_replaced_only_with_force_and_what_was_written_is_said(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(sweep, out) == 0
    printed = capsys.readouterr()
    written = printed.out.split()
    assert str(out / "main.md") in written and str(out / "runs.csv") in written
    assert f"wrote {len(written)} files to {out}/ from 5 runs" in printed.err
    (out / "main.md").write_text("committed")
    assert run_cli(sweep, out) == 2
    line = one_error_line(capsys)
    assert f"{out} already holds this report (main.md, main.tex, main.csv, main.json, ...)" in line, line
    assert "--force" in line and (out / "main.md").read_text() == "committed"
    assert run_cli(sweep, out, "--force") == 0
    assert (out / "main.md").read_text().startswith("**Main results")


def test_corrupt_run_files_are_skipped_by_name_and_the_rest_reported(sweep, tmp_path, capsys):
    (sweep / FP16_MLVU / "metrics.json").write_text('{"scores": ')
    broken_config = sweep / "budget_sweep" / "tar_van_pool_fp16_3000_mlvu" / "config.yaml"
    broken_config.write_text("model: [unclosed\n")
    (sweep / FP16_VIDEOMME / "provenance.json").write_text("[1, 2]")
    predictions = sweep / "int4_vs_fp16" / "tar_van_pool_int4_6000_videomme" / "predictions.jsonl"
    with predictions.open("ab") as f:
        f.write(b'[1, 2]\n{"benchmark": "videomme", "output": "A"}\n\xff\xfe binary\n{"question_id": \n')
    n_lines = len(predictions.read_bytes().splitlines())
    assert run_cli(sweep, tmp_path / "out") == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert f"warning: {sweep / FP16_MLVU / 'metrics.json'}: not JSON" in err
    assert f"warning: {broken_config}: not a readable config" in err and "run directory skipped" in err
    assert f"warning: {sweep / FP16_VIDEOMME / 'provenance.json'}: a JSON list, not an object; file skipped" in err
    for offset, why in zip(range(3, -1, -1), ("a JSON list", "no question_id", "not UTF-8 text", "not JSON")):
        assert f"warning: {predictions} line {n_lines - offset}: {why}" in err, (why, err)
    assert len(warnings) == 7, warnings
    cells = pd.read_csv(tmp_path / "out" / "main.csv")
    fp16_mlvu = cells[(cells.row == "fp16") & (cells.column == "MLVU Avg")].iloc[0]
    assert fp16_mlvu.value == pytest.approx(65.76, abs=5e-3) and fp16_mlvu.partial  # scored from its predictions


def test_load_runs_warns_once_per_corrupt_file(sweep):
    from infinipotv.data.rescore import SkippedInput

    (sweep / FP16_MLVU / "metrics.json").write_bytes(b"\x00\x01")
    with pytest.warns(SkippedInput, match="metrics.json: not JSON"):
        runs = {r.id: r for r in load_runs(sweep)}
    assert "metrics.json corrupt" in runs[FP16_MLVU].problems


def test_rescore_skips_corrupt_lines_by_number_and_refuses_an_empty_or_missing_run(sweep, capsys):
    run_dir = sweep / FP16_MLVU
    options = {"A": "one", "B": "two", "C": "three", "D": "four"}  # what the job records beside each answer
    good = [
        json.dumps({**json.loads(line), "options": options}).encode() + b"\n"
        for line in (run_dir / "predictions.jsonl").read_bytes().splitlines()[:50]
    ]
    (run_dir / "predictions.jsonl").write_bytes(b"".join([good[0], b'"text"\n', b"\xc3\x28\n", b"{}\n", *good[1:]]))
    assert rescore_main([str(run_dir)]) == 0
    captured = capsys.readouterr()
    path = run_dir / "predictions.jsonl"
    assert captured.err.splitlines() == [
        f"warning: {path} line 2: a JSON str, not a prediction object; line skipped",
        f"warning: {path} line 3: not UTF-8 text; line skipped",
        f"warning: {path} line 4: no question_id; line skipped",
    ]
    assert "3 unreadable lines skipped" in captured.out and f"of {len(good)} answers" in captured.out

    path.write_bytes(b"\xff\n[]\n")
    assert rescore_main([str(run_dir)]) == 2
    assert "holds no readable prediction (2 line(s) skipped)" in one_error_line(capsys)
    path.unlink()
    assert rescore_main([str(run_dir)]) == 2
    assert f"{path} not found" in one_error_line(capsys)
    assert rescore_main([str(sweep / "nowhere")]) == 2
    assert "config.yaml not found" in one_error_line(capsys)
    (run_dir / "config.yaml").write_text("benchmark: {name: [\n")
    assert rescore_main([str(run_dir)]) == 2
    assert "config.yaml: not a readable config" in one_error_line(capsys)


def test_a_memory_trace_of_one_step_is_drawn(sweep, tmp_path):
    import numpy as np
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from infinipotv.results import plot_memory_trace, save_figure

    run_dir = sweep / FP16_VIDEOMME
    first = (run_dir / "memory.jsonl").read_text().splitlines()[0]
    (run_dir / "memory.jsonl").write_text(first + "\n")  # a video streamed in one chunk: one point
    (run,) = [r for r in load_runs(sweep) if r.id == FP16_VIDEOMME]
    fig = plot_memory_trace([run])
    fig.axes[0].get_legend().remove()  # its sample line is drawn either way
    png = next(p for p in save_figure(fig, tmp_path / "trace") if p.suffix == ".png")
    pixels = imread(png)[..., :3]
    rgb = np.array(to_rgb(fig.axes[0].lines[0].get_color()))
    assert (np.abs(pixels - rgb).sum(axis=-1) < 0.1).sum() > 20  # the point is on the page, in the line's colour
