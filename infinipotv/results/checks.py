"""An experiment's table spec and its runs checked against each other, before any table is built or file written.

The spec's grammar is checked when it is parsed (:mod:`infinipotv.results.spec`); what it names can only be checked
against the runs: a row key (``rows.by``, ``match``, ``where``, ``bold``, a stub template) must be one the runs have,
else every run would read None for it and rows would merge silently; a column's benchmark must be a registered one,
and its ``score``/``metric`` path one that some run of that benchmark has, else a typo would blank the column.
A filter value that no run has is a note (its rows may simply not have run yet), never a silently empty table. Runs of
one configuration made by different code (commit, package versions) are found here too: the report refuses them
unless told to mix them (``--allow-mixed``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from infinipotv.data import BENCHMARKS
from infinipotv.results.collect import CANONICAL, Run, code_differences
from infinipotv.results.scoring import ScorerError, flatten_scores
from infinipotv.results.spec import AutoRows, ColumnSpec, ExperimentSpec, SpecError, TableSpec
from infinipotv.results.tables import SAME_RUN, candidates, matches

TEMPLATE_FIELD = re.compile(r"\{([^{}]+)\}")


def _filters(spec: TableSpec) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every filter of a table (where it is, its key -> wanted value)."""
    where = f"table {spec.name!r}"
    if isinstance(spec.rows, AutoRows):
        yield f"{where}.rows.where", spec.rows.where
    else:
        for row in spec.rows:
            if row.match is not None:
                yield f"{where} row {row.id!r} match", row.match
    yield f"{where}.bold.exclude", spec.bold_exclude
    for i, column in enumerate(spec.columns):
        if column.where:
            yield f"{where}.columns[{i}].where", column.where


def _keys(spec: TableSpec) -> Iterator[tuple[str, str]]:
    """Every row key a table names (where it is, the key)."""
    where = f"table {spec.name!r}"
    for place, wanted in _filters(spec):
        yield from ((place, key) for key in wanted)
    if isinstance(spec.rows, AutoRows):
        auto = spec.rows
        yield from ((f"{where}.rows.by", key) for key in auto.by)
        yield from ((f"{where}.rows.names", key) for key in auto.names)
        yield from ((f"{where}.rows.order", key) for key in auto.order)
        yield from ((f"{where}.rows.stub", key) for t in auto.stub for key in TEMPLATE_FIELD.findall(t))
    yield from ((f"{where}.bold.by", key) for key in spec.bold_by or ())


def _unknown_key(place: str, key: str, known: set[str]) -> SpecError:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    config = sorted(known - set(CANONICAL))
    return SpecError(
        f"{place}: unknown key {key!r}{f' (did you mean {close[0]!r}?)' if close else ''}; known: "
        f"{', '.join(CANONICAL)}, or a config key the runs record ({', '.join(config)})"
    )


def _no_run(place: str, key: str, value: Any, runs: Sequence[Run]) -> str:
    found = sorted({json.dumps(r.fields.get(key), default=str) for r in runs})
    more = ", ..." if len(found) > 8 else ""
    return (
        f"{place}: {key}={json.dumps(value, default=str)} matches no run (the runs have {', '.join(found[:8])}{more})"
    )


