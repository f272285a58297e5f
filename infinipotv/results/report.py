"""One experiment's outputs: its tables (markdown, LaTeX), the tidy CSV/JSON with statistics, and its figures.

Everything here is generated from the run directories and ``experiments/NAME.yaml``'s ``table`` block; nothing is
typed by hand. Statistics are always computed (they go in the CSV/JSON); ``stats=True`` also prints them in tables.
Nothing is written when no run matches the experiment, when the spec names a key no run has, or when runs of one
config were made by different code (unless ``allow_mixed=True``); outputs already in the output folder (committed
tables, an earlier report) are replaced only with ``force=True``, and then whole: the report is built beside the
folder and moved in only once every file of it is written.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from infinipotv.results.checks import check_spec, mixed_code
from infinipotv.results.collect import Run, load_runs, runs_frame
from infinipotv.results.figures import (
    accuracy_label,
    metric_label,
    plot_accuracy_vs_budget,
    plot_accuracy_vs_metric,
    plot_arrows,
    plot_memory_trace,
    plot_table_columns,
    plot_vs_budget,
    save_figure,
)
from infinipotv.results.published import load_published
from infinipotv.results.render import to_latex, to_markdown
from infinipotv.results.spec import AutoRows, ExperimentSpec, FigureSpec, SpecError, parse_experiment
from infinipotv.results.stats import N_BOOT, SEED, score_ci
from infinipotv.results.tables import (
    MixedRunsError,
    Table,
    add_stats,
    build_table,
    find_row,
    matches,
    metric_value,
    table_frame,
)

FORMATS = ("md", "tex")
RUNS_ROOT = Path("results/runs")  # where `+experiment=NAME` sweeps write their runs: RUNS_ROOT/NAME


class NothingToReport(ValueError):
    """No run matches the experiment: an error, never a set of empty tables."""


class OutputExists(FileExistsError):
    """The output folder already holds this experiment's outputs and ``force`` was not given."""


@dataclass
class Report:
    """What :func:`build_report` produced: the built tables, the written files and the notes worth reading."""

    tables: list[Table]
    out: Path
    n_runs: int = 0  # runs behind the tables' cells
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def experiment_file(experiment: str | Path, experiments_dir: str | Path = "experiments") -> Path:
    """``experiments/NAME.yaml`` for a name, or the path itself when it is a file."""
    path = Path(experiment)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    path = Path(experiments_dir) / f"{experiment}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in Path(experiments_dir).glob("*.yaml"))
        raise FileNotFoundError(f"no experiment file {path}; known experiments: {known}")
    return path


def read_experiment(path: Path) -> dict:
    """An experiment file as a mapping (interpolations unresolved), or one ValueError line naming the file: run.py
    reads it before Hydra composes it, the aggregator for its table block."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as err:  # YAML syntax, tags (never constructed), bad encoding
        raise ValueError(f"{path}: not a readable experiment file ({type(err).__name__}: {' '.join(str(err).split())})")
    if not isinstance(config, dict):
        raise ValueError(f"{path}: an experiment file must be a mapping, not a {type(config).__name__}")
    return config


def load_experiment(path: Path) -> tuple[str, ExperimentSpec]:
    """The experiment's name (its ``experiment:`` key, else the file stem) and its parsed table block."""
    config = read_experiment(path)
    return str(config.get("experiment") or path.stem), parse_experiment(config.get("table"), f"{path}: table")


