"""Figures read at a glance (issue 44 item 6): axes in words, never a metrics.json key; one line per method across
its budgets, joined in order of x, named in a legend outside the axes and never by labels on the points; one colour
per method family, the same in every figure, a marker per method within it; a log axis only where the data spans
more than 10x; and the experiment files' figure specs still drawn by the report, from run directories written by
the example sweep's helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from infinipotv.results import build_report
from infinipotv.results.example import MLVU_CORRECT, _mlvu_records, memory_trace, run_config, write_run
from infinipotv.results.figures import (
    accuracy_label,
    metric_label,
    plot_accuracy_vs_budget,
    plot_accuracy_vs_metric,
    plot_arrows,
    plot_vs_budget,
    save_figure,
)
from infinipotv.results.methods import FAMILIES, method_style
from infinipotv.results.spec import SpecError, parse_experiment
from infinipotv.runs import METRICS

BUDGETS = (72, 144, 288, 576)
MIB = 2**20
# (policy, accuracy at each budget): a family of InfiniPot-V, two retrieval methods, an eviction peer, the window
ACCURACY = {
    "tar_van_pool": (22.0, 31.5, 57.0, 80.0),
    "van": (35.0, 50.0, 62.0, 78.0),
    "rekv": (12.0, 17.0, 28.0, 45.0),
    "livevlm": (10.0, 18.0, 25.0, 40.0),
    "streamingtom": (15.0, 22.5, 30.0, 44.0),
    "swa": (2.0, 3.5, 8.0, 20.0),
}


def _frame() -> pd.DataFrame:
    """The tidy rows a four-budget study gives: every method at every budget in FP16 (its accelerator MiB and median
    time to first token measured), InfiniPot-V INT4 at two budgets in bytes, and the full cache."""
    rows = []
    for policy, values in ACCURACY.items():
        extra = 3.0 if policy == "streamingtom" else 0.0  # holds more than its budget, as StreamingTOM does
        for budget, value in zip(BUDGETS, values):
            mib = 1.0 + 2.2 * budget / 144 + extra
            rows.append((policy, "fp16", budget, None, value, mib, 0.05 + budget / 4000))
    rows += [
        ("tar_van_pool", "int4", 330, 3.3921, 59.5, 3.39, 0.09),
        ("tar_van_pool", "int4", 776, 6.6056, 85.5, 6.6, 0.12),
    ]
    rows.append(("full", "fp16", None, None, 91.0, 25.0, 0.6))
    return pd.DataFrame(
        [
            {
                "benchmark": "symbolic",
                "score": "overall",
                "policy": p,
                "kv": kv,
                "budget_tokens": b,
                "compress.budget_mib": bytes_mib,
                "value": v,
                "ci_low": v - 6,
                "ci_high": v + 6,
                "x": x,
                "ttft": t,
            }
            for p, kv, b, bytes_mib, v, x, t in rows
        ]
    )


def _lines(fig) -> dict:
    """Every labelled line of every panel (the references, drawn in each panel, once)."""
    lines: dict = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                lines.setdefault(line.get_label(), line)
    return lines


def test_axes_say_what_they_show_in_words() -> None:
    assert metric_label("memory.peak_accelerator_bytes", 2**-20) == "accelerator memory (MiB)"
    assert metric_label("memory.peak_host_bytes", 2**-30) == "host memory (GiB)"
    assert metric_label("time.ttft_s.median") == "median time to first token (s)"
    assert metric_label("time.ttft_s.median", 1e3) == "median time to first token (ms)"
    assert metric_label("memory.peak_widget_bytes") == "peak widget (B)"  # one not named yet: its words, no dots
    assert accuracy_label("symbolic", "overall") == "symbolic accuracy (%)"
    assert accuracy_label("symbolic", "breakdown.mode.offline") == "symbolic accuracy (%): mode offline"
    budget = plot_accuracy_vs_budget(_frame(), "symbolic", "overall").axes[0]
    assert budget.get_xlabel().startswith("|M| (tokens") and budget.get_ylabel() == "symbolic accuracy (%)"


def test_one_line_per_method_across_budgets_joined_in_order_of_x_and_no_point_labels() -> None:
    frame = _frame()
    fig = plot_accuracy_vs_metric(frame, "symbolic", "overall", metric_label("memory.peak_accelerator_bytes", 2**-20))
    ax = fig.axes[0]
    lines = _lines(fig)
    names = {method_style(p).name for p in ACCURACY}
    assert names <= {label.removesuffix(" FP16") for label in lines}
    for policy in ACCURACY:
        line = lines[f"{method_style(policy).name} FP16"]
        x = list(line.get_xdata())
        assert len(x) == len(BUDGETS) and x == sorted(x), (policy, x)  # its four budgets, joined by cost
        assert line.get_linestyle() == "-"
    bytes_line = lines["InfiniPot-V INT4, equal bytes"]
    assert len(bytes_line.get_xdata()) == 2 and bytes_line.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))
    assert "Pareto front" in lines
    renderer = FigureCanvasAgg(fig).get_renderer()
    # a panel per family of the field (no panel draws every method), each with its legend under it, off the curves
    assert [a.get_title() for a in fig.axes] == ["InfiniPot-V and its ablations", "retrieval", "eviction"]
    for panel in fig.axes:
        assert not panel.texts and not [c for c in panel.get_children() if type(c).__name__ == "Annotation"]
        assert panel.get_legend().get_window_extent(renderer).y1 <= panel.get_window_extent(renderer).y0
        assert panel.get_xlabel() == "accelerator memory (MiB)"
        assert len([line for line in panel.get_lines() if not line.get_label().startswith("_")]) <= 8
    assert ax.get_ylabel() == "symbolic accuracy (%), 95% CI"


def test_one_colour_per_family_the_same_in_every_figure_and_a_marker_per_method_within_it() -> None:
    frame = _frame()
    budget = _lines(plot_accuracy_vs_budget(frame, "symbolic", "overall"))
    metric = _lines(plot_accuracy_vs_metric(frame, "symbolic", "overall", "median time to first token (s)"))
    colour = {label: to_hex(line.get_color()) for label, line in budget.items()}
    for label, line in metric.items():
        if label in colour:
            assert to_hex(line.get_color()) == colour[label], label  # the same in both figures
    assert colour["InfiniPot-V FP16"] == colour["VaN FP16"] == colour["InfiniPot-V INT4, equal bytes"]
    assert colour["ReKV FP16"] == colour["LiveVLM FP16"] != colour["InfiniPot-V FP16"]
    family_colours = [colour[f"{method_style(p).name} FP16"] for p in ("tar_van_pool", "rekv", "streamingtom", "swa")]
    assert len(set(family_colours)) == 4
    assert budget["InfiniPot-V FP16"].get_marker() != budget["VaN FP16"].get_marker()
    assert budget["ReKV FP16"].get_marker() != budget["LiveVLM FP16"].get_marker()
    for family in FAMILIES:  # every family's members told apart by marker, all in the family's colour
        styles = [method_style(p) for p, _ in family.members]
        assert len({s.marker for s in styles}) == len(styles) and {s.colour for s in styles} == {family.colour}
    assert method_style("a_method_added_later").colour == method_style("another_one").colour  # grey until named


def test_a_cost_against_the_budget_joins_each_methods_runs_in_order_of_budget() -> None:
    """The time to first token drawn as accuracy's x axis zig-zags (a method's runs are not in the order of their
    times); against |M| each method is one line in budget order, its equal-bytes runs apart, a log y where the
    times span more than 10x."""
    frame = _frame().assign(value=lambda f: f["ttft"]).drop(columns=["ci_low", "ci_high"])
    frame.loc[(frame["policy"] == "rekv") & (frame["budget_tokens"] == 144), "value"] = 0.01  # out of order
    fig = plot_vs_budget(frame, metric_label("time.ttft_s.median"), log_y=True)
    ax = fig.axes[0]
    lines = _lines(fig)
    assert list(lines["ReKV FP16"].get_xdata()) == list(BUDGETS)  # in budget order whatever the times
    assert list(lines["ReKV FP16"].get_ydata())[1] == 0.01
    assert list(lines["InfiniPot-V INT4, equal bytes"].get_xdata()) == [330, 776]
    assert "Full KV FP16 (no budget)" in lines
    assert ax.get_ylabel() == "median time to first token (s)" and ax.get_yscale() == "log"  # 0.01 to 0.6 s
    assert plot_vs_budget(frame.assign(value=lambda f: f["ttft"]), "s", log_y=True).axes[0].get_yscale() == "linear"
    assert plot_accuracy_vs_budget(_frame(), "symbolic", "overall").axes[0].get_yscale() == "linear"  # 2 to 91%


def test_a_figure_drawn_twice_is_the_same_bytes(tmp_path: Path) -> None:
    """A re-rendered study changes no figure file its runs did not change: the PDF carries no creation date."""
    first = save_figure(plot_accuracy_vs_budget(_frame(), "symbolic", "overall"), tmp_path / "a")
    second = save_figure(plot_accuracy_vs_budget(_frame(), "symbolic", "overall"), tmp_path / "b")
    assert [p.suffix for p in first] == [".png", ".pdf"]
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert b"/CreationDate" not in first[1].read_bytes()  # the same second would hide a date: look for none


def test_tuned_against_upstream_as_arrows_a_panel_per_budget() -> None:
    """An arrow per method from its upstream score to its tuned one, a panel per |M|, methods in the field's order:
    what tuning gained (pointing up) or lost (down) reads without a table."""
    pairs = pd.DataFrame(
        [
            {"policy": "rekv", "kv": "fp16", "budget_tokens": 144, "start": 34.0, "end": 41.0},
            {"policy": "weavetime", "kv": "fp16", "budget_tokens": 144, "start": 33.5, "end": 54.0},
            {"policy": "swa", "kv": "fp16", "budget_tokens": 144, "start": 3.5, "end": 3.0},
            {"policy": "rekv", "kv": "fp16", "budget_tokens": 288, "start": 45.0, "end": 44.0},
        ]
    )
    fig = plot_arrows(pairs, "symbolic accuracy (%)", "label upstream", "label tuned")
    assert [ax.get_title() for ax in fig.axes] == ["|M| = 144", "|M| = 288"]
    first = fig.axes[0]
    assert [t.get_text() for t in first.get_xticklabels()] == ["ReKV", "WeaveTime", "Sliding window"]
    arrows = [a for a in first.get_children() if type(a).__name__ == "Annotation"]
    ends = sorted((a.xyann[1], a.xy[1]) for a in arrows)  # (from, to) of each arrow
    assert ends == [(3.5, 3.0), (33.5, 54.0), (34.0, 41.0)]
    assert {c: method_style(p).colour for c, p in ((0, "rekv"), (1, "weavetime"))}[0] == method_style("rekv").colour
    legend = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert legend == ["label upstream", "label tuned"]
    with pytest.raises(ValueError, match="no method has both"):
        plot_arrows(pairs.assign(end=None), "y", "a", "b")


def test_arrows_are_drawn_from_run_directories_pairing_method_storage_and_budget(tmp_path: Path) -> None:
    """fair_peers.yaml's arrows over runs labelled upstream and tuned: one arrow per method that has both."""
    runs = tmp_path / "runs"
    for i, (policy, label) in enumerate((("rekv", "upstream"), ("rekv", "tuned"), ("van", "upstream"))):
        config = {**run_config("mlvu", policy, "fp16", 6000, "arrows"), "label": label}
        key = ("tar_van_pool", "fp16", 6000) if i != 1 else ("full", "fp16", None)  # tuned: other answers
        write_run(
            runs / f"{policy}_{label}",
            config,
            _mlvu_records(MLVU_CORRECT[key], seed=i),
            memory_trace(policy, "fp16", 6000),
        )
    fair = yaml.safe_load((Path(__file__).parents[2] / "experiments" / "fair_peers.yaml").read_text())["table"]
    arrows = [{**f, "benchmark": "mlvu", "score": "avg"} for f in fair["figures"] if f["kind"] == "arrows"]
    assert len(arrows) == 1 and arrows[0]["from"] == {"label": "upstream"} and arrows[0]["to"] == {"label": "tuned"}
    arrows[0].pop("where")
    table = {"name": "t", "columns": [{"benchmark": "mlvu", "score": "avg"}], "rows": {"by": ["policy", "label"]}}
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "arrows.yaml").write_text(yaml.safe_dump({"table": {"tables": [table], "figures": arrows}}))
    report = build_report("arrows", runs, tmp_path / "out", experiments_dir=experiments, n_boot=100)
    assert [p.name for p in report.files if p.suffix == ".png"] == [f"{arrows[0]['name']}.png"]
    assert not [n for n in report.notes if n.startswith("figure")], report.notes


