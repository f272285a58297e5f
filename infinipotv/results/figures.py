"""Figures from the tidy frame and the memory traces (matplotlib, saved as PNG + PDF), drawn to be read at a glance.

Every figure draws a method the same way (:mod:`infinipotv.results.methods`): one colour per method family, a marker
per method within it, a line style per storage (FP16 solid, INT4 dashed), its name as the papers write it in a
legend outside the axes, and no label on a point. Axes say what they show in words (``accelerator memory (MiB)``,
``time to first token (s)``, ``accuracy (%)``, ``|M| (tokens ...)``); an axis is logarithmic only where its values
span more than 10x.

- accuracy vs budget: one line per method (and storage) over |M|, with its 95% CI as a bar where the frame has
  ``ci_low``/``ci_high``; runs given a budget in bytes as a line of hollow markers of their own (at equal bytes a
  low-bit cache holds more tokens, a different comparison); runs without a budget (full KV) as dotted horizontals.
- accuracy vs a measurement (accelerator bytes, time to first token...): one line per method across its budgets,
  its points joined in order of the measurement, each with its 95% CI as a vertical bar; the Pareto front (no other
  run is both better and cheaper) as a wide grey band behind them.
- arrows (``kind: arrows``): per method and |M|, an arrow from one run's score to its counterpart's (upstream
  split to tuned), a panel per |M|.
- a table's score columns side by side (``kind: table``): one line per row across the columns (the settings of the
  robustness study), with the cells' 95% CIs.
- KV memory vs frames streamed: ``cache_bytes`` from ``memory.jsonl`` for one video, one line per run, which shows
  full KV growing with the stream and a compressed cache held at its budget, FP16 above INT4.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure  # figures built without pyplot: no global state, no display backend needed
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from infinipotv.results.collect import Run
from infinipotv.results.methods import method_style
from infinipotv.results.spec import SCALES
from infinipotv.results.tables import RANDOM_WEIGHTS

STYLES = {"fp16": "-", "bf16": "-", "int8": "-.", "int4": "--", "int2": ":"}  # line style per storage (kv)
LOG_SPAN = 10.0  # an axis whose values span more than this factor is logarithmic
#: Measurements in words (a figure's axis never shows a metrics.json key); the unit comes from the scale.
METRIC_WORDS = {
    "memory.peak_accelerator_bytes": "accelerator memory",
    "memory.peak_host_bytes": "host memory",
    "memory.peak_cache_bytes": "KV cache",
    "memory.peak_memory_bytes": "process peak memory",
    "memory.peak_cache_tokens": "KV cache tokens",
    "memory.frames": "frames streamed",
    "time.ttft_s.median": "median time to first token",
    "time.ttft_s.mean": "mean time to first token",
    "time.seconds": "run time",
    "time.encode_seconds": "encoding time",
    "time.compress_seconds": "compression time",
    "time.encode_fps": "frames encoded per second",
}
SCORE_TOTALS = ("overall", "avg", "accuracy")  # a benchmark's whole score: its axis says accuracy alone


def save_figure(fig: Figure, stem: str | Path) -> list[Path]:
    """``stem.png`` (200 dpi) and ``stem.pdf``, each the same bytes whenever the figure is: the PDF without its
    creation date, so a re-rendered study changes no file its runs did not change."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        metadata = {"CreationDate": None} if path.suffix == ".pdf" else None
        fig.savefig(path, dpi=200, bbox_inches="tight", metadata=metadata)
    return paths


def _budget_label(tokens: float) -> str:
    return f"{tokens / 1000:g}K" if tokens >= 1000 else f"{tokens:g}"


def accuracy_label(benchmark: str, score: str) -> str:
    """The accuracy axis in words: ``symbolic accuracy (%)``, or ``... (%): mode offline`` for a part of it."""
    if score in SCORE_TOTALS:
        return f"{benchmark} accuracy (%)"
    part = score.removeprefix("breakdown.").replace(".", " ").replace("_", " ")
    return f"{benchmark} accuracy (%): {part}"


def metric_label(metric: str, scale: float = 1.0) -> str:
    """A measurement's axis in words with its unit: ``accelerator memory (MiB)``, ``median time to first token
    (s)``; a metric not in :data:`METRIC_WORDS` is named by its last part, underscores as spaces."""
    last = metric.rsplit(".", 1)[-1]
    words = METRIC_WORDS.get(metric) or last.removesuffix("_bytes").removesuffix("_s").replace("_", " ")
    if last.endswith("bytes"):
        unit = next((name for name, factor in SCALES.items() if factor == scale and "B" in name), None)
        unit = unit or ("B" if scale == 1 else f"B x {scale:g}")
    elif last.endswith(("seconds", "_s")) or ".ttft_s." in f".{metric}.":
        unit = {1.0: "s", 1e3: "ms"}.get(scale, f"s x {scale:g}")
    else:
        unit = None if scale == 1 else f"x {scale:g}"
    return f"{words} ({unit})" if unit else words