def studies(name: str, spec: ExperimentSpec) -> list[str]:
    """The study folders (``results/runs/NAME``) a report reads by default: the experiment's own, then every
    experiment its rows, columns and figures name in a filter (the robustness table's default column reads the fair
    study's runs). Never all of ``results/runs``: a reader's own runs there would replace the committed cells."""
    filters = [f.where for f in spec.figures or ()]
    for table in spec.tables:
        filters += [c.where for c in table.columns]
        if isinstance(table.rows, AutoRows):
            filters.append(table.rows.where)
        else:
            filters += [r.match for r in table.rows if r.match is not None]
    named = [v for f in filters for v in _as_list(f.get("experiment")) if v is not None]
    return list(dict.fromkeys([name, *map(str, named)]))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _default_figures(tables: Sequence[Table]) -> list[FigureSpec]:
    """Accuracy vs budget for every score column whose runs span 2+ budgets; a memory trace per benchmark."""
    figures: dict[tuple[str, str | None, str | None], FigureSpec] = {}
    for table in tables:
        for column in table.spec.columns:
            runs = [r.runs[column.key] for r in table.rows if column.key in r.runs]
            budgets = {run.fields["budget_tokens"] for run in runs}
            if column.score is not None and len(budgets - {None}) >= 2:
                figures.setdefault(
                    ("accuracy_vs_budget", column.benchmark, column.score),
                    FigureSpec("accuracy_vs_budget", column.benchmark, column.score),
                )
            if runs:
                figures.setdefault(
                    ("memory_trace", column.benchmark, None), FigureSpec("memory_trace", column.benchmark)
                )
    return list(figures.values())


def _used_runs(tables: Sequence[Table]) -> list[Run]:
    return list({run.id: run for t in tables for row in t.rows for run in row.runs.values()}.values())


