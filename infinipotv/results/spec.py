"""The ``table`` block of an experiment file, parsed and checked before any run is read.

Shape (YAML, inside ``experiments/NAME.yaml``)::

    table:                       # one table, a list of tables, or {tables: [...], figures: [...]}
      name: main                 # output file stem
      caption: ...
      stub: [Method, KV, Budget] # headers of the descriptive columns
      columns:                   # one per score: benchmark + dotted path into metrics.json's scores
        - {benchmark: videomme, score: S, label: S, group: Video-MME, published: short}
        - {benchmark: videomme, score: overall, label: All, paired: true}  # + its n and the difference vs the
                                                                             # baseline row with its 95% CI
        - {benchmark: videomme, metric: memory.peak_accelerator_bytes, scale: MiB, label: MiB}
        - {benchmark: symbolic, score: overall, label: Cue, where: {benchmark.options.answer_cue: kind}}
        - {benchmark: symbolic, score: overall, label: INT4, paired: true, versus: FP16, where: {kv: int4}}
                                 # `where` (as rows' `where`): the column's run is the row's run that also matches
                                 # it, so one row can show one method on several settings side by side; with
                                 # `versus: LABEL` a paired column's difference is against that column of the same
                                 # row (INT4 against the method's own FP16), not against the baseline row
                                 # a measurement, not a score: a path into metrics.json, times `scale` (a number or
                                 # KiB, MiB, GiB for bytes, ms for seconds)
                                 # `better: higher | lower` says which value is bolded; default: lower for bytes and
                                 # seconds (a path part named or ending in `bytes`, `seconds`, `_s`), else higher
      rows:                      # explicit rows ...
        - {id: fp16, stub: [InfiniPot-V, FP16, 6K], match: {policy: tar_van_pool, kv: fp16, budget_tokens: 6000}}
        - {id: paper, stub: [InfiniPot-V, FP16, 6K], published: {source: int4_study_seed004, table: "..."}}
      # ... or generated: one row per distinct value of `by` among the runs (and the `reference` CSV rows)
      # rows: {by: [policy], stub: ["{policy}"], names: {policy: {tar: TaR}}, order: {policy: [...]}, where: {...}}
      # reference: {source: infinipotv_paper_v2, table: Table 5}
      bold: {by: [budget_tokens], exclude: {policy: full}}   # comparable rows; `bold: false` turns it off
      baseline: fp16             # row id the paired statistics compare against (default: the first run row)
      tau: All                   # a last line: Kendall's tau-b of each other score column's ranking of the rows
                                 # against this column's (the rows `bold` compares, both cells present)
      budget_mib: 13.0326        # the bytes every row is compared at: a row whose accelerator peak exceeds them is
                                 # marked § (default: each run's own budget's bytes; set it where a row's |M| was
                                 # chosen to fit the table's bytes, as an equal-bytes row)
      notes: [...]
    # a generated table instead: {name: bytes_per_token, source: "infinipotv.kv.bytes_table:bytes_table"}
    # (the function returns a DataFrame, or markdown text: a pipe table, then lines that become its notes)

Row keys (``match``, ``by``, ``where``, ``bold``, templates) are the canonical fields ``model``, ``policy``, ``kv``,
``budget_tokens`` (shared with the published CSV), ``experiment``, or any dotted config key (``compress.alpha``); a
list value matches any of its items. Generated rows take the experiment's own runs unless ``where`` names
``experiment`` (e.g. ``where: {experiment: [budget_sweep, int4_vs_fp16]}``); explicit rows take any matching run,
preferring the experiment's own.

Figures (``figures:`` beside ``tables:``; without it, chosen from the tables' columns)::

    figures:
      - {kind: accuracy_vs_budget, benchmark: mlvu, score: avg}      # one line per (policy, kv) over |M|, CI bars
      - {kind: accuracy_vs_metric, benchmark: mlvu, score: avg, metric: memory.peak_accelerator_bytes, scale: MiB}
                                 # accuracy against a metric (as a metric column's): one line per (policy, kv)
                                 # across its budgets, CI bars, the Pareto front as a grey band
      - {kind: arrows, benchmark: mlvu, score: avg, from: {label: upstream}, to: {label: tuned}}
                                 # per method and budget, an arrow from a run to its counterpart (the same method,
                                 # storage and |M|): a panel per |M|, what tuning gained or lost at a glance
      - {kind: metric_vs_budget, benchmark: mlvu, metric: time.ttft_s.median}
                                 # a cost against |M|: one line per (policy, kv) over |M| (log y if it spans 10x)
      - {kind: memory_trace, benchmark: mlvu}                        # KV bytes over frames streamed, per run
      - {kind: table, table: robustness}        # the table's score columns side by side, one line per row, CI bars
    # each takes `where: {...}` (as rows' `where`) to draw only the runs it matches, and `name` (its file stem under
    # figures/; needed where two figures would share one); every figure draws a method family in one colour, a
    # method with its own marker (infinipotv/results/methods.py), and its axes in words
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PUBLISHED_FIELDS = ("source", "table", "model", "policy", "kv", "budget_tokens")


class SpecError(ValueError):
    """A table spec that cannot be built; the message names the table, the key and a fix."""


@dataclass(frozen=True)
class ColumnSpec:
    """One column: a score (``score``, a path into metrics.json's ``scores``) or a measurement of the run
    (``metric``, a path into the rest of metrics.json, e.g. ``time.ttft_s.median``, shown times ``scale``). A sharded
    run's measurements are its shards' merged (:func:`~infinipotv.results.collect.merge_shards`: peaks the maximum,
    seconds summed, time to first token over all questions)."""

    benchmark: str
    score: str | None
    label: str
    group: str | None = None
    published: str | None = None  # category in the published CSV; default: the last part of `score`
    decimals: int = 1
    better: str = "higher"  # which value is best (bold): "higher" or "lower" (default_better)
    paired: bool = False  # also show, beside it, its question count and the paired difference vs the baseline row
    metric: str | None = None
    scale: float = 1.0  # a metric's unit: 2**-20 for bytes as MiB
    where: dict[str, Any] = field(default_factory=dict)  # the row's runs this column draws on (as rows' `where`)
    versus: str | None = None  # a paired column's other side: the label of a column of the same row (not the baseline)

    @property
    def key(self) -> str:
        """Which of a row's runs the column shows: the row's run of its benchmark, or of its benchmark that matches
        its ``where`` (columns with one key share a run, and so their paired statistics)."""
        if not self.where:
            return self.benchmark
        return self.benchmark + " " + ", ".join(f"{k}={v}" for k, v in sorted(self.where.items()))

    @property
    def path(self) -> str:
        """What the column shows, as its output files name it: the score's path, or the metric's."""
        return self.score if self.score is not None else str(self.metric)

    @property
    def published_category(self) -> str:
        return self.published or self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class RowSpec:
    """An explicit row: a run row (``match``) or a published reference row (``published``)."""

    id: str
    stub: tuple[str, ...]
    match: dict[str, Any] | None = None
    published: dict[str, Any] | None = None


@dataclass(frozen=True)
class AutoRows:
    """Rows generated from the runs: one per distinct combination of ``by`` values."""

    by: tuple[str, ...]
    stub: tuple[str, ...]
    names: dict[str, dict[str, str]] = field(default_factory=dict)
    order: dict[str, list[Any]] = field(default_factory=dict)
    where: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSpec:
    name: str
    caption: str = ""
    stub: tuple[str, ...] = ("Method",)
    columns: tuple[ColumnSpec, ...] = ()
    rows: tuple[RowSpec, ...] | AutoRows = ()
    reference: dict[str, Any] | None = None
    bold_by: tuple[str, ...] | None = ()  # None: no bold at all
    bold_exclude: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    notes: tuple[str, ...] = ()
    source: str | None = None  # "module:function" producing the table (a DataFrame) instead of runs
    tau: str | None = None  # label of the score column whose ranking of the rows every other one is compared to
    budget_mib: float | None = None  # the bytes every row is compared at (None: each run's own budget's bytes)

    @property
    def budget_bytes(self) -> float | None:
        """``budget_mib`` in bytes: what a row's accelerator peak is held to for its § mark (None: its own)."""
        return None if self.budget_mib is None else self.budget_mib / SCALES["MiB"]


@dataclass(frozen=True)
class FigureSpec:
    kind: str  # FIGURE_KINDS
    benchmark: str | None = None
    score: str | None = None
    where: dict[str, Any] = field(default_factory=dict)  # only the runs matching these keys (as rows' `where`)
    metric: str | None = None  # accuracy_vs_metric's x, metric_vs_budget's y: a path into metrics.json, times scale
    scale: float = 1.0
    name: str | None = None  # the file stem under figures/ (None: from the kind, benchmark, score and metric)
    table: str | None = None  # kind table: the table whose score columns it draws
    start: dict[str, Any] = field(default_factory=dict)  # kind arrows: the runs an arrow starts at (YAML `from`)
    end: dict[str, Any] = field(default_factory=dict)  # kind arrows: the runs it points to (YAML `to`)

    def stem(self) -> str:
        """The file name (without suffix) the figure is written to."""
        if self.name is not None:
            return self.name
        if self.kind == "table":
            return f"table_{self.table}"
        if self.kind == "memory_trace":
            return f"memory_trace_{self.benchmark or 'all'}"
        if self.kind == "arrows":
            return f"arrows_{self.benchmark}_{self.score}"
        if self.kind == "metric_vs_budget":
            return f"{str(self.metric).replace('.', '_')}_vs_budget_{self.benchmark}"
        x = "budget" if self.kind == "accuracy_vs_budget" else str(self.metric).replace(".", "_")
        return f"accuracy_vs_{x}_{self.benchmark}_{self.score}"


@dataclass(frozen=True)
class ExperimentSpec:
    tables: tuple[TableSpec, ...]
    figures: tuple[FigureSpec, ...] | None  # None: choose from the data


def _mapping(block: Any, where: str) -> Mapping[str, Any]:
    """``block`` when it is a YAML mapping; a :class:`SpecError` naming where it is otherwise (``table: 5``)."""
    if not isinstance(block, Mapping):
        raise SpecError(f"{where}: must be a mapping of keys (see infinipotv/results/spec.py), got {block!r}")
    return block


def _items(value: Any, where: str) -> list[Any]:
    """``value`` when it is a YAML list; a :class:`SpecError` naming where it is otherwise (``columns: 5``)."""
    if not isinstance(value, list):
        raise SpecError(f"{where}: must be a list, got {value!r}")
    return value


def _stem(name: str, where: str, folder: str) -> str:
    """``name`` when it is a file stem in ``folder`` (no ``/``, nothing a shell or LaTeX reads specially), else a
    :class:`SpecError`: a table named ``../../escape`` would be written outside ``--out``."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
        raise SpecError(f"{where}: name {name!r} is a file stem under {folder}: letters, digits, '_', '.', '-' only")
    return name


def _require(block: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in _mapping(block, where) or block[key] is None:
        raise SpecError(f"{where}: `{key}` is required (have: {sorted(block)})")
    return block[key]


def _check_keys(block: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(_mapping(block, where)) - allowed
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def _strings(value: Any) -> tuple[str, ...]:
    """A YAML string or list of strings as a tuple (``stub: FP16`` and ``stub: [FP16]`` alike)."""
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


SCALES = {"KiB": 2**-10, "MiB": 2**-20, "GiB": 2**-30, "ms": 1e3}  # named units of a metric's `scale` (bytes, s)
FIGURE_KINDS = ("accuracy_vs_budget", "accuracy_vs_metric", "metric_vs_budget", "arrows", "memory_trace", "table")
COLUMN_KEYS = {
    "benchmark",
    "score",
    "metric",
    "scale",
    "label",
    "group",
    "published",
    "decimals",
    "better",
    "paired",
    "where",
    "versus",
}


def _positive(value: Any) -> bool:
    """A finite number > 0 (YAML's true/false are not numbers here)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < math.inf


def _scale(block: Mapping[str, Any], where: str) -> float:
    """A metric's ``scale``: a number > 0 or a named unit (SCALES); 1 when not given."""
    scale = block.get("scale", 1.0)
    scale = SCALES.get(scale, scale) if isinstance(scale, str) else scale
    if not _positive(scale):
        raise SpecError(f"{where}: scale must be a number > 0 or one of {sorted(SCALES)}, got {block['scale']!r}")
    return float(scale)


COST_PART = re.compile(r"(.*_)?(bytes|seconds|s)")  # a metrics.json key that counts bytes or seconds


def default_better(metric: str | None) -> str:
    """Which value of a column is best when its ``better`` is not given: bytes and seconds are costs (``lower``:
    ``memory.peak_accelerator_bytes``, ``time.ttft_s.median``), scores and every other measurement (``time.encode_fps``)
    ``higher``."""
    if metric is not None and any(COST_PART.fullmatch(part) for part in metric.split(".")):
        return "lower"
    return "higher"


def _column(block: Mapping[str, Any], where: str) -> ColumnSpec:
    _check_keys(block, COLUMN_KEYS, where)
    if (block.get("score") is None) == (block.get("metric") is None):
        raise SpecError(
            f"{where}: give exactly one of `score` (a path into metrics.json's scores) or `metric` (a path into "
            f"metrics.json, e.g. memory.peak_accelerator_bytes)"
        )
    metric = None if block.get("metric") is None else str(block["metric"])
    if metric is not None:
        given = sorted(k for k in ("paired", "published") if block.get(k))
        if given:
            raise SpecError(f"{where}: {given} apply to scores (per question, published); a metric column has none")
        if metric.split(".", 1)[0] == "scores":
            raise SpecError(f"{where}: metric {metric!r} is a score; write it as `score: {metric.split('.', 1)[-1]}`")
    elif "scale" in block:
        raise SpecError(f"{where}: `scale` is a metric's unit; a score is shown as scored")
    scale = _scale(block, where)
    column = ColumnSpec(
        benchmark=str(_require(block, "benchmark", where)),
        score=None if metric is not None else str(block["score"]),
        label=str(block.get("label") or block.get("score") or metric),
        group=block.get("group"),
        published=block.get("published"),
        decimals=int(block.get("decimals", 1)),
        better=str(block.get("better", default_better(metric))),
        paired=bool(block.get("paired", False)),
        metric=metric,
        scale=float(scale),
        where=dict(_mapping(block.get("where") or {}, f"{where}.where")),
        versus=None if block.get("versus") is None else str(block["versus"]),
    )
    if column.versus is not None and not column.paired:
        raise SpecError(f"{where}: `versus` names the other side of a paired column: add `paired: true`")
    if column.better not in ("higher", "lower"):
        raise SpecError(f"{where}: better must be 'higher' or 'lower', got {column.better!r}")
    return column


def _explicit_row(block: Mapping[str, Any], n_stub: int, where: str) -> RowSpec:
    _check_keys(block, {"id", "stub", "match", "published"}, where)
    stub = _strings(_require(block, "stub", where))
    if len(stub) != n_stub:
        raise SpecError(f"{where}: stub has {len(stub)} cells but the table's stub header has {n_stub}")
    if ("match" in block) == ("published" in block):
        raise SpecError(f"{where}: give exactly one of `match` (a run row) or `published` (a reference row)")
    if "published" in block:
        _check_keys(block["published"], set(PUBLISHED_FIELDS), f"{where}.published")
    match = dict(block["match"] or {}) if "match" in block else None
    return RowSpec(str(block.get("id") or stub[0]), stub, match, block.get("published"))


def _auto_rows(block: Mapping[str, Any], n_stub: int, where: str) -> AutoRows:
    _check_keys(block, {"by", "stub", "names", "order", "where"}, where)
    by = _strings(_require(block, "by", where))
    stub = _strings(block.get("stub") or ["{" + "} {".join(by) + "}"])
    if len(stub) != n_stub:
        raise SpecError(f"{where}: stub templates have {len(stub)} cells but the stub header has {n_stub}")
    names = {k: {str(v): str(label) for v, label in m.items()} for k, m in (block.get("names") or {}).items()}
    return AutoRows(by, stub, names, dict(block.get("order") or {}), dict(block.get("where") or {}))


def parse_table(block: Mapping[str, Any], where: str = "table") -> TableSpec:
    """One table spec from its YAML block (plain containers)."""
    name = str(_require(block, "name", where))
    _stem(name, where, "--out")
    if name == "runs":
        raise SpecError(f"{where}: a table named 'runs' would be overwritten by the report's runs.csv: rename it")
    where = f"{where} {name!r}"
    if "source" in block:
        _check_keys(block, {"name", "caption", "source", "notes"}, where)
        if ":" not in str(block["source"]):
            raise SpecError(f"{where}: source must be 'module:function', got {block['source']!r}")
        notes = _strings(block.get("notes") or ())
        return TableSpec(name, str(block.get("caption", "")), source=str(block["source"]), notes=notes)
    allowed = {
        "name",
        "caption",
        "stub",
        "columns",
        "rows",
        "reference",
        "bold",
        "baseline",
        "notes",
        "tau",
        "budget_mib",
    }
    _check_keys(block, allowed, where)
    stub = _strings(block.get("stub") or ["Method"])
    given = _items(_require(block, "columns", where), f"{where}.columns")
    columns = tuple(_column(c, f"{where}.columns[{i}]") for i, c in enumerate(given))
    for i, column in enumerate(columns):
        others = [c.label for c in columns if c.score == column.score and c is not column]
        if column.versus is not None and column.versus not in others:
            raise SpecError(
                f"{where}.columns[{i}]: versus {column.versus!r} is not another column of the same score "
                f"(have: {others})"
            )
    rows_block = _require(block, "rows", where)
    if isinstance(rows_block, Mapping):
        rows: tuple[RowSpec, ...] | AutoRows = _auto_rows(rows_block, len(stub), f"{where}.rows")
    else:
        given = _items(rows_block, f"{where}.rows")
        rows = tuple(_explicit_row(r, len(stub), f"{where}.rows[{i}]") for i, r in enumerate(given))
        ids = [r.id for r in rows]
        if len(set(ids)) != len(ids):
            raise SpecError(f"{where}: row ids must be unique, got {ids}")
        if "reference" in block:
            raise SpecError(f"{where}: `reference` is for generated rows; give explicit rows a `published` filter")
    bold = block.get("bold", {})
    if bold is False:
        bold_by, bold_exclude = None, {}
    else:
        _check_keys(bold, {"by", "exclude"}, f"{where}.bold")
        bold_by, bold_exclude = _strings(bold.get("by") or ()), dict(bold.get("exclude") or {})
    reference = block.get("reference")
    if reference is not None:
        _check_keys(reference, set(PUBLISHED_FIELDS), f"{where}.reference")
    tau = block.get("tau")
    scores = [c.label for c in columns if c.score is not None]
    if tau is not None and str(tau) not in scores:
        raise SpecError(f"{where}: tau must be the label of a score column ({', '.join(scores)}), got {tau!r}")
    budget_mib = block.get("budget_mib")
    if budget_mib is not None and not _positive(budget_mib):
        raise SpecError(
            f"{where}: budget_mib must be a positive number of MiB (the bytes every row is compared at), "
            f"got {budget_mib!r}"
        )
    return TableSpec(
        name=name,
        caption=str(block.get("caption", "")),
        stub=stub,
        columns=columns,
        rows=rows,
        reference=dict(reference) if reference else None,
        bold_by=bold_by,
        bold_exclude=bold_exclude,
        baseline=None if block.get("baseline") is None else str(block["baseline"]),
        notes=_strings(block.get("notes") or ()),
        tau=None if tau is None else str(tau),
        budget_mib=None if budget_mib is None else float(budget_mib),
    )


def parse_experiment(block: Any, where: str = "table") -> ExperimentSpec:
    """The whole ``table`` block: a table, a list of tables, or ``{tables: [...], figures: [...]}``."""
    if block is None:
        raise SpecError(f"{where}: the experiment file has no `table:` block; add one (see infinipotv/results/spec.py)")
    figures = None
    if isinstance(block, Mapping) and "tables" in block:
        _check_keys(block, {"tables", "figures"}, where)
        if block.get("figures") is not None:
            given = _items(block["figures"], f"{where}.figures")
            figures = tuple(_figure(f, f"{where}.figures[{i}]") for i, f in enumerate(given))
            stems = [f.stem() for f in figures]
            for i, stem in enumerate(stems):
                if stem in stems[:i]:
                    raise SpecError(
                        f"{where}.figures[{stems.index(stem)}] and [{i}] both write figures/{stem}: give one a "
                        f"`name` (the later would overwrite the earlier)"
                    )
        block = block["tables"]
        names = {t.get("name") for t in (block if isinstance(block, list) else [block]) if isinstance(t, Mapping)}
        for i, figure in enumerate(figures or ()):
            if figure.kind == "table" and figure.table not in names:
                raise SpecError(f"{where}.figures[{i}]: table {figure.table!r} is not a table of this experiment")
    if not isinstance(block, (Mapping, list)):
        raise SpecError(
            f"{where}: must be a table (a mapping), a list of tables or {{tables: [...], figures: [...]}}, got "
            f"{block!r}"
        )
    tables = [block] if isinstance(block, Mapping) else list(block)
    parsed = tuple(parse_table(t, f"{where}[{i}]") for i, t in enumerate(tables))
    names = [t.name for t in parsed]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: table names must be unique (they are file names), got {names}")
    return ExperimentSpec(parsed, figures)


def _figure(block: Mapping[str, Any], where: str) -> FigureSpec:
    _check_keys(block, {"kind", "benchmark", "score", "where", "metric", "scale", "name", "table", "from", "to"}, where)
    kind = str(_require(block, "kind", where))
    if kind not in FIGURE_KINDS:
        raise SpecError(f"{where}: kind must be one of {', '.join(FIGURE_KINDS)}, got {kind!r}")
    if (kind == "table") != (block.get("table") is not None):
        raise SpecError(f"{where}: `table` (the name of a table of this experiment) goes with kind table")
    if (kind == "arrows") != (block.get("from") is not None or block.get("to") is not None):
        raise SpecError(f"{where}: `from` and `to` (the runs an arrow joins, as rows' `where`) go with kind arrows")
    if kind == "arrows":
        for key in ("from", "to"):
            if not block.get(key) or not isinstance(block[key], Mapping):
                raise SpecError(f"{where}: arrows needs `{key}`, a mapping of run keys (e.g. {{label: upstream}})")
    if (kind.startswith("accuracy_vs_") or kind == "arrows") and not (block.get("benchmark") and block.get("score")):
        raise SpecError(f"{where}: {kind} needs `benchmark` and `score`")
    if kind == "metric_vs_budget" and not block.get("benchmark"):
        raise SpecError(f"{where}: metric_vs_budget needs `benchmark` (whose runs it draws) and `metric`")
    if kind == "metric_vs_budget" and block.get("score") is not None:
        raise SpecError(f"{where}: metric_vs_budget draws `metric` (a path into metrics.json), not a `score`")
    if (kind in ("accuracy_vs_metric", "metric_vs_budget")) != (block.get("metric") is not None):
        raise SpecError(
            f"{where}: `metric` (a path into metrics.json: accuracy_vs_metric's x axis, metric_vs_budget's y axis) "
            "goes with those two kinds"
        )
    metric = None if block.get("metric") is None else str(block["metric"])
    name = block.get("name")
    if name is not None:
        _stem(str(name), where, "figures/")
    return FigureSpec(
        kind,
        block.get("benchmark"),
        block.get("score"),
        dict(block.get("where") or {}),
        metric,
        _scale(block, where),
        None if name is None else str(name),
        None if block.get("table") is None else str(block["table"]),
        dict(block.get("from") or {}),
        dict(block.get("to") or {}),
    )
