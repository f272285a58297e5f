"""A built :class:`~infinipotv.results.tables.Table` as markdown or LaTeX (booktabs), with footnotes.

Marks: bold = best among comparable rows; † = published reference row; ‡ = from a partial run (a benchmark subset or
an incomplete run); – = no value; on a row's name, § = its accelerator peak exceeds the budget's bytes (the table's
``budget_mib`` where it sets one) and ¶ = it never evicted (:attr:`~infinipotv.results.collect.Run.over_budget`,
:attr:`~infinipotv.results.collect.Run.never_evicts`).
``show_n`` adds each cell's question count; ``show_stats`` adds a second table of paired differences against the
baseline row. A column marked ``paired`` is followed by two more in the main table: its question count and its paired
difference against the baseline row with the 95% CI. A table with ``tau`` ends with a line of Kendall's tau-b.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

import pandas as pd

from infinipotv.results.collect import Run
from infinipotv.results.spec import ColumnSpec
from infinipotv.results.tables import CHOICE_RULE, Cell, Row, Table

DAGGER, DDAGGER, DASH = "†", "‡", "–"
OVER_BUDGET, NEVER_EVICTS = "§", "¶"
LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    DASH: "--",
    DAGGER: r"$^\dagger$",
    OVER_BUDGET: r"\S{}",
    NEVER_EVICTS: r"\P{}",
    DDAGGER: r"$^\ddagger$",
    "Δ": r"$\Delta$",
}


# Accents a bare ``article`` typesets under pdflatex (OT1 fonts): combining mark -> accent command.
LATEX_ACCENTS = {
    "\u0300": "`",
    "\u0301": "'",
    "\u0302": "^",
    "\u0303": "~",
    "\u0304": "=",
    "\u0306": "u",
    "\u0307": ".",
    "\u0308": '"',
    "\u030a": "r",
    "\u030b": "H",
    "\u030c": "v",
    "\u0327": "c",
    "\u0328": "k",
}
LATEX_TEXT = {  # typography and symbols a table may carry, spelled for a bare article
    "–": "--",
    "—": "---",
    "‘": "`",
    "’": "'",
    "“": "``",
    "”": "''",
    "…": r"\ldots{}",
    "×": r"$\times$",
    "±": r"$\pm$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "→": r"$\rightarrow$",
    "°": r"$^\circ$",
    "µ": r"$\mu$",
    "ß": r"\ss{}",
    "æ": r"\ae{}",
    "Æ": r"\AE{}",
    "ø": r"\o{}",
    "Ø": r"\O{}",
    "å": r"\aa{}",
    "Å": r"\AA{}",
    "œ": r"\oe{}",
    "Œ": r"\OE{}",
    "ł": r"\l{}",
    "Ł": r"\L{}",
    "ı": r"\i{}",
    "\u00a0": "~",
}
GREEK_SMALL = set(
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau upsilon phi chi psi "
    "omega".split()
)
GREEK_CAPITALS = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Upsilon", "Phi", "Psi", "Omega"}


class LatexError(ValueError):
    """Text with a character a bare pdflatex document cannot typeset; the message names it and the fix."""


def _latex_char(ch: str, text: str) -> str:
    """One character as LaTeX that compiles in a bare ``article`` under pdflatex, or :class:`LatexError`."""
    if ch in LATEX_SPECIAL:
        return LATEX_SPECIAL[ch]
    if ch.isascii():
        return ch
    if ch in LATEX_TEXT:
        return LATEX_TEXT[ch]
    base, *marks = unicodedata.normalize("NFD", ch)
    if base.isascii() and base.isalpha() and marks and all(m in LATEX_ACCENTS for m in marks):
        out = "\\i" if base == "i" else base  # dotless i under an accent, as LaTeX writes it
        for mark in marks:
            out = f"\\{LATEX_ACCENTS[mark]}{{{out}}}"
        return out
    name = unicodedata.name(ch, "")
    greek = re.fullmatch(r"GREEK (SMALL|CAPITAL) LETTER (FINAL )?(\w+)", name)
    if greek and greek.group(3).lower() in GREEK_SMALL:
        letter = greek.group(3).lower()
        if greek.group(1) == "SMALL":
            return f"$\\{letter}$"
        if letter.capitalize() in GREEK_CAPITALS:
            return f"$\\{letter.capitalize()}$"
    raise LatexError(
        f"{text!r} holds {ch!r} ({name or f'U+{ord(ch):04X}'}), which a plain pdflatex document cannot typeset: "
        f"spell it in Latin letters in the experiment file (or the run's config), or use --format md"
    )


def latex_escape(text: str) -> str:
    """``text`` as LaTeX that compiles in a bare ``article`` under pdflatex (no package beyond booktabs): specials
    escaped, accented Latin letters as accent commands, Greek letters in math; any other script is refused."""
    text = str(text)
    return "".join(_latex_char(ch, text) for ch in text)


def markdown_escape(text: str) -> str:
    """A table cell's text for markdown: a ``|`` would end the cell."""
    return str(text).replace("|", "\\|")


