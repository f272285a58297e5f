"""The README's headline table and the differences its findings quote are the committed tables' own cells
(results/fair_peers/m144.csv, seed1_m144.csv, int4_field.csv, results/robustness/robustness.csv, int4_cue.csv, all
written by ``python -m infinipotv.results``): a re-rendered study and the first page cannot drift apart unnoticed,
and no number there is typed in by hand."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()
# the headline table's method names, as the README writes them, and their rows in results/fair_peers/m144
ROWS = {
    "Full cache": "full/upstream/fp16",
    "InfiniPot-V INT4 at equal bytes": "tar_van_pool/upstream/int4",
    "WeaveTime, gate at threshold 0 (tuned)": "weavetime/tuned/fp16",
    "StreamKV, c_ratio 0.25 (tuned)": "streamkv/tuned/fp16",
    "StreamingTOM, retain 6 (tuned) (§, ¶)": "streamingtom/tuned/fp16",
    "LiveVLM, c_ratio 0.25 (tuned)": "livevlm/tuned/fp16",
    "VaN": "van/upstream/fp16",
    "MuKV": "mukv/upstream/fp16",
    "ReKV": "rekv/upstream/fp16",
    "WeaveTime": "weavetime/upstream/fp16",
    "StreamKV": "streamkv/upstream/fp16",
    "InfiniPot-V (FP16)": "tar_van_pool/upstream/fp16",
    "StreamingTOM (§, ¶)": "streamingtom/upstream/fp16",
    "StreamMem": "streammem/upstream/fp16",
    "LiveVLM": "livevlm/upstream/fp16",
    "StreamingVLM (§)": "streamingvlm/upstream/fp16",
}


def _cells(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    """A rendered table's CSV as (row id, column label) -> its cell."""
    with path.open() as f:
        return {(r["row"], r["column"]): r for r in csv.DictReader(f)}


def _delta(cell: dict[str, str]) -> str:
    """A paired difference as the tables print it: ``+19.5 [+11.5, +27.5]``."""
    low, diff, high = (float(cell[k]) for k in ("ci_low", "diff", "ci_high"))
    return f"{diff:+.1f} [{low:+.1f}, {high:+.1f}]"


def _headline() -> dict[str, list[str]]:
    section = README.split("## The field at equal memory", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_the_headline_table_is_m144s_cells() -> None:
    table = _headline()
    assert set(table) == set(ROWS)
    cells = _cells(ROOT / "results" / "fair_peers" / "m144.csv")
    for name, row in ROWS.items():
        accuracy, delta, accel, host, _ = table[name]
        assert accuracy == f"{float(cells[(row, 'All')]['value']):.1f}", name
        if row != "tar_van_pool/upstream/fp16":
            assert delta == _delta(cells[(row, "All")]), name
        assert accel == f"{float(cells[(row, 'Accel. MiB')]['value']):.2f}", name
        host_mib = float(cells[(row, "Host MiB")]["value"])
        assert host == ("0" if host_mib == 0 else f"{host_mib:.2f}"), name


@pytest.mark.parametrize(
    ("table", "row", "column"),
    [
        ("fair_peers/m144", "van/upstream/fp16", "All"),
        ("fair_peers/seed1_m144", "van/upstream/fp16", "All"),
        ("fair_peers/m144", "tar_van_pool/upstream/int4", "All"),
        ("fair_peers/seed1_m144", "tar_van_pool/upstream/int4", "All"),
    ],
)
def test_every_quoted_difference_is_its_tables(table: str, row: str, column: str) -> None:
    cell = _cells(ROOT / "results" / f"{table}.csv")[(row, column)]
    findings = README.split("What holds on", 1)[1].split("\n## ", 1)[0]
    assert _delta(cell) in " ".join(findings.split()), (table, row, _delta(cell))


def test_no_difference_in_the_findings_is_unaccounted_for() -> None:
    """Every ``±x [±a, ±b]`` the findings paragraphs quote is one of the cells the test above checks, or a cell of
    the robustness table or of an INT4 field table: a new number in the README needs its cell named here."""
    findings = " ".join(README.split("What holds on", 1)[1].split("\n## ", 1)[0].split())
    quoted = re.findall(r"[+-]\d+\.\d \[[+-]\d+\.\d, [+-]\d+\.\d\]", findings)
    known = {
        _delta(c)
        for table in (
            "fair_peers/m144",
            "fair_peers/seed1_m144",
            "fair_peers/int4_field",
            "robustness/robustness",
            "robustness/int4_cue",
        )
        for c in _cells(ROOT / "results" / f"{table}.csv").values()
        if c["diff"]
    }
    assert quoted and not [q for q in quoted if q not in known]
