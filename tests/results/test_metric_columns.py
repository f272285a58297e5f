"""A table column can show a run's measurement (accelerator and host peaks, time to first token) from its
metrics.json beside the scores: of a sharded run, the shards' merge (peaks the maximum, the median first-token time
over all questions, not a median of medians); a run that lacks it is a dash and a note; a bad column is refused when
the spec is read."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest
import yaml

from infinipotv.results import SpecError, add_stats, build_report, build_table, load_runs, parse_table, to_markdown
from infinipotv.results.example import MLVU_CORRECT, _mlvu_records, memory_trace, run_config, write_run
from infinipotv.results.figures import pareto_front
from infinipotv.results.spec import parse_experiment
from infinipotv.runs import METRICS

MIB = 2**20
COLUMNS = [
    {"benchmark": "mlvu", "score": "avg", "label": "Avg", "paired": True},
    {
        "benchmark": "mlvu",
        "metric": "memory.peak_accelerator_bytes",
        "scale": "MiB",
        "label": "Acc MiB",
        "better": "lower",
    },
    {"benchmark": "mlvu", "metric": "memory.peak_host_bytes", "scale": "MiB", "label": "Host MiB", "better": "lower"},
    {
        "benchmark": "mlvu",
        "metric": "time.ttft_s.median",
        "scale": "ms",
        "label": "TTFT ms",
        "decimals": 0,
        "better": "lower",
    },
]
SPEC = {
    "name": "field",
    "stub": ["Method", "KV"],
    "columns": COLUMNS,
    "rows": {"by": ["policy", "kv"], "stub": ["{policy}", "{kv}"]},
    "baseline": "tar_van_pool/fp16",
}


def _write(run_dir: Path, policy: str, kv: str, shard: str | None, part: slice, measured: dict | None) -> None:
    """One run (or shard) as the job writes it, its metrics.json given the measurements the job records."""
    config = run_config("mlvu", policy, kv, 6000, "field")
    config["benchmark"]["shard"] = shard
    records = _mlvu_records(MLVU_CORRECT[("tar_van_pool", "fp16", 6000)], seed=0)[part]
    write_run(run_dir, config, records, memory_trace(policy, kv, 6000))
    if measured is not None:
        metrics = json.loads((run_dir / METRICS).read_text())
        metrics["memory"].update(measured["memory"])
        ttft = {r["question_id"]: measured["ttft"](i) for i, r in enumerate(records)}
        times = sorted(ttft.values())
        metrics["time"]["ttft_s"] = {"mean": statistics.fmean(times), "median": statistics.median(times)}
        metrics["time"]["ttft_s_by_question"] = ttft
        (run_dir / METRICS).write_text(json.dumps(metrics))


@pytest.fixture(scope="session")
def field_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("field")
    half = 1000  # of MLVU's 2,174 questions
    # InfiniPot-V in two shards: the first's questions answered in 0.1 s, the second's 1,174 in 0.3 s
    shards = [
        ("0/2", slice(0, half), {"peak_accelerator_bytes": 3 * MIB, "peak_host_bytes": MIB}, lambda i: 0.1),
        ("1/2", slice(half, None), {"peak_accelerator_bytes": 5 * MIB, "peak_host_bytes": MIB // 2}, lambda i: 0.3),
    ]
    for shard, part, memory, ttft in shards:
        name = f"tar_van_pool_fp16_shard{shard[0]}"
        _write(root / name, "tar_van_pool", "fp16", shard, part, {"memory": memory, "ttft": ttft})
    memory = {"peak_accelerator_bytes": 2 * MIB, "peak_host_bytes": 2 * MIB}
    _write(
        root / "tar_van_pool_int4", "tar_van_pool", "int4", None, slice(None), {"memory": memory, "ttft": lambda i: 1}
    )
    # a run written before the job measured bytes by place or timed answers: its metrics.json has neither
    _write(root / "swa_fp16", "swa", "fp16", None, slice(None), None)
    return root


@pytest.fixture(scope="session")
def runs(field_root: Path) -> list:
    return load_runs(field_root)


def test_a_sharded_runs_measurements_are_its_shards_merged(runs, published) -> None:
    table = build_table(parse_table(SPEC), runs, published, experiment="field")
    add_stats(table, n_boot=200)
    fp16 = next(r for r in table.rows if r.id == "tar_van_pool/fp16")
    avg, accelerator, host, ttft = fp16.cells
    assert avg.n == 2174 and avg.value == pytest.approx(65.8, abs=0.05)
    assert accelerator.value == 5.0 and host.value == 1.0  # each the larger shard's peak, in MiB
    assert ttft.value == pytest.approx(300.0)  # the median of all 2,174 questions (1,174 at 0.3 s), in ms
    assert accelerator.n is None and accelerator.stat is None and not accelerator.partial
    markdown = to_markdown(table)
    assert "| Acc MiB | Host MiB | TTFT ms |" in markdown and "| (baseline) | 5.0 | **1.0** | **300** |" in markdown, (
        markdown
    )


def test_a_run_without_the_measurement_shows_a_dash_and_a_note(runs, published) -> None:
    table = build_table(parse_table(SPEC), runs, published, experiment="field")
    old = next(r for r in table.rows if r.id == "swa/fp16")
    assert old.cells[0].value is not None and [c.value for c in old.cells[1:]] == [None] * 3
    assert any("no number memory.peak_accelerator_bytes in its metrics.json" in n for n in table.notes)
    assert any("no number time.ttft_s.median" in n for n in table.notes)


def test_lower_is_better_for_a_measurement_marked_so(runs, published) -> None:
    table = build_table(parse_table(SPEC), runs, published, experiment="field")
    bold = {r.id: [c.bold for c in r.cells[1:]] for r in table.rows}
    assert bold["tar_van_pool/fp16"] == [False, True, True]  # 5 MiB on the accelerator, 1 MiB on the host, 0.3 s
    assert bold["tar_van_pool/int4"] == [True, False, False]  # 2 MiB, 2 MiB, 1 s
    assert bold["swa/fp16"] == [False] * 3


@pytest.mark.parametrize(
    ("column", "needle"),
    [
        ({"benchmark": "mlvu", "score": "avg", "metric": "time.seconds"}, "exactly one of `score`"),
        ({"benchmark": "mlvu"}, "exactly one of `score`"),
        ({"benchmark": "mlvu", "metric": "time.seconds", "paired": True}, "a metric column has none"),
        ({"benchmark": "mlvu", "metric": "time.seconds", "published": "avg"}, "a metric column has none"),
        ({"benchmark": "mlvu", "metric": "scores.avg"}, "write it as `score: avg`"),
        ({"benchmark": "mlvu", "score": "avg", "scale": 2}, "`scale` is a metric's unit"),
        ({"benchmark": "mlvu", "metric": "time.seconds", "scale": "hours"}, "scale must be a number > 0"),
        ({"benchmark": "mlvu", "metric": "time.seconds", "scale": 0}, "scale must be a number > 0"),
        ({"benchmark": "mlvu", "metric": "time.seconds", "unit": "s"}, "unknown key(s) ['unit']"),
    ],
)
def test_a_bad_column_is_refused_naming_the_fix(column: dict, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_table({**SPEC, "columns": [column]})
    assert needle in str(err.value)


def test_a_metric_columns_scale_is_a_number_or_a_named_unit() -> None:
    columns = parse_table(SPEC).columns
    assert [c.scale for c in columns[1:]] == [2**-20, 2**-20, 1000.0]
    assert columns[1].path == "memory.peak_accelerator_bytes" and columns[1].score is None
    number = parse_table({**SPEC, "columns": [{"benchmark": "mlvu", "metric": "time.seconds", "scale": 0.5}]})
    assert number.columns[0].scale == 0.5 and number.columns[0].label == "time.seconds"


def test_the_pareto_front_keeps_the_runs_no_other_beats_on_both_axes() -> None:
    points = pd.DataFrame(
        {"x": [1.0, 2.0, 2.0, 3.0, 4.0, 5.0], "value": [10.0, 30.0, 20.0, 25.0, 40.0, 40.0], "label": list("abcdef")}
    )
    assert list(pareto_front(points)["label"]) == ["a", "b", "e"]  # c and d cost more than b for less; f ties e


def test_accuracy_vs_a_metric_figure_with_its_cis_and_a_note_for_a_run_without_it(field_root: Path, tmp_path) -> None:
    figure = {"kind": "accuracy_vs_metric", "benchmark": "mlvu", "score": "avg"}
    figures = [
        {**figure, "metric": "memory.peak_accelerator_bytes", "scale": "MiB"},
        {**figure, "metric": "time.ttft_s.median"},
    ]
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "field.yaml").write_text(yaml.safe_dump({"table": {"tables": [SPEC], "figures": figures}}))
    report = build_report("field", field_root, tmp_path / "out", experiments_dir=experiments, n_boot=200)
    for stem in ("accuracy_vs_memory_peak_accelerator_bytes_mlvu_avg", "accuracy_vs_time_ttft_s_median_mlvu_avg"):
        for ext in ("png", "pdf"):
            assert (tmp_path / "out" / "figures" / f"{stem}.{ext}").stat().st_size > 1000
    assert any("swa_fp16: no number memory.peak_accelerator_bytes" in n for n in report.notes)


@pytest.mark.parametrize(
    ("figure", "needle"),
    [
        ({"kind": "accuracy_vs_metric", "benchmark": "mlvu", "score": "avg"}, "`metric` (a path into metrics.json"),
        ({"kind": "accuracy_vs_budget", "benchmark": "mlvu", "score": "avg", "metric": "time.seconds"}, "`metric`"),
        ({"kind": "accuracy_vs_metric", "metric": "time.seconds"}, "needs `benchmark` and `score`"),
        ({"kind": "pareto", "benchmark": "mlvu", "score": "avg"}, "kind must be one of accuracy_vs_budget"),
        ({"kind": "accuracy_vs_metric", "benchmark": "mlvu", "score": "avg", "metric": "m", "scale": "h"}, "scale"),
    ],
)
def test_a_bad_figure_is_refused_naming_the_fix(figure: dict, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_experiment({"tables": [SPEC], "figures": [figure]})
    assert needle in str(err.value)