def _header(column: ColumnSpec) -> str:
    return f"{column.group} {column.label}" if column.group else column.label


def _signed(value: float, decimals: int) -> str:
    return f"{round(value, decimals) + 0.0:+.{decimals}f}"  # + 0.0: no "-0.0" for a tie


def _over(table: Table, run: Run) -> bool:
    """The § mark: the run's accelerator peak exceeds the bytes the table compares its rows at (its own budget's
    bytes unless the table sets ``budget_mib``). A run with no budget of its own (the full cache) is the reference,
    not a row held to the table's bytes."""
    if table.spec.budget_bytes is None or run.metrics.get("budget_bytes") is None:
        return run.over_budget
    return run.exceeds(table.spec.budget_bytes)


def _notes(table: Table, stats_shown: bool) -> list[str]:
    cells = [c for r in table.rows for c in r.cells]
    notes = []
    sources = sorted({r.source for r in table.rows if r.published})
    if sources:
        notes.append(f"{DAGGER} Published reference row ({', '.join(sources)}); not part of the bold comparison.")
    if any(c.partial for c in cells):
        notes.append(f"{DDAGGER} From a partial run (a subset of the benchmark, or incomplete): compare with care.")
    runs = [run for r in table.rows for run in r.runs.values()]
    if any(_over(table, run) for run in runs):
        notes.append(
            f"{OVER_BUDGET} Its measured accelerator peak exceeds the budget's bytes: it was not held to the memory "
            f"it is compared at (off the Pareto front)."
        )
    if any(run.never_evicts for run in runs):
        notes.append(f"{NEVER_EVICTS} It never evicted: it held every token it streamed, so its budget bound nothing.")
    if any(c.missing for c in cells):
        notes.append(f"{DASH} No run, or no questions, for this cell.")
    if table.taus:
        notes.append(
            f"Kendall's τ: tau-b of each column's ranking of the rows against {table.spec.tau}'s (+1 the same order, "
            f"-1 reversed), over the rows that have both (their number in brackets)."
        )
    if table.choices:
        notes.append(f"Several runs fit a row: {CHOICE_RULE}. " + " ".join(f"{c}." for c in table.choices))
    if stats_shown and table.baseline:
        notes.append(
            f"Differences vs {table.baseline}: paired on shared question ids; 95% bootstrap CI "
            f"({table.n_boot:,} resamples, stratified by score weight); p = exact McNemar test."
        )
    return notes + list(table.spec.notes)


class _Format:
    """The few things markdown and LaTeX spell differently."""

    def __init__(self, latex: bool) -> None:
        self.latex = latex
        self.text: Callable[[str], str] = latex_escape if latex else markdown_escape

    def bold(self, text: str) -> str:
        return rf"\textbf{{{text}}}" if self.latex else f"**{text}**"

    def cell(self, cell: Cell, column: ColumnSpec, show_n: bool) -> str:
        if cell.missing:
            return self.text(DASH)
        text = f"{cell.value:.{column.decimals}f}"
        text = self.bold(text) if cell.bold else text
        if cell.partial:
            text += self.text(DDAGGER)
        if show_n and cell.n is not None:
            text += rf"\,{{\scriptsize ({cell.n})}}" if self.latex else f" (n={cell.n})"
        return text

    def stat(self, cell: Cell, column: ColumnSpec) -> str:
        s = cell.stat
        if s is None:
            return self.text(DASH)
        d = column.decimals
        ci = f"[{_signed(s.ci_low, d)}, {_signed(s.ci_high, d)}]"
        if self.latex:
            return rf"${_signed(s.diff, d)}$ {{\scriptsize ${ci}$, $p={s.p_value:.2g}$}}"
        return f"{_signed(s.diff, d)} {ci} p={s.p_value:.2g}"

    def paired(self, row: Row, cell: Cell, column: ColumnSpec, baseline: str | None) -> list[str]:
        """The count and the difference-with-CI cells that follow a ``paired`` column."""
        n = self.text(DASH) if cell.n is None else f"{cell.n:,}"
        if row.id == baseline and not cell.missing and column.versus is None:
            return [n, self.text("(baseline)")]
        s = cell.stat
        if s is None:
            return [n, self.text(DASH)]
        d = column.decimals
        text = f"{_signed(s.diff, d)} [{_signed(s.ci_low, d)}, {_signed(s.ci_high, d)}]"
        return [n, f"${text}$" if self.latex else text]

    def stub(self, row: Row, table: Table) -> list[str]:
        cells = [self.text(s) for s in row.stub]
        if row.published:
            cells[0] += self.text(DAGGER)
        runs = row.runs.values()
        marks = OVER_BUDGET * any(_over(table, r) for r in runs) + NEVER_EVICTS * any(r.never_evicts for r in runs)
        cells[0] += self.text(marks)
        return cells