def check_spec(spec: ExperimentSpec, runs: Sequence[Run]) -> list[str]:
    """A :class:`SpecError` for a row key no run has or a column benchmark nobody registered; a note for each filter
    value, column benchmark or figure filter that no run among ``runs`` matches. Nothing is checked without runs
    (the report then says that no run matches)."""
    if not runs:
        return []
    known = set(CANONICAL).union(*(r.fields for r in runs))
    benchmarks = set(BENCHMARKS) | {str(r.fields["benchmark"]) for r in runs}
    notes = []
    for table in spec.tables:
        if table.source is not None:
            continue
        for place, key in _keys(table):
            if key not in known:
                raise _unknown_key(place, key, known)
        for i, column in enumerate(table.columns):
            place = f"table {table.name!r}.columns[{i}]"
            if column.benchmark not in benchmarks:
                close = difflib.get_close_matches(column.benchmark, sorted(benchmarks), n=1)
                raise SpecError(
                    f"{place}: unknown benchmark {column.benchmark!r}"
                    f"{f' (did you mean {close[0]!r}?)' if close else ''}; known: {', '.join(sorted(benchmarks))}"
                )
            ours = [r for r in runs if r.fields["benchmark"] == column.benchmark]
            if not ours:
                notes.append(f"{place}: no run of benchmark {column.benchmark!r}; the column's run cells are –")
            else:
                _check_path(place, column, ours)
        for place, wanted in _filters(table):
            notes += _unmatched(place, wanted, runs)
    for i, figure in enumerate(spec.figures or ()):
        place = f"figures[{i}].where"
        for key in figure.where:
            if key not in known:
                raise _unknown_key(place, key, known)
        notes += _unmatched(place, figure.where, runs)
    return notes


def _paths(run: Run, column: ColumnSpec, rescored: bool = False) -> set[str]:
    """The paths ``column`` could show for ``run``: its scores (metrics.json's, and with ``rescored`` those its
    predictions give, as a cell falls back to them), or the numbers in its metrics.json less the scores and the
    per-question maps."""
    if column.metric is not None:
        return {p for p in flatten_scores(run.metrics) if not p.startswith("scores.") and "_by_question." not in p}
    paths = set(flatten_scores(run.scores))
    if rescored:
        try:
            paths.update(flatten_scores(run.rescored))
        except ScorerError:
            pass  # no scorer: metrics.json's scores are all there is
    return paths


def _check_path(place: str, column: ColumnSpec, runs: Sequence[Run]) -> None:
    """A :class:`SpecError` naming the nearest known path when no run of the column's benchmark has its path."""
    if any(column.path in _paths(r, column) for r in runs):
        return
    known = sorted(set().union(*(_paths(r, column, rescored=True) for r in runs)))
    if column.path in known:
        return
    close = difflib.get_close_matches(column.path, known, n=1)
    kind = "score" if column.metric is None else "metric"
    shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    raise SpecError(
        f"{place}: no run of benchmark {column.benchmark!r} has {kind} {column.path!r}"
        f"{f' (did you mean {close[0]!r}?)' if close else ''}; known: {shown}"
    )


def _unmatched(place: str, wanted: Mapping[str, Any], runs: Sequence[Run]) -> list[str]:
    """A note for each wanted value (each item of a list) that no run has."""
    return [
        _no_run(place, key, item, runs)
        for key, value in wanted.items()
        for item in (value if isinstance(value, list) else [value])
        if not any(matches(r.fields, {key: [item]}) for r in runs)  # [item]: a list item is one value
    ]


def _identity(run: Run) -> str:
    """What ran: the benchmark and the configuration, less the keys that say nothing of it (:data:`SAME_RUN`)."""
    return json.dumps({k: v for k, v in run.flat_config.items() if k not in SAME_RUN}, sort_keys=True, default=str)


def mixed_code(spec: ExperimentSpec, runs: Sequence[Run], experiment: str | None) -> list[str]:
    """Each set of runs a table may draw on that share one configuration but not the code that ran it (commit,
    package versions; :func:`~infinipotv.results.collect.code_differences`), and each run whose own sittings or
    shards differ so, described in one line."""
    found: dict[str, str] = {}
    for table in spec.tables:
        if table.source is not None:
            continue
        groups: dict[str, list[Run]] = {}
        for run in candidates(table, runs, experiment):
            groups.setdefault(_identity(run), []).append(run)
            if run.mixed_code:  # its sittings or shards (Run.mixed_code)
                found.setdefault(run.id, f"run {run.id} was answered by different code ({', '.join(run.mixed_code)})")
        for members in groups.values():
            first = members[0]
            for other in members[1:]:
                differences = code_differences(first, other)
                if differences:
                    found.setdefault(
                        f"{first.id}|{other.id}",
                        f"runs {first.id} and {other.id} are one config run by different code "
                        f"({', '.join(differences)})",
                    )
    return list(found.values())
