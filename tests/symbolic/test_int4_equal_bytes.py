""" "At equal bytes INT4 holds 330 tokens instead of 144" (README, docs/symbolic.md), from the factory's own byte
accounting: 330 with the study's 32-token KIVI residual, 144 with ``quant=int4``'s default of 128, and the docs say
which is which."""

from __future__ import annotations

import pytest

from infinipotv.factory import build_parts
from tests.helpers import ROOT
from tests.symbolic.conftest import compose_run

EQUAL_BYTES = ("quant=int4", "compress.budget=null", "compress.budget_mib=3.3921")  # FP16's 144 tokens + prefix


@pytest.mark.parametrize(
    ("overrides", "tokens"),
    [
        ((), 144),
        (("quant.residual_length=32",), 330),
        (("+experiment=cpu_symbolic",), 330),  # the study's runs
        (("compress.budget=144", "compress.budget_mib=null", "quant=fp16"), 144),
    ],
    ids=["int4_default_residual", "residual_32", "cpu_symbolic", "fp16_tokens"],
)
def test_what_the_bytes_hold(symbolic, overrides: tuple[str, ...], tokens: int) -> None:
    assert build_parts(compose_run(*EQUAL_BYTES, *overrides), symbolic).budget == tokens


def test_the_docs_name_the_setting() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    claim = readme.split("INT4 at equal bytes is", 1)[1].split("What holds", 1)[0]
    assert "compress.budget_mib=3.3921" in claim and "quant.residual_length=32" in claim
    assert "330 tokens instead of 144" in claim
    symbolic = " ".join((ROOT / "docs" / "symbolic.md").read_text().split())
    setting = symbolic.split("at equal bytes (3.3921 MiB:", 1)[1].split("- ", 1)[0]
    assert "330 tokens" in setting and "quant.residual_length=32" in setting
    assert "144 with `quant=int4`'s default of 128" in setting