@pytest.mark.parametrize(
    ("figure", "message"),
    [
        ({"kind": "arrows", "benchmark": "mlvu", "score": "avg", "from": {"label": "upstream"}}, "needs `to`"),
        ({"kind": "arrows", "benchmark": "mlvu", "score": "avg", "from": "upstream", "to": {"a": 1}}, "needs `from`"),
        ({"kind": "arrows", "from": {"label": "a"}, "to": {"label": "b"}}, "needs `benchmark` and `score`"),
        ({"kind": "accuracy_vs_budget", "benchmark": "m", "score": "a", "to": {"label": "b"}}, "go with kind arrows"),
        ({"kind": "metric_vs_budget", "benchmark": "mlvu"}, "`metric`"),
        ({"kind": "metric_vs_budget", "metric": "time.ttft_s.median"}, "needs `benchmark`"),
        ({"kind": "metric_vs_budget", "benchmark": "mlvu", "metric": "m", "score": "avg"}, "not a `score`"),
    ],
)
def test_a_cost_against_the_budget_names_its_metric_and_benchmark(figure: dict, message: str) -> None:
    table = {"name": "t", "columns": [{"benchmark": "mlvu", "score": "avg"}], "rows": {"by": ["policy"]}}
    with pytest.raises(SpecError, match=message):
        parse_experiment({"tables": [table], "figures": [figure]}, "x.yaml: table")


