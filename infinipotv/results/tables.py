"""A table spec + runs + published rows -> a :class:`Table` of cells: values, n, partial flags, bold, statistics.

Rendering (markdown, LaTeX) lives in :mod:`infinipotv.results.render`; this module decides what every cell holds.
Bold is computed on the displayed (rounded) values among comparable run rows, so ties at the printed precision are
all bold; reference rows are never part of it, and a partial cell only competes when no complete cell does.

A table never mixes models silently: unless its rows are keyed by ``model`` (``rows.by`` or every row's ``match``),
all the runs it may draw on must come from one model, which the caption then names; a paired statistic needs both
runs asked the same questions (the same benchmark selection), else it is left out with a note.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from infinipotv.results.collect import Run, code_differences
from infinipotv.results.generated import call_source
from infinipotv.results.published import same_value, select
from infinipotv.results.scoring import ScorerError, flatten_scores
from infinipotv.results.spec import PUBLISHED_FIELDS, AutoRows, SpecError, TableSpec
from infinipotv.results.stats import N_BOOT, SEED, PairedStat, kendall_tau_b, paired_differences

Names = Mapping[str, Mapping[str, str]]


@dataclass
class Cell:
    value: float | None = None
    n: int | None = None
    partial: bool = False
    bold: bool = False
    stat: PairedStat | None = None

    @property
    def missing(self) -> bool:
        return self.value is None


@dataclass
class Row:
    id: str
    stub: tuple[str, ...]
    fields: dict[str, Any]
    runs: dict[str, Run] = field(default_factory=dict)  # benchmark -> the run behind this row's cells
    source: str | None = None  # published source; None for a run row
    cells: list[Cell] = field(default_factory=list)

    @property
    def published(self) -> bool:
        return self.source is not None


#: What a caption (and a figure) says of runs of the tiny models.
RANDOM_WEIGHTS = "seeded random weights: the scores check the pipeline, not a method"


@dataclass
class Table:
    spec: TableSpec
    rows: list[Row] = field(default_factory=list)
    baseline: str | None = None  # row id the statistics compare against
    n_boot: int = N_BOOT  # bootstrap resamples behind the statistics
    frame: pd.DataFrame | None = None  # a generated (``source``) table
    footnotes: list[str] = field(default_factory=list)  # text that came with a generated table
    notes: list[str] = field(default_factory=list)  # choices made while building (ambiguous runs...)
    choices: list[str] = field(default_factory=list)  # the run used where several fit a row (CHOICE_RULE)
    models: list[str] = field(default_factory=list)  # the models of the runs the rows may draw on
    random_weights: bool = False  # some of those runs are tiny models (seeded random weights)
    taus: dict[int, tuple[float | None, int]] = field(default_factory=dict)  # column -> (tau vs spec.tau, rows)
    unpaired: list[str] = field(default_factory=list)  # rows asked other questions than the baseline: no Δ

    @property
    def caption(self) -> str:
        """The spec's caption, naming the model(s) unless the stub shows them in a column, and saying so when some
        runs are of random-weight models (in the caption, which travels with the table, not in a footnote)."""
        said = [f"model: {', '.join(self.models)}"] if self.models and not _shows_model(self.spec) else []
        if self.random_weights:
            said.append(RANDOM_WEIGHTS)
        if not said:
            return self.spec.caption
        return f"{self.spec.caption} ({'; '.join(said)})" if self.spec.caption else "; ".join(said)


class MixedRunsError(ValueError):
    """A table would put runs of different models side by side without saying which is which."""


def _shows_model(spec: TableSpec) -> bool:
    return isinstance(spec.rows, AutoRows) and any("{model}" in t for t in spec.rows.stub)


def _keyed_by_model(spec: TableSpec) -> bool:
    """Whether the rows say which model they are: ``model`` in ``rows.by``, or in every run row's ``match``."""
    if isinstance(spec.rows, AutoRows):
        return "model" in spec.rows.by
    return all("model" in row.match for row in spec.rows if row.match is not None)