def _plain(value: float, _: int) -> str:
    """A log axis' tick as a plain number (``3``, ``20``), not ``3 x 10^0``; only 1, 2 and 5 of each decade."""
    mantissa = f"{value:.0e}".split("e")[0]
    return f"{value:g}" if mantissa in ("1", "2", "5") else ""


def _log_if_spans(ax: Axes, values: Sequence[float], axis: str = "x") -> bool:
    """A logarithmic ``axis`` (``x`` or ``y``) where the positive ``values`` span more than :data:`LOG_SPAN` (its
    ticks plain numbers); whether it is one."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) > LOG_SPAN * min(positive):
        getattr(ax, f"set_{axis}scale")("log")
        scale = getattr(ax, f"{axis}axis")
        scale.set_major_formatter(FuncFormatter(_plain))
        scale.set_minor_formatter(FuncFormatter(_plain))
        return True
    return False


def _series_label(policy: str, kv: str, by_bytes: bool, storages: int) -> str:
    """A line's legend entry: the method's name, its storage where the figure has several, and equal bytes."""
    label = method_style(policy).name + (f" {kv.upper()}" if storages > 1 else "")
    return label + (", equal bytes" if by_bytes else "")


def _series(data: pd.DataFrame) -> list[tuple[tuple[str, str, bool], pd.DataFrame]]:
    """The frame's rows by line, (policy, kv, budget in bytes), in legend order: family, method, storage."""
    data = data.assign(_bytes=data["compress.budget_mib"].notna() if "compress.budget_mib" in data else False)
    groups = [((str(p), str(kv), bool(b)), rows) for (p, kv, b), rows in data.groupby(["policy", "kv", "_bytes"])]
    return sorted(groups, key=lambda g: (method_style(g[0][0]).order, g[0][1], g[0][2]))


def _legend(ax: Axes, fig: Figure, tiny: bool) -> None:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, handlelength=3)
    if tiny:
        ax.set_title(RANDOM_WEIGHTS.capitalize(), fontsize=8, color="firebrick")


def _tiny(frame: pd.DataFrame) -> bool:
    return "model.tiny" in frame and bool(frame["model.tiny"].fillna(False).astype(bool).any())


def plot_accuracy_vs_budget(frame: pd.DataFrame, benchmark: str, score: str) -> Figure:
    """Score ``benchmark``/``score`` against ``budget_tokens`` for every method in the tidy ``frame``
    (:func:`plot_vs_budget`, each run's CI as a bar)."""
    if frame.empty:
        raise ValueError("no runs to plot")
    data = frame[(frame["benchmark"] == benchmark) & (frame["score"] == score) & frame["value"].notna()]
    if data.empty:
        raise ValueError(f"no {benchmark}/{score} values (scores there: {sorted(frame['score'].unique())})")
    return plot_vs_budget(data, accuracy_label(benchmark, score))


