"""Figures from the tidy frame and the memory traces (matplotlib, saved as PNG + PDF).

- accuracy vs budget: one line per (policy, kv) over |M| (colour: policy, line style: storage), with its 95% CI as
  a band where the frame has ``ci_low``/``ci_high``; runs with a budget in bytes as hollow squares of their own;
  runs without a budget (full KV) as dotted horizontals; the legend outside the axes.
- accuracy vs a measurement (accelerator bytes, time to first token...): one point per run, its 95% CI as a vertical
  bar, the Pareto front (no other run is both better and cheaper) joined by a dashed line.
- KV memory vs frames streamed: ``cache_bytes`` from ``memory.jsonl`` for one video, one line per run, which shows
  full KV growing with the stream and a compressed cache held at its budget, FP16 above INT4.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure  # figures built without pyplot: no global state, no display backend needed
from matplotlib.ticker import FixedLocator, NullLocator

from infinipotv.results.collect import Run
from infinipotv.results.tables import RANDOM_WEIGHTS

STYLES = {"fp16": "-", "bf16": "-", "int8": "-.", "int4": "--", "int2": ":"}  # line style per storage (kv)


def save_figure(fig: Figure, stem: str | Path) -> list[Path]:
    """``stem.png`` (200 dpi) and ``stem.pdf``."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=200, bbox_inches="tight")
    return paths


def _budget_label(tokens: float) -> str:
    return f"{tokens / 1000:g}K" if tokens >= 1000 else f"{tokens:g}"