def _grid(table: Table, fmt: _Format, show_n: bool, stats: bool) -> list[list[str]]:
    if stats:
        rows = [r for r in table.rows if not r.published and r.id != table.baseline]
        return [fmt.stub(r, table) + [fmt.stat(c, col) for c, col in zip(r.cells, table.spec.columns)] for r in rows]
    grid = []
    for row in table.rows:
        line = fmt.stub(row, table)
        for cell, column in zip(row.cells, table.spec.columns):
            line.append(fmt.cell(cell, column, show_n))
            if column.paired:
                line += fmt.paired(row, cell, column, table.baseline)
        grid.append(line)
    if table.taus:
        grid.append(_tau_line(table, fmt))
    return grid


def _tau_line(table: Table, fmt: _Format) -> list[str]:
    """The table's last line: each score column's Kendall tau-b against the ``tau`` column's ranking."""
    line = [fmt.text(f"Kendall's τ vs {table.spec.tau}")] + [""] * (len(table.spec.stub) - 1)
    for j, column in enumerate(table.spec.columns):
        tau, n = table.taus.get(j, (None, 0))
        line.append("" if j not in table.taus else fmt.text(DASH) if tau is None else f"{tau:+.2f} ({n})")
        line += ["", ""] if column.paired else []
    return line


def _headers(table: Table, stats: bool, escape: Callable[[str], str]) -> list[str]:
    """The column headers; the main table's ``paired`` columns add theirs."""
    header = [escape(s) for s in table.spec.stub]
    for column in table.spec.columns:
        header.append(escape(_header(column)))
        if column.paired and not stats:
            versus = f" vs {column.versus}" if column.versus else ""
            header += [escape("n"), escape(f"Δ {column.label}{versus} (95% CI)")]
    return header


def _paired_note(table: Table) -> list[str]:
    paired = [c for c in table.spec.columns if c.paired]
    if not paired or not table.baseline:
        return []
    against = [] if all(c.versus for c in paired) else [f"Δ = the row minus {table.baseline}"]
    versus = [f"Δ {c.label} vs {c.versus} = the row's {c.label} minus its own {c.versus}" for c in paired if c.versus]
    unpaired = list(dict.fromkeys(table.unpaired))
    return [
        f"n = questions in the cell; {'; '.join(against + versus)} on the questions both answered, points, with its "
        f"95% bootstrap CI: a CI that excludes 0 is a significant difference."
        + (
            f" No Δ for {', '.join(unpaired)}: asked other questions than {table.baseline} (a subset, or another "
            "selection), so no pair of answers to compare."
            if unpaired
            else ""
        )
    ]


def _markdown_grid(header: Sequence[str], body: Sequence[Sequence[str]], n_stub: int) -> list[str]:
    align = [":--"] * n_stub + ["--:"] * (len(header) - n_stub)
    return ["| " + " | ".join(line) + " |" for line in [header, align, *body]]


def _frame_grid(frame: pd.DataFrame, escape: Callable[[str], str]) -> tuple[list[str], list[list[str]]]:
    header = [escape(str(c)) for c in frame.columns]
    return header, [[escape(str(v)) for v in row] for row in frame.itertuples(index=False)]


def to_markdown(table: Table, show_n: bool = False, show_stats: bool = False) -> str:
    """GitHub-flavoured markdown: caption line, table, footnotes (and the statistics table on request)."""
    spec, fmt = table.spec, _Format(latex=False)
    lines = [f"**{table.caption}**", ""] if table.caption else []
    if table.frame is not None:
        header, body = _frame_grid(table.frame, markdown_escape)
        return "\n".join(lines + _markdown_grid(header, body, 1) + [""] + table.footnotes + list(spec.notes)) + "\n"
    lines += _markdown_grid(_headers(table, False, fmt.text), _grid(table, fmt, show_n, False), len(spec.stub))
    show = show_stats and table.baseline is not None
    if show:
        lines += ["", f"**Paired difference vs {table.baseline}**", ""]
        lines += _markdown_grid(_headers(table, True, fmt.text), _grid(table, fmt, False, True), len(spec.stub))
    notes = _paired_note(table) + _notes(table, show)
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _latex_tabular(
    spec_cols: str, group_line: list[str], header: Sequence[str], body: Sequence[Sequence[str]]
) -> list[str]:
    lines = [rf"\begin{{tabular}}{{{spec_cols}}}", r"\toprule", *group_line, " & ".join(header) + r" \\", r"\midrule"]
    lines += [" & ".join(row) + r" \\" for row in body]
    return lines + [r"\bottomrule", r"\end{tabular}"]


def _group_header(table: Table, stats: bool) -> list[str]:
    """A \\multicolumn line over consecutive columns of one group, with \\cmidrule under each group (a ``paired``
    column spans three in the main table)."""
    columns, n_stub = table.spec.columns, len(table.spec.stub)
    if not any(c.group for c in columns):
        return []
    widths = [3 if c.paired and not stats else 1 for c in columns]
    cells, rules, j, first = [""] * n_stub, [], 0, n_stub + 1
    while j < len(columns):
        k = j
        while k + 1 < len(columns) and columns[k + 1].group == columns[j].group:
            k += 1
        group, span = columns[j].group, sum(widths[j : k + 1])
        cells.append(rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(group)}}}" if group else "")
        cells.extend([""] * (span - 1) if not group else [])
        if group:
            rules.append(rf"\cmidrule(lr){{{first}-{first + span - 1}}}")
        first += span
        j = k + 1
    return [" & ".join(cells) + r" \\", " ".join(rules)]


def to_latex(table: Table, show_n: bool = False, show_stats: bool = False) -> str:
    """A booktabs ``table`` environment (needs ``\\usepackage{booktabs}``), footnotes under the tabular; text a
    bare pdflatex document cannot typeset is a :class:`LatexError` naming the table."""
    try:
        return _latex(table, show_n, show_stats)
    except LatexError as err:
        raise LatexError(f"table {table.spec.name!r} as LaTeX: {err}") from None


def _latex(table: Table, show_n: bool, show_stats: bool) -> str:
    spec, fmt = table.spec, _Format(latex=True)
    lines = [r"\begin{table}[t]", r"\centering"]
    if table.caption:
        lines.append(rf"\caption{{{latex_escape(table.caption)}}}")
    lines.append(rf"\label{{tab:{spec.name}}}")
    if table.frame is not None:
        header, body = _frame_grid(table.frame, latex_escape)
        lines += _latex_tabular("l" * len(header), [], header, body)
        notes = table.footnotes + list(spec.notes)
    else:
        cols = "l" * len(spec.stub) + "".join("rrr" if c.paired else "r" for c in spec.columns)
        lines += _latex_tabular(
            cols, _group_header(table, False), _headers(table, False, latex_escape), _grid(table, fmt, show_n, False)
        )
        show = show_stats and table.baseline is not None
        if show:
            stat_cols = "l" * len(spec.stub) + "r" * len(spec.columns)
            lines += [r"\par\medskip", rf"Paired difference vs {latex_escape(table.baseline)}\par\smallskip"]
            lines += _latex_tabular(
                stat_cols,
                _group_header(table, True),
                _headers(table, True, latex_escape),
                _grid(table, fmt, False, True),
            )
        notes = _paired_note(table) + _notes(table, show)
    if notes:
        lines += [r"\par\smallskip", r"{\footnotesize " + r" \\ ".join(latex_escape(n) for n in notes) + "}"]
    return "\n".join(lines + [r"\end{table}"]) + "\n"