def plot_vs_budget(data: pd.DataFrame, ylabel: str, log_y: bool = False) -> Figure:
    """``value`` against ``budget_tokens``, one row of ``data`` a run (``policy``, ``kv``, optionally
    ``ci_low``/``ci_high`` and ``compress.budget_mib``): one line per method and storage over |M| (a colour per
    family, a marker per method, a line style per storage), joined in order of |M| (a cost such as the time to first
    token drawn on the x axis instead zig-zags, as a method's runs are not ordered by it), its CI as a bar (bands of
    many methods would cover each other). Runs whose budget was given in bytes (``compress.budget_mib``) are hollow
    markers on a line of their own, never joined to the token-budget line and not ticked on the axis: at equal bytes
    a low-bit cache holds more tokens, which is a different comparison. Runs without a budget are dotted horizontals.
    With ``log_y`` (a cost, not a score) the y axis is logarithmic where the values span more than :data:`LOG_SPAN`.
    Runs of random-weight models say so on the figure."""
    data = data[data["value"].notna()]
    if data.empty:
        raise ValueError(f"no run has a value of {ylabel}")
    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.subplots()
    tokens = data[data["compress.budget_mib"].isna()] if "compress.budget_mib" in data else data
    budgets = sorted(data["budget_tokens"].dropna().unique())
    ticks = sorted(tokens["budget_tokens"].dropna().unique()) or budgets  # equal-bytes points' tokens untagged
    storages = data["kv"].nunique()
    columns = [c for c in ("value", "ci_low", "ci_high") if c in data]
    for (policy, kv, by_bytes), series in _series(data):
        style, label = method_style(policy), _series_label(policy, kv, by_bytes, storages)
        points = series.dropna(subset=["budget_tokens"]).groupby("budget_tokens")[columns].mean()
        if not points.empty:
            ax.plot(
                points.index,
                points["value"].values,
                marker=style.marker,
                markerfacecolor="white" if by_bytes else style.colour,
                linestyle=STYLES.get(kv, "-"),
                linewidth=1.4,
                color=style.colour,
                label=label,
            )
            if "ci_low" in points and points["ci_low"].notna().all():
                error = [points["value"] - points["ci_low"], points["ci_high"] - points["value"]]
                ax.errorbar(
                    points.index,
                    points["value"],
                    yerr=error,
                    fmt="none",
                    ecolor=style.colour,
                    elinewidth=0.7,
                    capsize=2,
                )
        for value in series[series["budget_tokens"].isna()]["value"].unique():
            ax.axhline(value, linestyle=":", linewidth=1.2, color=style.colour, label=f"{label} (no budget)")
    if budgets:
        _log_if_spans(ax, budgets)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([_budget_label(b) for b in ticks])
    if log_y:
        _log_if_spans(ax, list(data["value"]), axis="y")
    ax.set_xlabel("|M| (tokens held per layer and KV head)")
    ax.set_ylabel(ylabel)
    _legend(ax, fig, _tiny(data))
    return fig


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """The runs no other run beats on both axes (a higher ``value`` at an ``x`` no larger), by increasing ``x``;
    a run whose accelerator peak exceeds its budget's bytes (``over_budget``) is never on it: it was not held to the
    memory it is compared at."""
    if "over_budget" in points:
        points = points[~points["over_budget"].astype(bool)]
    front, best = [], -float("inf")
    for _, point in points.sort_values(["x", "value"], ascending=[True, False]).iterrows():
        if point["value"] > best:
            front.append(point)
            best = point["value"]
    return pd.DataFrame(front)


#: The families a panel of their own shows; the full cache and the sliding window are drawn in every panel as the
#: references, and the other families' runs as grey points behind.
PANEL_FAMILIES = ("InfiniPot-V", "retrieval", "eviction")
REFERENCES = ("full cache", "sliding window")


def plot_accuracy_vs_metric(points: pd.DataFrame, benchmark: str, score: str, xlabel: str) -> Figure:
    """Score against a cost per run: ``points`` has ``policy``, ``kv``, ``x`` (the cost, lower is better),
    ``value`` and optionally ``ci_low``/``ci_high``, ``compress.budget_mib``. One line per method and storage, its
    runs (one per budget) joined in order of ``x``, each with its CI as a bar; runs at a budget in bytes are hollow
    markers on a line of their own. The Pareto front is a wide grey band behind. Where the runs span two or more of
    :data:`PANEL_FAMILIES`, each of those families gets a panel of its own (shared axes), the references in every
    panel and the other families' runs as grey points, so no panel draws more than a handful of lines. ``xlabel``
    says the cost in words (:func:`metric_label`); the x axis is logarithmic where the costs span more than 10x."""
    points = points.dropna(subset=["x", "value"])
    if points.empty:
        raise ValueError(f"no run has both {benchmark}/{score} and {xlabel}")
    family = points["policy"].map(lambda p: method_style(str(p)).family)
    panels = [f for f in PANEL_FAMILIES if (family == f).any()]
    if len(panels) < 2:
        panels = [None]
    fig = Figure(figsize=(6.5, 3.8) if panels == [None] else (3.6 * len(panels) + 1.0, 5.4), layout="constrained")
    axes = fig.subplots(1, len(panels), sharex=True, sharey=True, squeeze=False)[0]
    front = pareto_front(points)
    for ax, panel in zip(axes, panels):
        shown = points if panel is None else points[(family == panel) | family.isin(REFERENCES)]
        if panel is not None:
            behind = points[~((family == panel) | family.isin(REFERENCES))]
            ax.scatter(behind["x"], behind["value"], s=9, color="0.75", zorder=0, label="other methods")
            ax.set_title(panel if panel != "InfiniPot-V" else "InfiniPot-V and its ablations", fontsize=9)
        _draw_lines(ax, shown, points["kv"].nunique())
        ax.plot(front["x"], front["value"], color="0.6", linewidth=7, alpha=0.3, solid_capstyle="round", zorder=0)
        ax.plot([], [], color="0.6", linewidth=5, alpha=0.3, label="Pareto front")  # the band's legend entry
        _log_if_spans(ax, list(points["x"]))
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if panel is not None:
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, handlelength=2.5)
    has_ci = "ci_low" in points and points["ci_low"].notna().any()
    axes[0].set_ylabel(accuracy_label(benchmark, score) + (", 95% CI" if has_ci else ""))
    if panels == [None]:
        _legend(axes[0], fig, _tiny(points))
    elif _tiny(points):
        fig.suptitle(RANDOM_WEIGHTS.capitalize(), fontsize=8, color="firebrick")
    return fig