def _table_points(table: Table) -> pd.DataFrame:
    """A table's score cells as the table figure's points: each run row's value and its run's own 95% CI."""
    points = []
    for row in table.rows:
        for column, cell in zip(table.spec.columns, row.cells):
            if row.published or column.score is None or cell.missing:
                continue
            low, high = score_ci(row.runs[column.key], [column.score]).get(column.score, (cell.value, cell.value))
            points.append(
                {
                    "row": " ".join(s for s in row.stub if s),
                    "policy": row.fields.get("policy"),
                    "kv": row.fields.get("kv"),
                    "column": column.label,
                    "value": cell.value,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    return pd.DataFrame(points)


def _draw(
    figure: FigureSpec,
    frame: pd.DataFrame,
    runs: Sequence[Run],
    out: Path,
    notes: list[str],
    tables: Sequence[Table] = (),
) -> list[Path]:
    """One figure's PNG + PDF; a figure the data cannot support becomes a note, not a failed report."""
    if figure.kind == "table":
        table = next(t for t in tables if t.spec.name == figure.table)
        first = next((c for c in table.spec.columns if c.score is not None), None)
        try:
            if first is None:
                raise ValueError("the table has no score column")
            fig = plot_table_columns(_table_points(table), accuracy_label(first.benchmark, str(first.score)))
        except ValueError as err:
            notes.append(f"figure table {figure.table}: {err}")
            return []
        return save_figure(fig, out / figure.stem())
    if figure.where:
        runs = [r for r in runs if matches(r.fields, figure.where)]
        frame = frame[frame["run"].isin({r.id for r in runs})]
    try:
        if figure.kind == "accuracy_vs_budget":
            fig = plot_accuracy_vs_budget(
                _with_ci(frame, runs, figure.benchmark, figure.score), figure.benchmark, figure.score
            )
        elif figure.kind == "arrows":
            fig = plot_arrows(
                _pairs(figure, frame, runs, notes),
                accuracy_label(str(figure.benchmark), str(figure.score)),
                _words(figure.start),
                _words(figure.end),
            )
        elif figure.kind == "metric_vs_budget":
            fig = plot_vs_budget(
                _metric_points(figure, frame, runs, notes), metric_label(str(figure.metric), figure.scale), log_y=True
            )
        elif figure.kind == "accuracy_vs_metric":
            points = _points(figure, frame, runs, notes)
            fig = plot_accuracy_vs_metric(
                points, figure.benchmark, figure.score, metric_label(str(figure.metric), figure.scale)
            )
        else:
            fig = plot_memory_trace([r for r in runs if figure.benchmark in (None, r.fields["benchmark"])])
    except ValueError as err:
        notes.append(f"figure {figure.kind} {figure.benchmark or ''}: {err}")
        return []
    return save_figure(fig, out / figure.stem())


def _points(figure: FigureSpec, frame: pd.DataFrame, runs: Sequence[Run], notes: list[str]) -> pd.DataFrame:
    """One point per run of the figure's benchmark: its score with its 95% CI, and the metric (times its scale)."""
    data = _with_ci(frame, runs, figure.benchmark, figure.score)
    data = data[(data["benchmark"] == figure.benchmark) & (data["score"] == figure.score)].copy()
    by_id = {r.id: r for r in runs}
    x = {run: metric_value(by_id[run], figure.metric, notes) for run in data["run"]}
    data["x"] = [None if x[run] is None else x[run] * figure.scale for run in data["run"]]
    return data


def _pairs(figure: FigureSpec, frame: pd.DataFrame, runs: Sequence[Run], notes: list[str]) -> pd.DataFrame:
    """The arrows' ends: per (method, storage, |M|), the score of the run matching ``from`` and of the one matching
    ``to``; a method with several runs at one end is noted and drawn from none (which would it be?)."""
    scores = frame[(frame["benchmark"] == figure.benchmark) & (frame["score"] == figure.score)]
    value = dict(zip(scores["run"], scores["value"]))
    ends: dict[tuple[str, str, Any], dict[str, list[float]]] = {}
    for run in runs:
        if run.id not in value:
            continue
        key = (str(run.fields["policy"]), str(run.fields["kv"]), run.fields["budget_tokens"])
        for end, where in (("start", figure.start), ("end", figure.end)):
            if matches(run.fields, where):
                ends.setdefault(key, {"start": [], "end": []})[end].append(value[run.id])
    rows = []
    for (policy, kv, budget), found in ends.items():
        if len(found["start"]) > 1 or len(found["end"]) > 1:
            notes.append(f"figure {figure.stem()}: {policy} {kv} at {budget}: several runs at one end; not drawn")
            continue
        if found["start"] and found["end"]:
            rows.append(
                {
                    "policy": policy,
                    "kv": kv,
                    "budget_tokens": budget,
                    "start": found["start"][0],
                    "end": found["end"][0],
                }
            )
    return pd.DataFrame(rows, columns=["policy", "kv", "budget_tokens", "start", "end"])


def _words(where: dict[str, Any]) -> str:
    """An arrow end's runs in words for the legend: the value of a one-key end (``upstream``), else each key and
    value (``label upstream, kv fp16``)."""
    if len(where) == 1:
        return str(next(iter(where.values())))
    return ", ".join(f"{key} {value}" for key, value in where.items())


def _metric_points(figure: FigureSpec, frame: pd.DataFrame, runs: Sequence[Run], notes: list[str]) -> pd.DataFrame:
    """One point per run of the figure's benchmark: its metric (times its scale) as ``value``, no CI."""
    data = frame[frame["benchmark"] == figure.benchmark].drop_duplicates("run").drop(columns=["score"]).copy()
    by_id = {r.id: r for r in runs}
    values = {run: metric_value(by_id[run], str(figure.metric), notes) for run in data["run"]}
    data["value"] = [None if values[run] is None else values[run] * figure.scale for run in data["run"]]
    return data.drop(columns=[c for c in ("ci_low", "ci_high") if c in data])


def _with_ci(frame: pd.DataFrame, runs: Sequence[Run], benchmark: str, score: str) -> pd.DataFrame:
    """``frame`` with each run's own 95% CI on ``benchmark``/``score`` (``ci_low``, ``ci_high``; the bands)."""
    cis = {r.id: score_ci(r, [score]).get(score) for r in runs if r.fields["benchmark"] == benchmark}
    frame = frame.copy()
    missing = (float("nan"), float("nan"))
    frame["ci_low"] = [(cis.get(run) or missing)[0] for run in frame["run"]]
    frame["ci_high"] = [(cis.get(run) or missing)[1] for run in frame["run"]]
    return frame


def _baseline_for(table: Table, baseline: str | None, notes: list[str]) -> str | None:
    """The CLI's baseline where the table has that row; otherwise the table's own default (noted)."""
    if baseline is None:
        return None
    try:
        return find_row(table, baseline).id
    except SpecError:
        notes.append(f"table {table.spec.name!r} has no row {baseline!r}; its baseline is the table's default")
        return None


def _existing_outputs(out: Path, spec: ExperimentSpec) -> list[str]:
    """The files of this experiment's report already in ``out``, in any format (what writing it would replace)."""
    names = [f"{t.name}.{ext}" for t in spec.tables for ext in (*FORMATS, "csv", "json")] + ["runs.csv", "runs.json"]
    found = [name for name in names if (out / name).exists()]
    figures = out / "figures"
    return found + ([f"figures/ ({len(list(figures.iterdir()))} files)"] if figures.is_dir() else [])


def _no_match(name: str, runs_dir: str | Path, runs: Sequence[Run], model: str | None) -> NothingToReport:
    found = sorted({str(r.fields["experiment"] or "none") for r in runs})
    models = sorted({str(r.fields["model"]) for r in runs})
    there = (
        f"{len(runs)} runs there (experiments: {', '.join(found)}; models: {', '.join(models)})"
        if runs
        else "no run there"
    )
    only = f" of model {model}" if model else ""
    return NothingToReport(
        f"no run{only} under {runs_dir} matches experiment {name} ({there}): run its sweep first "
        f"(python run.py -m +experiment={name}) or pass --runs with the folder that holds its runs"
    )


def build_report(
    experiment: str | Path,
    runs_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    formats: Sequence[str] = FORMATS,
    stats: bool = False,
    baseline: str | None = None,
    show_n: bool = False,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    experiments_dir: str | Path = "experiments",
    model: str | None = None,
    force: bool = False,
    allow_mixed: bool = False,
) -> Report:
    """Build and write every table of ``experiment`` from the runs under ``runs_dir`` (default: its study folders
    under ``results/runs``, :func:`studies`; only ``model``'s runs, if given) into ``out_dir`` (default
    ``results/NAME/``). Raises :class:`NothingToReport` when no run matches, :class:`OutputExists` when ``out_dir``
    already holds the report, unless ``force``, and
    :class:`~infinipotv.results.tables.MixedRunsError` when runs of one config were made by different code, unless
    ``allow_mixed``. The report is written whole or not at all: built in a folder beside ``out_dir``, then moved in
    (:func:`_move_in`), so a failure leaves an earlier report as it was."""
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"--format: unknown format(s) {sorted(unknown)}; choose from {list(FORMATS)}")
    name, spec = load_experiment(experiment_file(experiment, experiments_dir))
    out = Path(out_dir) if out_dir is not None else Path("results") / name
    if runs_dir is None:
        runs_dir = RUNS_ROOT
        runs = load_runs(RUNS_ROOT, studies(name, spec))
    else:
        runs = load_runs(runs_dir)
    chosen = [r for r in runs if model is None or r.fields["model"] == model]
    notes = check_spec(spec, chosen)
    mixed = mixed_code(spec, chosen, name)
    if mixed and not allow_mixed:
        raise MixedRunsError(
            f"{mixed[0]}{f' (and {len(mixed) - 1} more such pairs)' if len(mixed) > 1 else ''}: rerun one at the "
            f"other's code, move one out of the runs folder, or pass --allow-mixed to use them (the table's note "
            f"names the run it shows)"
        )
    published = load_published()
    report = Report([build_table(t, chosen, published, name) for t in spec.tables], out, notes=notes)
    report.n_runs = len(_used_runs(report.tables))
    if not report.n_runs and any(t.source is None for t in spec.tables):
        raise _no_match(name, runs_dir, runs, model)
    existing = _existing_outputs(out, spec)
    if existing and not force:
        raise OutputExists(
            f"{out} already holds this report ({', '.join(existing[:4])}"
            f"{', ...' if len(existing) > 4 else ''}): pass --force to replace it, or --out DIR to "
            f"write elsewhere"
        )
    building = _building(out)
    try:
        _write(report, spec, building, formats, stats, baseline, show_n, n_boot, seed, name)
        _move_in(building, out, spec)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    report.files = [out / path.relative_to(building) for path in report.files]
    return report


def _write(
    report: Report,
    spec: ExperimentSpec,
    out: Path,
    formats: Sequence[str],
    stats: bool,
    baseline: str | None,
    show_n: bool,
    n_boot: int,
    seed: int,
    name: str,
) -> None:
    """Every file of the report into ``out`` (a fresh folder), with its statistics and figures."""
    renderers = {"md": to_markdown, "tex": to_latex}
    matched = False
    for table in report.tables:
        if table.frame is None and table.spec.source is not None:
            continue  # a generated table whose module is not installed (warned)
        if table.rows:
            chosen = _baseline_for(table, baseline, report.notes)
            matched = matched or chosen is not None
            add_stats(table, chosen, n_boot, seed)
        for fmt in formats:
            path = out / f"{table.spec.name}.{fmt}"
            path.write_text(renderers[fmt](table, show_n=show_n, show_stats=stats))
            report.files.append(path)
        frame = table_frame(table)
        frame.to_csv(out / f"{table.spec.name}.csv", index=False)
        (out / f"{table.spec.name}.json").write_text(frame.to_json(orient="records", indent=1))
        report.files += [out / f"{table.spec.name}.csv", out / f"{table.spec.name}.json"]
        report.notes += table.notes
    if baseline and not matched:
        raise SpecError(f"--baseline {baseline!r} matches no run row of any table of {name}")
    used = _used_runs(report.tables)
    tidy = runs_frame(used)
    tidy.to_csv(out / "runs.csv", index=False)
    (out / "runs.json").write_text(tidy.to_json(orient="records", indent=1))
    report.files += [out / "runs.csv", out / "runs.json"]
    for figure in spec.figures if spec.figures is not None else _default_figures(report.tables):
        report.files += _draw(figure, tidy, used, out / "figures", report.notes, report.tables)


def _building(out: Path) -> Path:
    """A new folder to build the report in, on the disk of ``out`` (so that moving it in is renaming): inside ``out``
    when it exists (its parent may not be ours to write), else beside it (``out`` is then this folder renamed)."""
    tag = uuid.uuid4().hex[:8]
    if out.is_dir():
        building = out / f".report.{tag}.partial"
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        building = out.parent / f".{out.name}.{tag}.partial"
    building.mkdir()
    return building


def _move_in(built: Path, out: Path, spec: ExperimentSpec) -> None:
    """The report built in ``built`` in place of the one in ``out``: a new ``out`` is the built folder renamed (one
    step); into an existing one each file is renamed over its old self, its figures folder replaced whole, and a
    table's file in a format this report did not write (``t.md`` beside a new ``t.tex``) removed, so the report is
    replaced whole. Other files in ``out`` stay."""
    if not out.exists():
        built.rename(out)
        return
    stale = _stale({path.name for path in built.iterdir()}, spec)
    old_figures = built / ".old-figures"
    if (out / "figures").is_dir():
        (out / "figures").rename(old_figures)
    for path in sorted(built.iterdir()):
        if path != old_figures:
            path.replace(out / path.name)
    for name in stale:
        (out / name).unlink(missing_ok=True)


def _stale(written: set[str], spec: ExperimentSpec) -> list[str]:
    """The files of an earlier report that one writing ``written`` replaces without writing them again: a table's
    other formats (a generated table this report skipped, its module not installed, keeps its files)."""
    return [
        f"{t.name}.{ext}"
        for t in spec.tables
        if f"{t.name}.csv" in written
        for ext in FORMATS
        if f"{t.name}.{ext}" not in written
    ]