def matches(fields: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Every wanted key equal (a list: any of its values)."""
    return all(
        any(same_value(fields.get(key), v) for v in (value if isinstance(value, list) else [value]))
        for key, value in wanted.items()
    )


def _display(key: str, value: Any, names: Names) -> str:
    """A value as a table shows it: its ``names`` entry, else itself (6000.0 as 6000, None as –)."""
    if value is None:
        name_key = "null"
    elif isinstance(value, float) and value.is_integer():
        name_key = str(int(value))
    else:
        name_key = str(value)
    return names.get(key, {}).get(name_key, "–" if value is None else name_key)


def _render(template: str, fields: Mapping[str, Any], names: Names, where: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in fields:
            raise SpecError(f"{where}: template field {{{key}}} is unknown here (available: {sorted(fields)})")
        return _display(key, fields[key], names)

    return re.sub(r"\{([^{}]+)\}", substitute, template)


CHOICE_RULE = (
    "where several runs fit a row, it shows this experiment's run first, then a complete run of the whole benchmark, "
    "then the one with the most answers, then the latest to finish, then the first by run directory"
)
SAME_RUN = frozenset({"run_dir", "tracking", "retry_errors", "experiment"})  # keys that say nothing of what ran


def _differences(run: Run, other: Run) -> str:
    """The config keys in which ``other`` differs from ``run`` (``seed 1 vs 0``), or what else tells them apart."""
    a, b = run.flat_config, other.flat_config
    keys = [k for k in dict.fromkeys([*a, *b]) if k not in SAME_RUN and a.get(k) != b.get(k)]
    if keys:
        return ", ".join(f"{k} {b.get(k)} vs {a.get(k)}" for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
    code = code_differences(run, other)
    return (
        "same config"
        + (f" run by other code ({', '.join(code)})" if code else "")
        + ("" if other.complete and not other.subset else ", partial")
    )


def _choose(candidates: Sequence[Run], experiment: str | None, what: str, notes: list[str]) -> Run:
    """The run behind a cell when several match (:data:`CHOICE_RULE`); the choice becomes a note of the table,
    naming the runs left out and how each differs from the one used."""
    ranked = sorted(
        candidates,
        key=lambda r: (
            r.fields["experiment"] == experiment,
            r.complete and not r.subset,
            len(r.predictions),
            str(r.provenance.get("end") or ""),
        ),
        reverse=True,
    )
    if len(ranked) > 1:
        others = "; ".join(f"{r.id}: {_differences(ranked[0], r)}" for r in ranked[1:])
        notes.append(f"{what}: {len(ranked)} runs match; using {ranked[0].id} (not {others})")
    return ranked[0]


def _by_column(
    runs: Sequence[Run], spec: TableSpec, experiment: str | None, what: str, notes: list[str]
) -> dict[str, Run]:
    """The run behind each column key (:attr:`~infinipotv.results.spec.ColumnSpec.key`) among a row's runs."""
    chosen = {}
    for column in {c.key: c for c in spec.columns}.values():
        candidates = [r for r in runs if r.fields["benchmark"] == column.benchmark and matches(r.fields, column.where)]
        if candidates:
            chosen[column.key] = _choose(candidates, experiment, f"{what} / {column.key}", notes)
    return chosen


def _published_rows(frame: pd.DataFrame, filters: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The distinct reference rows (as their descriptor fields) among the CSV lines matching ``filters``."""
    chosen = select(frame, filters)[list(PUBLISHED_FIELDS)]
    if chosen.empty:
        raise SpecError(f"{where}: no published row matches {dict(filters)}; check source/table against the CSV")
    keys = chosen.astype(object).where(chosen.notna(), None).values.tolist()
    return [dict(zip(PUBLISHED_FIELDS, t)) for t in dict.fromkeys(map(tuple, keys))]


def _published_row(
    spec: TableSpec, frame: pd.DataFrame, row_id: str, stub: tuple[str, ...], fields: Mapping[str, Any], where: str
) -> Row:
    mine = select(frame, {k: v for k, v in fields.items() if v is not None})
    cells = []
    for column in spec.columns:
        if column.metric is not None:  # the published CSV holds scores only
            cells.append(Cell())
            continue
        hits = mine[(mine["benchmark"] == column.benchmark) & (mine["category"] == column.published_category)]
        if len(hits) > 1:
            raise SpecError(
                f"{where}: {len(hits)} published values for {column.benchmark}/"
                f"{column.published_category}; narrow the filter"
            )
        cells.append(Cell(float(hits["value"].iloc[0])) if len(hits) else Cell())
    return Row(row_id, stub, dict(fields), source=str(fields["source"]), cells=cells)


def _run_cells(spec: TableSpec, row: Row, notes: list[str]) -> list[Cell]:
    cells = []
    for column in spec.columns:
        run = row.runs.get(column.key)
        if run is None:
            cells.append(Cell())
            continue
        if column.metric is not None:
            value = metric_value(run, column.metric, notes)
            cells.append(Cell(None if value is None else value * column.scale, partial=not run.complete or run.subset))
            continue
        try:
            n = run.question_counts.get(column.score)
        except ScorerError as err:
            n = None
            notes.append(f"{run.id}: n unavailable ({err})")
        cells.append(Cell(_score(run, column.score, notes), n, partial=not run.complete or run.subset))
    return cells


def metric_value(run: Run, path: str, notes: list[str]) -> float | None:
    """The number at dotted ``path`` in the run's metrics.json (its shards' merged); one it lacks (a run from before
    the measurement existed, a resume that answered nothing and so timed nothing) or one no measurement can be
    (negative, NaN) is noted, never a silent – nor shown."""
    value: Any = run.metrics
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        notes.append(f"{run.id}: no number {path} in its metrics.json" + (f" (found {value!r})" * (value is not None)))
        return None
    if not 0 <= value < math.inf:  # bytes, seconds, counts, rates: never negative, NaN or infinite
        notes.append(f"{run.id}: {path} in its metrics.json is {value}, which no measurement can be; not shown")
        return None
    return float(value)


def _score(run: Run, path: str, notes: list[str]) -> float | None:
    """The run's score at ``path``: its metrics.json's, else scored from its predictions (a metrics.json written
    before that score existed, or edited by hand), noted; a score neither holds is noted too, never a silent –."""
    scores = flatten_scores(run.scores)
    if path in scores:
        return scores[path]  # None here is the scorer's own "no questions" (a task the subset lacks)
    try:
        rescored = flatten_scores(run.rescored)
    except ScorerError as err:
        notes.append(f"{run.id}: no score {path} in its metrics.json, and its predictions cannot be scored ({err})")
        return None
    if path not in rescored:
        notes.append(f"{run.id}: no score {path} in its metrics.json nor from its {len(run.predictions)} predictions")
        return None
    notes.append(f"{run.id}: its metrics.json has no score {path}; scored from its {len(run.predictions)} predictions")
    return rescored[path]


def _explicit_rows(
    spec: TableSpec, runs: Sequence[Run], published: pd.DataFrame, experiment: str | None, notes: list[str]
) -> list[Row]:
    rows = []
    for row_spec in spec.rows:
        where = f"table {spec.name!r} row {row_spec.id!r}"
        if row_spec.published is not None:
            found = _published_rows(published, row_spec.published, where)
            if len(found) > 1:
                raise SpecError(
                    f"{where}: the filter matches {len(found)} reference rows; add model/policy/kv/budget_tokens"
                )
            rows.append(_published_row(spec, published, row_spec.id, row_spec.stub, found[0], where))
            continue
        matched = [r for r in runs if matches(r.fields, row_spec.match)]
        by_benchmark = _by_column(matched, spec, experiment, where, notes)
        first = next(iter(by_benchmark.values()), None)
        rows.append(
            Row(row_spec.id, row_spec.stub, {**(first.fields if first else {}), **row_spec.match}, by_benchmark)
        )
    return rows


def _sort_key(auto: AutoRows, row: Row) -> tuple[Any, ...]:
    """``order`` position first, then numbers numerically and names alphabetically; ours before the reference."""
    key: list[Any] = []
    for name in auto.by:
        value = row.fields.get(name)
        order = auto.order.get(name, [])
        position = next((i for i, o in enumerate(order) if same_value(value, o)), len(order))
        if value is None:
            natural: tuple[Any, ...] = (2,)
        elif isinstance(value, (int, float)):
            natural = (0, float(value))
        else:
            natural = (1, _display(name, value, auto.names))
        key += [position, natural]
    return (*key, row.published)


def _auto_rows(
    spec: TableSpec, runs: Sequence[Run], published: pd.DataFrame, experiment: str | None, notes: list[str]
) -> list[Row]:
    auto = spec.rows
    assert isinstance(auto, AutoRows)
    benchmarks = {c.benchmark for c in spec.columns}
    wanted = {"experiment": experiment, **auto.where} if experiment is not None else auto.where
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.fields["benchmark"] in benchmarks and matches(run.fields, wanted):
            groups.setdefault("/".join(_display(k, run.fields.get(k), {}) for k in auto.by), []).append(run)
    rows = []
    for row_id, members in groups.items():
        where = f"table {spec.name!r} row {row_id!r}"
        stub = tuple(_render(t, members[0].fields, auto.names, where) for t in auto.stub)
        rows.append(Row(row_id, stub, members[0].fields, _by_column(members, spec, experiment, where, notes)))
    if spec.reference is not None:
        where = f"table {spec.name!r} reference"
        for fields in _published_rows(published, spec.reference, where):
            if matches(fields, {k: v for k, v in auto.where.items() if k in fields}):
                row_id = "ref:" + "/".join(_display(k, fields.get(k), {}) for k in auto.by)
                stub = tuple(_render(t, fields, auto.names, where) for t in auto.stub)
                rows.append(_published_row(spec, published, row_id, stub, fields, where))
    return sorted(rows, key=lambda r: _sort_key(auto, r))


def _apply_bold(spec: TableSpec, rows: Sequence[Row]) -> None:
    if spec.bold_by is None:
        return
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        if not row.published and not (spec.bold_exclude and matches(row.fields, spec.bold_exclude)):
            groups.setdefault(tuple(str(row.fields.get(k)) for k in spec.bold_by), []).append(row)
    for members in groups.values():
        for j, column in enumerate(spec.columns):
            cells = [r.cells[j] for r in members if not r.cells[j].missing]
            cells = [c for c in cells if not c.partial] or cells
            shown = [round(c.value, column.decimals) for c in cells]
            if len(cells) < 2 or not any(shown):  # bold needs a comparison, and a score to be best at
                continue
            best = max(shown) if column.better == "higher" else min(shown)
            for cell, value in zip(cells, shown):
                cell.bold = value == best


def candidates(spec: TableSpec, runs: Sequence[Run], experiment: str | None) -> list[Run]:
    """Every run some row of the table may draw on (the same filters as the rows' own)."""
    benchmarks = {c.benchmark for c in spec.columns}
    runs = [r for r in runs if r.fields["benchmark"] in benchmarks]
    if isinstance(spec.rows, AutoRows):
        wanted = {"experiment": experiment, **spec.rows.where} if experiment is not None else spec.rows.where
        return [r for r in runs if matches(r.fields, wanted)]
    return [r for r in runs if any(matches(r.fields, row.match) for row in spec.rows if row.match is not None)]


def _check_models(table: Table, candidates: Sequence[Run]) -> None:
    """One model per table unless its rows are keyed by model; the models found are kept for the caption."""
    models = Counter(run.fields["model"] for run in candidates)
    table.models = sorted(models)
    table.random_weights = any((run.config.get("model") or {}).get("tiny") for run in candidates)
    if len(models) > 1 and not _keyed_by_model(table.spec):
        found = ", ".join(f"{m} ({n} run{'s' * (n > 1)})" for m, n in sorted(models.items()))
        raise MixedRunsError(
            f"table {table.spec.name!r} would mix {len(models)} models: {found}; it has no model column, so pick one "
            f"with --model NAME, move the other runs out of the runs folder, or key the table's rows by model "
            f"(rows.by or every row's match)"
        )


def build_table(spec: TableSpec, runs: Sequence[Run], published: pd.DataFrame, experiment: str | None = None) -> Table:
    """Cells for every row and column of ``spec`` from ``runs`` and the ``published`` reference rows.

    ``experiment`` names the experiment the table belongs to: generated rows take its runs only (unless the spec's
    ``where`` says otherwise), and where several runs fit a cell its own are preferred.
    """
    table = Table(spec)
    if spec.source is not None:
        table.frame, table.footnotes = call_source(spec) or (None, [])
        return table
    _check_models(table, candidates(spec, runs, experiment))
    make = _auto_rows if isinstance(spec.rows, AutoRows) else _explicit_rows
    table.rows = make(spec, runs, published, experiment, table.choices)
    table.notes += table.choices
    for row in table.rows:
        if not row.published:
            row.cells = _run_cells(spec, row, table.notes)
    _apply_bold(spec, table.rows)
    table.taus = _taus(spec, table.rows)
    return table


def _taus(spec: TableSpec, rows: Sequence[Row]) -> dict[int, tuple[float | None, int]]:
    """Kendall's tau-b of each score column's ranking of the compared rows (run rows outside ``bold.exclude``)
    against the ``tau`` column's, over the rows with both cells, and how many rows that is."""
    if spec.tau is None:
        return {}
    ranked = [r for r in rows if not r.published and not (spec.bold_exclude and matches(r.fields, spec.bold_exclude))]
    ref = next(j for j, c in enumerate(spec.columns) if c.score is not None and c.label == spec.tau)
    taus = {}
    for j, column in enumerate(spec.columns):
        if column.score is None or j == ref:
            continue
        both = [r for r in ranked if not (r.cells[ref].missing or r.cells[j].missing)]
        pairs = [(r.cells[ref].value, r.cells[j].value) for r in both]
        taus[j] = (kendall_tau_b([a for a, _ in pairs], [b for _, b in pairs]), len(pairs))
    return taus


def _named(row: Row, name: str) -> bool:
    return name.lower() in (row.id.lower(), row.stub[0].lower())


def find_row(table: Table, wanted: str) -> Row:
    """A run row by id or by its first stub cell (case-insensitive)."""
    for row in table.rows:
        if not row.published and _named(row, wanted):
            return row
    choices = [r.id for r in table.rows if not r.published]
    raise SpecError(f"table {table.spec.name!r}: no run row {wanted!r} to use as baseline; choose one of {choices}")


def add_stats(table: Table, baseline: str | None = None, n_boot: int = N_BOOT, seed: int = SEED) -> None:
    """Paired difference, bootstrap CI and McNemar p of every run row against a baseline row: ``baseline`` (must
    exist), else the spec's ``baseline`` when the runs have it, else the first run row."""
    run_rows = [r for r in table.rows if not r.published]
    if not run_rows:
        return
    if baseline is not None:
        base = find_row(table, baseline)
    else:
        wanted = table.spec.baseline
        base = next((r for r in run_rows if wanted is not None and _named(r, wanted)), run_rows[0])
        if wanted is not None and not _named(base, wanted):
            table.notes.append(f"table {table.spec.name!r}: baseline {wanted!r} has no runs; using {base.id!r}")
    table.baseline, table.n_boot = base.id, n_boot
    _add_versus(table, run_rows, n_boot, seed)
    for row in run_rows:
        for key, run in row.runs.items() if row is not base else ():
            if key not in base.runs:
                continue
            if run.selection != base.runs[key].selection:
                table.notes.append(
                    f"row {row.id} / {key}: no paired statistics: {run.id} and the baseline's "
                    f"{base.runs[key].id} were asked different questions "
                    f"({_selection_diff(run, base.runs[key])})"
                )
                table.unpaired.append(row.id)
                continue
            indices = [
                j for j, c in enumerate(table.spec.columns) if c.key == key and c.score is not None and c.versus is None
            ]
            paths = [str(table.spec.columns[j].score) for j in indices]
            try:
                stats = paired_differences(run, base.runs[key], paths, n_boot, seed)
            except ScorerError as err:
                table.notes.append(f"row {row.id} / {key}: no statistics ({err})")
                continue
            for j, path in zip(indices, paths):
                row.cells[j].stat = stats[path]


def _add_versus(table: Table, rows: Sequence[Row], n_boot: int, seed: int) -> None:
    """The paired difference of each ``versus`` column against the named column of the same row (a method's INT4
    run against its own FP16 run), on the questions both were asked."""
    columns = table.spec.columns
    for j, column in enumerate(columns):
        if column.versus is None:
            continue
        other = next(c for c in columns if c.label == column.versus and c.score == column.score)
        for row in rows:
            run, against = row.runs.get(column.key), row.runs.get(other.key)
            if run is None or against is None:
                continue
            if run.selection != against.selection:
                table.notes.append(
                    f"row {row.id} / {column.label}: no paired statistics against {other.label}: {run.id} and "
                    f"{against.id} were asked different questions ({_selection_diff(run, against)})"
                )
                continue
            row.cells[j].stat = paired_differences(run, against, [str(column.score)], n_boot, seed)[str(column.score)]


def _selection_diff(run: Run, other: Run) -> str:
    keys = [k for k in run.selection if run.selection[k] != other.selection.get(k) and k != "is_subset"]
    return ", ".join(f"{k} {run.selection[k]} vs {other.selection.get(k)}" for k in keys)


def table_frame(table: Table) -> pd.DataFrame:
    """Long form: one line per cell, with its flags, run and statistics (the CSV/JSON output)."""
    if table.frame is not None:
        return table.frame
    records = []
    for row in table.rows:
        for column, cell in zip(table.spec.columns, row.cells):
            stat = cell.stat.as_dict() if cell.stat else dict.fromkeys(PairedStat.__dataclass_fields__)
            records.append(
                {
                    "table": table.spec.name,
                    "row": row.id,
                    "label": " | ".join(row.stub),
                    "published": row.published,
                    "source": row.source,
                    "column": f"{column.group} {column.label}" if column.group else column.label,
                    "benchmark": column.benchmark,
                    "score": column.path,
                    "value": cell.value,
                    "n": cell.n,
                    "partial": cell.partial,
                    "missing": cell.missing,
                    "bold": cell.bold,
                    "run": row.runs[column.key].id if column.key in row.runs else None,
                    "model": row.runs[column.key].fields["model"] if column.key in row.runs else None,
                    "baseline": table.baseline,
                    **stat,
                }
            )
    for j, (tau, n) in table.taus.items():
        column = table.spec.columns[j]
        records.append(
            {
                "table": table.spec.name,
                "row": "kendall_tau",
                "label": f"Kendall's tau-b vs {table.spec.tau}",
                "column": column.label,
                "benchmark": column.benchmark,
                "score": column.path,
                "value": tau,
                "n": n,
                "missing": tau is None,
            }
        )
    return pd.DataFrame(records)