def _draw_lines(ax: Axes, points: pd.DataFrame, storages: int) -> None:
    """One line per (method, storage, budget in bytes) of ``points``, its runs joined in order of ``x``, with the
    runs' CIs as bars where ``points`` has them."""
    has_ci = "ci_low" in points and points["ci_low"].notna().any()
    for (policy, kv, by_bytes), series in _series(points):
        style = method_style(policy)
        series = series.sort_values("x")
        ax.plot(
            series["x"],
            series["value"],
            marker=style.marker,
            markerfacecolor="white" if by_bytes else style.colour,
            linestyle=STYLES.get(kv, "-"),
            linewidth=1.4,
            color=style.colour,
            label=_series_label(policy, kv, by_bytes, storages),
        )
        if has_ci:
            error = [series["value"] - series["ci_low"], series["ci_high"] - series["value"]]
            ax.errorbar(
                series["x"], series["value"], yerr=error, fmt="none", ecolor=style.colour, elinewidth=0.7, capsize=2
            )


def plot_table_columns(points: pd.DataFrame, ylabel: str) -> Figure:
    """One table's score columns side by side (the robustness table's settings): ``points`` has ``row`` (the row's
    name), ``policy``, ``kv``, ``column`` (in the table's order), ``value`` and ``ci_low``/``ci_high``. One line per
    row across the columns, drawn as its method is everywhere, its 95% CI as bars, the rows nudged apart so that the
    bars do not hide each other: a method whose rank holds on every column keeps its place, one that falls shows it."""
    points = points.dropna(subset=["value"])
    if points.empty:
        raise ValueError("no row has a value in the table's score columns")
    columns = list(dict.fromkeys(points["column"]))
    rows = list(dict.fromkeys(points["row"]))
    fig = Figure(figsize=(7.0, 4.2))
    ax = fig.subplots()
    width = 0.5 / max(len(rows), 1)
    for i, row in enumerate(rows):
        line = points[points["row"] == row]
        first = line.iloc[0]
        style = method_style(str(first["policy"]))
        x = [columns.index(c) + (i - (len(rows) - 1) / 2) * width for c in line["column"]]
        ax.plot(
            x,
            line["value"],
            marker=style.marker,
            color=style.colour,
            linestyle=STYLES.get(str(first["kv"]), "-"),
            linewidth=1.0,
            markersize=4,
            label=row,
        )
        ax.errorbar(
            x,
            line["value"],
            yerr=[line["value"] - line["ci_low"], line["ci_high"] - line["value"]],
            fmt="none",
            ecolor=style.colour,
            elinewidth=0.6,
            capsize=1.5,
        )
    ax.set_xticks(range(len(columns)), columns)
    ax.set_ylabel(ylabel + ", 95% CI")
    _legend(ax, fig, False)
    return fig


