"""Configs whose label is not what would run, or whose values no run can honour, refused when the config is
validated (one line naming the option and the fix), before anything runs: a ``quant.bits`` the quant's name
contradicts, a budget no stream reaches, a StreamingTOM window wider than |M|."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.factory import validate
from tests.helpers import run_py
from tests.hostile.test_config_knobs import assert_refused, composed

REFUSED = [
    (
        ["quant=fp16", "quant.bits=4"],
        r"^quant.bits=4 disagrees with quant=fp16, which stores 16 bits: choose quant=int4 for 4-bit storage, or "
        r"drop quant.bits$",
    ),
    (
        ["quant=int4", "quant.bits=16"],
        r"^quant.bits=16 disagrees with quant=int4, which stores 4 bits: choose quant=fp16 \(or bf16\) for 16-bit",
    ),
    (["quant=bf16", "quant.bits=8"], r"^quant.bits=8 disagrees with quant=bf16, .*choose quant=int8"),
    (["quant.name=kivi4", "quant.bits=4"], r"^quant.name='kivi4' is unknown; valid: fp16, bf16, int2, int4, int8$"),
    (
        ["compress.budget=99999999999999999999"],
        r"^compress.budget gives \|M\| = 99999999999999999999 tokens, more than any stream holds \(at most "
        r"2,147,483,647\): give a real budget",
    ),
    (
        ["compress=streamingtom", "compress.budget=144", "compress.window=500"],
        r"^compress: window=500 is more tokens than \|M\| = 144: set compress.window to at most 144 \(or null: "
        r"upstream's share of \|M\|, 55 tokens\)$",
    ),
]


@pytest.mark.parametrize("overrides, refused", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_a_label_or_value_that_cannot_run_is_refused_when_validated(overrides, refused):
    """quant.bits against the quant's name, a budget past any stream, a StreamingTOM window past |M|: one line"""
    assert_refused(overrides, refused)


def test_the_shipped_quant_choices_and_a_window_within_the_budget_pass():
    """Every conf/quant choice at its own bits, and StreamingTOM's window up to |M|, pass validation"""
    for quant in ("fp16", "bf16", "int2", "int4", "int8"):
        validate(composed(f"quant={quant}", "compress=swa", "compress.budget=144"))
    validate(composed("compress=streamingtom", "compress.budget=144", "compress.window=144"))


def test_run_py_refuses_a_mislabelled_quant_before_writing_anything(tmp_path: Path):
    """run.py quant=fp16 quant.bits=4 exits 2 with one line and writes no run"""
    run_dir = tmp_path / "run"
    done = run_py("quant=fp16", "quant.bits=4", f"run_dir={run_dir}", timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: quant.bits=4 disagrees with quant=fp16")
    assert "Traceback" not in done.stderr and not (run_dir / "predictions.jsonl").exists()