@pytest.mark.parametrize(("top", "log"), [(20.0, False), (40.0, True)])
def test_a_log_axis_only_where_the_data_spans_more_than_ten_times(top: float, log: bool) -> None:
    frame = _frame()
    frame.loc[frame["policy"] == "full", "x"] = top  # the rest span 2.1 to 12.8 MiB: over 10x only with it at 40
    fig = plot_accuracy_vs_metric(frame, "symbolic", "overall", "accelerator memory (MiB)")
    assert (fig.axes[0].get_xscale() == "log") == log
    assert plot_accuracy_vs_budget(frame, "symbolic", "overall").axes[0].get_xscale() == "log"  # 72 to 776 tokens
    assert plot_accuracy_vs_budget(frame[frame["kv"] == "fp16"], "symbolic", "overall").axes[0].get_xscale() == "linear"


@pytest.mark.parametrize(
    ("experiment", "pngs"),
    [
        (
            "cpu_peers",
            [
                "accuracy_vs_budget_mlvu_avg.png",
                "accuracy_vs_memory_peak_accelerator_bytes_mlvu_avg.png",
                "accuracy_vs_time_ttft_s_median_mlvu_avg.png",
            ],
        ),
        (
            "fair_peers",
            ["accuracy_vs_memory_upstream.png", "ttft_vs_budget_upstream.png"],
        ),
    ],
)
def test_the_experiment_files_figures_are_drawn_from_run_directories(
    tmp_path: Path, experiment: str, pngs: list[str]
) -> None:
    """An experiment file's figures (their `where` aside) over runs of four methods at two budgets."""
    runs = tmp_path / "runs"
    for i, policy in enumerate(("tar_van_pool", "van", "rekv", "swa")):
        for budget, key in ((6000, ("tar_van_pool", "fp16", 6000)), (12000, ("full", "fp16", None))):
            run_dir = runs / f"{policy}_{budget}"
            config = run_config("mlvu", policy, "fp16", budget, "readable")
            write_run(run_dir, config, _mlvu_records(MLVU_CORRECT[key], seed=i), memory_trace(policy, "fp16", budget))
            metrics = json.loads((run_dir / METRICS).read_text())
            metrics["memory"]["peak_accelerator_bytes"] = (budget / 1000 + i) * MIB
            metrics["time"]["ttft_s"] = {"median": 0.1 * (i + 1) * budget / 6000}
            (run_dir / METRICS).write_text(json.dumps(metrics))
    spec = yaml.safe_load((Path(__file__).parents[2] / "experiments" / f"{experiment}.yaml").read_text())["table"]
    figures = [{k: v for k, v in f.items() if k != "where"} for f in spec["figures"] if f["kind"] != "arrows"]
    for figure in figures:
        figure["benchmark"] = "mlvu"
        if figure["kind"].startswith("accuracy_vs_"):
            figure["score"] = "avg"
    table = {
        "name": "t",
        "columns": [{"benchmark": "mlvu", "score": "avg"}],
        "rows": {"by": ["policy", "budget_tokens"]},
    }
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "readable.yaml").write_text(yaml.safe_dump({"table": {"tables": [table], "figures": figures}}))
    report = build_report("readable", runs, tmp_path / "out", experiments_dir=experiments, n_boot=100)
    assert sorted(p.name for p in report.files if p.suffix == ".png") == pngs
    assert not [n for n in report.notes if n.startswith("figure")], report.notes