def plot_arrows(pairs: pd.DataFrame, ylabel: str, start: str, end: str) -> Figure:
    """What a change of setting did to each method: ``pairs`` has ``policy``, ``kv``, ``budget_tokens``, ``start``
    and ``end`` (the two runs' scores, e.g. at the upstream split and tuned). A panel per |M| (shared y), a method a
    column in the field's order, a hollow marker at ``start`` and an arrow to a filled one at ``end`` in the
    method's colour; the legend says which end is which (``start`` and ``end`` in words)."""
    pairs = pairs.dropna(subset=["start", "end"])
    if pairs.empty:
        raise ValueError(f"no method has both a {start} and a {end} run")
    budgets = sorted(pairs["budget_tokens"].dropna().unique()) + ([None] if pairs["budget_tokens"].isna().any() else [])
    methods = sorted(
        {(str(p), str(kv)) for p, kv in zip(pairs["policy"], pairs["kv"])},
        key=lambda m: (method_style(m[0]).order, m[1]),
    )
    storages = len({kv for _, kv in methods})
    fig = Figure(figsize=(max(4.5, 1.6 + 0.45 * len(methods) * len(budgets)), 4.0), layout="constrained")
    axes = fig.subplots(1, len(budgets), sharey=True, squeeze=False)[0]
    for ax, budget in zip(axes, budgets):
        shown = pairs[pairs["budget_tokens"].isna() if budget is None else pairs["budget_tokens"] == budget]
        for x, (policy, kv) in enumerate(methods):
            row = shown[(shown["policy"] == policy) & (shown["kv"] == kv)]
            if row.empty:
                continue
            first, last, style = float(row["start"].iloc[0]), float(row["end"].iloc[0]), method_style(policy)
            ax.annotate(
                "",
                xy=(x, last),
                xytext=(x, first),
                arrowprops={"arrowstyle": "-|>", "color": style.colour, "linewidth": 1.4, "shrinkA": 3, "shrinkB": 3},
            )
            ax.plot([x], [first], marker=style.marker, markerfacecolor="white", color=style.colour, linestyle="")
            ax.plot([x], [last], marker=style.marker, color=style.colour, linestyle="")
        names = [method_style(p).name + (f" {kv.upper()}" if storages > 1 else "") for p, kv in methods]
        ax.set_xticks(range(len(methods)), names, rotation=45, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(methods) - 0.4)
        ax.set_title("no budget" if budget is None else f"|M| = {_budget_label(budget)}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel(ylabel)
    axes[-1].plot([], [], marker="o", markerfacecolor="white", color="0.3", linestyle="", label=start)
    axes[-1].plot([], [], marker="o", color="0.3", linestyle="", label=end)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    if _tiny(pairs):
        fig.suptitle(RANDOM_WEIGHTS.capitalize(), fontsize=8, color="firebrick")
    return fig


def run_label(run: Run) -> str:
    """A run's name in a figure: its method as the papers name it, its storage and its budget (``InfiniPot-V FP16,
    |M| = 6K``, ``Full KV FP16, no budget``)."""
    f = run.fields
    budget = f"|M| = {_budget_label(f['budget_tokens'])}" if f["budget_tokens"] is not None else "no budget"
    return f"{method_style(str(f['policy'])).name} {str(f['kv']).upper()}, {budget}"


def _trace_order(run: Run) -> tuple[tuple[int, int], str, float]:
    """A run's place in the memory figure: its method's, its storage, its budget (none last)."""
    budget = run.fields["budget_tokens"]
    return method_style(str(run.fields["policy"])).order, str(run.fields["kv"]), float(budget or "inf")


def plot_memory_trace(runs: Sequence[Run], video_id: str | None = None) -> Figure:
    """KV cache size (MiB) against frames streamed, one line per run (drawn as its method is everywhere, one
    method's budgets in shades of its colour, the largest darkest), for ``video_id`` (default: the longest video every
    run streamed, the first by id among equals)."""
    traces = {run.id: run.memory() for run in runs}
    traces = {k: v for k, v in traces.items() if not v.empty}
    if not traces:
        raise ValueError("none of the runs has a memory.jsonl trace")
    if video_id is None:
        common = set.intersection(*(set(t["video_id"]) for t in traces.values()))
        if not common:
            raise ValueError("the runs streamed no video in common; pass video_id")
        first = next(iter(traces.values()))
        video_id = first[first["video_id"].isin(common)].groupby("video_id")["frames_seen"].max().idxmax()
    fig = Figure(figsize=(6.5, 3.4))
    ax = fig.subplots()
    drawn = sorted((r for r in runs if r.id in traces), key=_trace_order)
    for run in drawn:
        trace = traces[run.id]
        style = method_style(str(run.fields["policy"]))
        steps = trace[trace["video_id"] == video_id].sort_values("step")
        # one method's budgets in shades of its family's colour, the largest darkest
        budgets = sorted({_trace_order(r)[2] for r in drawn if _trace_order(r)[:2] == _trace_order(run)[:2]})
        lighter = 0.6 * (len(budgets) - 1 - budgets.index(_trace_order(run)[2])) / max(len(budgets) - 1, 1)
        # markers: a run with one step (a short video, one chunk) is a single point, invisible as a bare line
        ax.plot(
            steps["frames_seen"],
            steps["cache_bytes"] / 2**20,
            marker=style.marker,
            markersize=3,
            color=tuple(c + (1 - c) * lighter for c in to_rgb(style.colour)),
            linestyle=STYLES.get(str(run.fields["kv"]), "-"),
            label=run_label(run),
        )
    ax.set_xlabel("frames streamed")
    ax.set_ylabel("KV cache (MiB)")
    ax.set_title(f"video {video_id}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, handlelength=3)
    return fig