def plot_accuracy_vs_budget(frame: pd.DataFrame, benchmark: str, score: str) -> Figure:
    """Score ``benchmark``/``score`` against ``budget_tokens`` for every (policy, kv) in the tidy ``frame``.

    One colour per policy, one line style per storage (FP16 solid, INT4 dashed...), so a policy's storages sit
    side by side where both were run. Runs whose budget was given in bytes (``compress.budget_mib``) are hollow
    squares labelled with their MiB, never joined to the token-budget line: at equal bytes a low-bit cache holds
    more tokens, which is a different comparison. The legend sits outside the axes; runs of random-weight models
    say so on the figure."""
    if frame.empty:
        raise ValueError("no runs to plot")
    data = frame[(frame["benchmark"] == benchmark) & (frame["score"] == score) & frame["value"].notna()]
    if data.empty:
        raise ValueError(f"no {benchmark}/{score} values (scores there: {sorted(frame['score'].unique())})")
    data = data.assign(_mib=data["compress.budget_mib"] if "compress.budget_mib" in data else float("nan"))
    fig = Figure(figsize=(6.5, 3.4))
    ax = fig.subplots()
    budgets = sorted(data["budget_tokens"].dropna().unique())
    policies = sorted(data["policy"].unique())
    palette = colormaps["tab10" if len(policies) <= 10 else "tab20"].colors
    colour = {p: palette[i % len(palette)] for i, p in enumerate(policies)}
    columns = [c for c in ("value", "ci_low", "ci_high") if c in data]
    for (policy, kv), series in data.groupby(["policy", "kv"], sort=True):
        tokens = series[series["_mib"].isna()]
        with_budget = tokens.dropna(subset=["budget_tokens"]).groupby("budget_tokens")[columns].mean()
        if not with_budget.empty:
            ax.plot(
                with_budget.index,
                with_budget["value"].values,
                marker="o",
                linestyle=STYLES.get(kv, "-"),
                color=colour[policy],
                label=f"{policy} ({kv})",
            )
            if "ci_low" in with_budget and with_budget["ci_low"].notna().all():
                ax.fill_between(
                    with_budget.index,
                    with_budget["ci_low"],
                    with_budget["ci_high"],
                    color=colour[policy],
                    alpha=0.12,
                    linewidth=0,
                )
        for mib, points in series[series["_mib"].notna()].groupby("_mib"):
            at = points.groupby("budget_tokens")["value"].mean()
            ax.plot(
                at.index,
                at.values,
                marker="s",
                markerfacecolor="none",
                linestyle="none",
                color=colour[policy],
                label=f"{policy} ({kv}, equal bytes: {mib:g} MiB)",
            )
        for value in tokens[tokens["budget_tokens"].isna()]["value"].unique():
            ax.axhline(value, linestyle=":", linewidth=1, color=colour[policy], label=f"{policy} ({kv}), no budget")
    if budgets:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(budgets))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([_budget_label(b) for b in budgets])
    ax.set_xlabel("vision tokens held, |M| (per layer per KV head)")
    ax.set_ylabel(f"{benchmark} {score}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    if "model.tiny" in data and data["model.tiny"].fillna(False).astype(bool).any():
        ax.set_title(RANDOM_WEIGHTS.capitalize(), fontsize=8, color="firebrick")
    return fig


MARKERS = {"fp16": "o", "bf16": "o", "int8": "^", "int4": "s", "int2": "D"}  # marker per storage (kv)


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """The runs no other run beats on both axes (a higher ``value`` at an ``x`` no larger), by increasing ``x``."""
    front, best = [], -float("inf")
    for _, point in points.sort_values(["x", "value"], ascending=[True, False]).iterrows():
        if point["value"] > best:
            front.append(point)
            best = point["value"]
    return pd.DataFrame(front)


def plot_accuracy_vs_metric(points: pd.DataFrame, benchmark: str, score: str, xlabel: str) -> Figure:
    """Score against a cost per run: ``points`` has ``label``, ``policy``, ``kv``, ``x`` (the cost, lower is
    better), ``value`` and optionally ``ci_low``/``ci_high``. Colour per policy, marker per storage, every point
    labelled (budget and storage tell apart one policy's runs); the Pareto front is the dashed line. A log x axis
    where the costs span more than 8x."""
    points = points.dropna(subset=["x", "value"])
    if points.empty:
        raise ValueError(f"no run has both {benchmark}/{score} and {xlabel}")
    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.subplots()
    policies = sorted(points["policy"].unique())
    palette = colormaps["tab10" if len(policies) <= 10 else "tab20"].colors
    colour = {p: palette[i % len(palette)] for i, p in enumerate(policies)}
    has_ci = "ci_low" in points and points["ci_low"].notna().any()
    for policy, series in points.groupby("policy", sort=True):
        for kv, group in series.groupby("kv", sort=True):
            error = [group["value"] - group["ci_low"], group["ci_high"] - group["value"]] if has_ci else None
            ax.errorbar(
                group["x"],
                group["value"],
                yerr=error,
                fmt=MARKERS.get(kv, "o"),
                color=colour[policy],
                capsize=2,
                elinewidth=0.8,
                label=f"{policy} ({kv})",
            )
    for _, point in points.iterrows():
        ax.annotate(point["label"], (point["x"], point["value"]), fontsize=5, xytext=(3, 3), textcoords="offset points")
    front = pareto_front(points)
    ax.plot(front["x"], front["value"], linestyle="--", color="0.4", linewidth=1, label="Pareto front", zorder=0)
    if points["x"].max() > 8 * points["x"].min() > 0:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{benchmark} {score}" + (" (95% CI)" if has_ci else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    if "model.tiny" in points and points["model.tiny"].fillna(False).astype(bool).any():
        ax.set_title(RANDOM_WEIGHTS.capitalize(), fontsize=8, color="firebrick")
    return fig


def run_label(run: Run) -> str:
    """``policy kv budget`` (the budget as 6K, or ``no budget``): a run's name in a figure."""
    f = run.fields
    budget = _budget_label(f["budget_tokens"]) if f["budget_tokens"] is not None else "no budget"
    return f"{f['policy']} {f['kv']} {budget}"


def plot_memory_trace(runs: Sequence[Run], video_id: str | None = None) -> Figure:
    """KV cache size (MiB) against frames streamed, one line per run, for ``video_id`` (default: the longest video
    every run streamed)."""
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
    for run in runs:
        trace = traces.get(run.id)
        if trace is None:
            continue
        steps = trace[trace["video_id"] == video_id].sort_values("step")
        # markers: a run with one step (a short video, one chunk) is a single point, invisible as a bare line
        ax.plot(steps["frames_seen"], steps["cache_bytes"] / 2**20, marker="o", markersize=3, label=run_label(run))
    ax.set_xlabel("frames streamed")
    ax.set_ylabel("KV cache (MiB)")
    ax.set_title(f"video {video_id}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig
