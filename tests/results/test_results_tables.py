"""The INT4 study's Tables 1 and 2 regenerated from run directories, in markdown and LaTeX, with bold and marks."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from infinipotv.results import SpecError, add_stats, build_table, parse_table, to_latex, to_markdown
from infinipotv.results.report import load_experiment

REPO = Path(__file__).resolve().parents[2]

# (value, bold) per column, as printed in the seed study (shared/seeds/004), bold = best among the 6K methods.
TABLE1 = {
    "InfiniPot-V reproduced (TaR+VaN+Pool)": [
        ("74.6", 1),
        ("61.4", 0),
        ("52.4", 0),
        ("62.8", 0),
        ("78.9", 1),
        ("71.5", 0),
        ("44.0", 0),
        ("65.8", 0),
    ],
    "Ours (TaR+VaN+Pool + INT4 KIVI)": [
        ("74.2", 0),
        ("62.0", 1),
        ("54.2", 1),
        ("63.5", 1),
        ("77.6", 0),
        ("72.7", 1),
        ("44.8", 1),
        ("66.1", 1),
    ],
    "Full KV (ours)": [("–", 0)] * 4 + [("76.1", 0), ("74.8", 0), ("43.1", 0), ("66.1", 0)],
    "Full KV (InfiniPot-V paper)†": [(v, 0) for v in ("74.7", "62.1", "55.0", "63.9", "76.3", "73.9", "43.3", "65.9")],
    "InfiniPot-V (paper)†": [(v, 0) for v in ("74.1", "60.8", "53.4", "62.8", "77.2", "72.3", "44.8", "65.8")],
}
TABLE2 = {  # Ego ties at 63.9: both bold
    "FP16": [("87.8", 1), ("70.0", 1), ("72.7", 0), ("78.0", 0), ("63.9", 1), ("52.9", 0), ("35.0", 1), ("65.8", 0)],
    "INT4 KIVI": [
        ("86.7", 0),
        ("68.5", 0),
        ("74.2", 1),
        ("80.0", 1),
        ("63.9", 1),
        ("55.6", 1),
        ("34.0", 0),
        ("66.1", 1),
    ],
}
EXPECTED = {"main": TABLE1, "mlvu_tasks": TABLE2}


def markdown_rows(text: str) -> dict[str, list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("| ").split(" | ")] for line in lines[2:])}


def latex_rows(text: str) -> dict[str, list[str]]:
    body = text.split(r"\midrule")[1].split(r"\bottomrule")[0]
    lines = body.strip().splitlines()
    return {cells[0]: cells for cells in ([c.strip() for c in line.rstrip(r"\ ").split(" & ")] for line in lines)}


def parse_markdown(cell: str) -> tuple[str, int]:
    return (cell[2:-2], 1) if cell.startswith("**") else (cell, 0)


def parse_latex(cell: str) -> tuple[str, int]:
    match = re.fullmatch(r"\\textbf\{(.*)\}", cell)
    return (match.group(1), 1) if match else ("–" if cell == "--" else cell, 0)


FORMATS = {
    "md": (to_markdown, markdown_rows, parse_markdown, lambda s: s),
    "tex": (to_latex, latex_rows, parse_latex, lambda s: s.replace("†", r"$^\dagger$")),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", EXPECTED)
def test_seed_tables_reproduced_with_bold(name, fmt, runs, published, int4_spec):
    render, rows_of, parse, label = FORMATS[fmt]
    spec = next(t for t in int4_spec.tables if t.name == name)
    rows = rows_of(render(build_table(spec, runs, published, "int4_vs_fp16")))
    for stub, expected in EXPECTED[name].items():
        cells = rows[label(stub)]
        assert [parse(c) for c in cells[-len(expected) :]] == expected, stub


def test_table_marks_published_missing_and_n(runs, published, int4_spec):
    table = build_table(int4_spec.tables[0], runs, published, "int4_vs_fp16")
    text = to_markdown(table, show_n=True)
    rows = markdown_rows(text)
    assert rows["InfiniPot-V reproduced (TaR+VaN+Pool)"][3:5] == ["**74.6** (n=500)", "61.4 (n=500)"]
    assert rows["Ours (TaR+VaN+Pool + INT4 KIVI)"][-1] == "**66.1** (n=2174)"
    assert rows["Full KV (ours)"][-4] == "76.1 (n=463)"  # holistic = topic_reasoning 263 + anomaly_reco 200
    assert "† Published reference row (int4_study_seed004)" in text and "– No run" in text
    assert r"{\scriptsize (500)}" in to_latex(table, show_n=True)
    assert "(n=" not in to_markdown(table)


@pytest.mark.parametrize("partial_kv", [("int4",), ("int4", "fp16")])
def test_partial_cells_marked_and_only_compete_among_themselves(partial_kv, runs, published, int4_spec):
    spec = int4_spec.tables[1]
    marked = [dataclasses.replace(r, complete=False) if r.fields["kv"] in partial_kv else r for r in runs]
    table = build_table(spec, marked, published)
    int4 = next(r for r in table.rows if r.id == "int4")
    assert all(c.partial for c in int4.cells)
    assert re.search(r"74\.2(\*\*)?‡", to_markdown(table))
    assert re.search(r"74\.2\}?\$\^\\ddagger\$", to_latex(table))
    bold = [[int(c.bold) for c in r.cells] for r in table.rows]
    # one complete cell has nobody to beat; when all are partial, they compete as usual
    assert bold == ([[0] * 8] * 2 if len(partial_kv) == 1 else [[b for _, b in TABLE2[k]] for k in TABLE2])


def test_generated_rows_sorted_with_reference_rows(runs, published):
    _, spec = load_experiment(REPO / "experiments" / "budget_sweep.yaml")
    sweep = [r for r in runs if r.fields["policy"] == "tar_van_pool" and r.fields["kv"] == "fp16"]
    table = build_table(spec.tables[0], sweep, published)
    order = [(r.stub, r.published) for r in table.rows]
    assert order[0] == (("Uniform Select", "6K"), True)
    assert order[1:] == [(("InfiniPot-V", b), pub) for b in ("3K", "6K", "12K", "24K") for pub in (False, True)]
    ours_6k = next(r for r in table.rows if r.id == "tar_van_pool/6000")
    assert [round(c.value, 2) if c.value else None for c in ours_6k.cells] == [62.8, 65.76, None]
    assert not any(c.bold for r in table.rows for c in r.cells)  # one run row per budget: nothing to compare
    own = build_table(spec.tables[0], runs, published, "budget_sweep")  # the experiment's own runs by default
    assert [r.id for r in own.rows if not r.published] == [f"tar_van_pool/{b}" for b in (3000, 12000, 24000)]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine installed")
def test_latex_compiles(runs, published, int4_spec, tmp_path: Path):
    tables = [build_table(t, runs, published) for t in int4_spec.tables[:2]]
    for table in tables:
        add_stats(table, n_boot=200)
    tables += paired_tables(runs, published, int4_spec)  # with group headers over the three-column paired cells
    body = "".join(to_latex(t, show_n=True, show_stats=True) for t in tables)
    document = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}" + body + "\\end{document}"
    (tmp_path / "t.tex").write_text(document)
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]


def paired_tables(runs, published, int4_spec):
    """The INT4 study's first two tables with their first column ``paired``, statistics added."""
    tables = []
    for spec in int4_spec.tables[:2]:
        first = dataclasses.replace(spec.columns[0], paired=True)
        table = build_table(dataclasses.replace(spec, columns=(first, *spec.columns[1:])), runs, published)
        add_stats(table, n_boot=200)
        tables.append(table)
    return tables


def test_paired_column_shows_count_and_difference_with_ci(runs, published, int4_spec):
    table = paired_tables(runs, published, int4_spec)[0]
    text = to_markdown(table)
    header = next(line for line in text.splitlines() if line.startswith("| "))
    label = table.spec.columns[0].label
    assert f" {label} | n | Δ {label} (95% CI) |" in header
    rows = markdown_rows(text)
    checked = 0
    for row in table.rows:
        cells = rows[row.stub[0] + ("†" if row.published else "")]
        n_cell, diff_cell = cells[len(row.stub) + 1], cells[len(row.stub) + 2]
        cell = row.cells[0]
        if row.id == table.baseline:
            assert diff_cell == "(baseline)"
        elif cell.stat is not None:
            s = cell.stat
            assert diff_cell == f"{s.diff:+.1f} [{s.ci_low:+.1f}, {s.ci_high:+.1f}]".replace("-0.0", "+0.0")
            assert s.ci_low <= s.diff <= s.ci_high
            checked += 1
        else:
            assert diff_cell == "–"
        assert n_cell == ("–" if cell.n is None else f"{cell.n:,}")
    assert checked, "no row had paired statistics"
    assert "Δ = the row minus" in text


GOOD = {
    "name": "t",
    "columns": [{"benchmark": "mlvu", "score": "avg"}],
    "rows": [{"stub": ["A"], "match": {"kv": "fp16"}}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"columns": None}, "`columns` is required"),
        ({"colour": "red"}, "unknown key(s) ['colour']"),
        ({"rows": [{"stub": ["A"], "match": {}, "published": {}}]}, "exactly one of `match`"),
        ({"rows": [{"stub": ["A", "B"], "match": {"kv": "fp16"}}]}, "stub has 2 cells"),
        ({"columns": [{"benchmark": "mlvu", "score": "avg", "better": "more"}]}, "better must be"),
        ({"rows": [{"stub": ["A"], "match": {}}, {"stub": ["A"], "match": {}}]}, "row ids must be unique"),
        ({"rows": [{"stub": ["A"], "published": {"source": "nowhere"}}]}, "no published row matches"),
        ({"rows": {"by": ["policy"], "stub": ["{colour}"]}}, "template field {colour} is unknown"),
    ],
)
def test_bad_specs_fail_with_a_message(change, message, runs, published):
    with pytest.raises(SpecError, match=re.escape(message)):
        build_table(parse_table({**GOOD, **change}), runs, published)