def test_the_memory_figure_names_runs_in_words_and_shades_one_methods_budgets(sweep_dir: Path) -> None:
    from infinipotv.results import load_runs, plot_memory_trace

    runs = [r for r in load_runs(sweep_dir) if r.fields["benchmark"] == "mlvu"]
    lines = _lines(plot_memory_trace(runs))
    fp16 = [label for label in lines if label.startswith("InfiniPot-V FP16")]
    assert fp16 == [f"InfiniPot-V FP16, |M| = {b}" for b in ("3K", "6K", "12K", "24K")]  # in budget order
    assert len({to_hex(lines[label].get_color()) for label in fp16}) == 4  # told apart
    assert to_hex(lines[fp16[-1]].get_color()) == method_style("tar_van_pool").colour.lower()  # the largest: its own
    assert "Full KV FP16, no budget" in lines


def test_two_figures_that_would_write_one_file_are_refused_and_named_ones_are_not() -> None:
    """fair_peers draws accuracy against memory twice (upstream and tuned rows): without names the second file would
    overwrite the first, so the spec refuses it in one line; with names each gets its own file."""
    figure = {"kind": "accuracy_vs_metric", "benchmark": "mlvu", "score": "avg", "metric": "memory.peak_host_bytes"}
    table = {"name": "t", "columns": [{"benchmark": "mlvu", "score": "avg"}], "rows": {"by": ["policy"]}}
    twice = [{**figure, "where": {"label": "upstream"}}, {**figure, "where": {"label": "tuned"}}]
    with pytest.raises(SpecError, match=r"figures\[0\] and \[1\] both write figures/accuracy_vs_memory_peak_host"):
        parse_experiment({"tables": [table], "figures": twice}, "x.yaml: table")
    named = [{**f, "name": f"memory_{f['where']['label']}"} for f in twice]
    spec = parse_experiment({"tables": [table], "figures": named}, "x.yaml: table")
    assert [f.stem() for f in spec.figures] == ["memory_upstream", "memory_tuned"]
    with pytest.raises(SpecError, match="is a file stem under figures/"):
        parse_experiment({"tables": [table], "figures": [{**figure, "name": "../up"}]}, "x.yaml: table")
    fair = yaml.safe_load((Path(__file__).parents[2] / "experiments" / "fair_peers.yaml").read_text())["table"]
    stems = [f.stem() for f in parse_experiment(fair, "fair_peers.yaml: table").figures]
    assert len(set(stems)) == len(stems) == 3
