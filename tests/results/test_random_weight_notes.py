"""What a reader of a table or figure sees without the notes: random-weight runs say so in the caption (markdown and
LaTeX) and on the accuracy figure; a column where every run scored 0 has no bold; the budget figure keeps its legend
off the curves, draws FP16 and INT4 side by side, and marks runs at equal bytes as such (hollow, named so)."""

from __future__ import annotations

import dataclasses

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from infinipotv.results.figures import plot_accuracy_vs_budget
from infinipotv.results.render import to_latex, to_markdown
from infinipotv.results.tables import RANDOM_WEIGHTS, build_table


def _zeroed(tree):
    if isinstance(tree, dict):
        return {k: _zeroed(v) for k, v in tree.items()}
    return 0.0 if isinstance(tree, float) else tree


def test_all_zero_columns_have_no_bold_and_tiny_runs_say_so_in_the_caption(runs, published, int4_spec) -> None:
    spec = next(t for t in int4_spec.tables if t.name == "mlvu_tasks")
    tiny = [
        dataclasses.replace(
            r, scores=_zeroed(r.scores), config={**r.config, "model": {**r.config["model"], "tiny": True}}
        )
        for r in runs
    ]
    table = build_table(spec, tiny, published)
    assert all(c.value == 0 for r in table.rows for c in r.cells)
    assert not any(c.bold for r in table.rows for c in r.cells)
    assert RANDOM_WEIGHTS in table.caption
    assert RANDOM_WEIGHTS in to_markdown(table).splitlines()[0]
    assert RANDOM_WEIGHTS in next(line for line in to_latex(table).splitlines() if line.startswith(r"\caption"))
    real = build_table(spec, runs, published)
    assert "random weights" not in real.caption and any(c.bold for r in real.rows for c in r.cells)


def _frame(tiny: bool) -> pd.DataFrame:
    rows = [  # (policy, kv, budget_tokens, budget_mib, value)
        ("van", "fp16", 144, None, 50.0),
        ("van", "fp16", 288, None, 65.5),
        ("van", "int4", 144, None, 49.0),
        ("van", "int4", 330, 3.3921, 73.5),
        ("full", "fp16", None, None, 91.0),
    ]
    return pd.DataFrame(
        [
            {
                "benchmark": "symbolic",
                "score": "overall",
                "policy": p,
                "kv": kv,
                "budget_tokens": b,
                "compress.budget_mib": mib,
                "value": v,
                "model.tiny": tiny,
            }
            for p, kv, b, mib, v in rows
        ]
    )


def test_budget_figure_legend_outside_storages_apart_equal_bytes_marked() -> None:
    fig = plot_accuracy_vs_budget(_frame(tiny=False), "symbolic", "overall")
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {"VaN FP16", "VaN INT4", "VaN INT4, equal bytes", "Full KV FP16 (no budget)"} <= set(lines)
    assert list(lines["VaN INT4"].get_xdata()) == [144]  # the equal-bytes point is not on the token line
    assert lines["VaN INT4, equal bytes"].get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))  # hollow
    assert lines["VaN FP16"].get_linestyle() != lines["VaN INT4"].get_linestyle()
    assert lines["VaN FP16"].get_color() == lines["VaN INT4"].get_color()  # one colour per method (its family's)
    renderer = FigureCanvasAgg(fig).get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    assert ax.get_title() == ""
    tiny = plot_accuracy_vs_budget(_frame(tiny=True), "symbolic", "overall")
    assert "random weights" in tiny.axes[0].get_title().lower()
