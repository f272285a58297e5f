"""README's "at equal bytes INT4 holds 330 tokens instead of 144", from the factory's own byte accounting: 330 with
the study's 32-token KIVI residual, 144 with ``quant=int4``'s default of 128, and the README says which is which."""

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


def test_readme_names_the_setting() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    claim = readme.split("At equal bytes INT4 holds 330 tokens instead of 144", 1)[1].split("- **", 1)[0]
    assert "compress.budget_mib=3.3921" in claim and "quant.residual_length=32" in claim
    assert "residual of 128 tokens" in claim and "they hold 144 tokens, as in FP16" in claim
