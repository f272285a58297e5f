"""The parity command on lmms-eval's own scoring of fixed replies that hit every parser quirk
(tests/lmms/scripted_replies.py): exact numbers, and the strict parser's differences shown and explained."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.lmms.lmms_data import NO_LMMS

pytestmark = [pytest.mark.lmms, pytest.mark.slow]
pytest.importorskip("lmms_eval", reason=NO_LMMS)

from infinipotv.lmms.parity import format_report, main, parity  # noqa: E402
from tests.lmms.cli import samples_file  # noqa: E402

# task -> (lmms-eval's number, ours as run.py reports it, strict parser in lmms-eval's convention, strict diffs)
EXPECTED = {
    "videomme_local": (75.0, 75.0, 25.0, 3),  # D/A/C/A read from "the answer is B, Dog", "DATA", "Bees and Cats", "A"
    "mlvu_dev_local": (150 / 7, 75.0, 200 / 7, 1),  # 2 of 7 tasks present: lmms-eval counts the other 5 as 0
    "egoschema_subset_local": (None, None, 0.5, 1),  # one reply is unparseable: a random draw each side
    "longvideobench_val_v_local": (0.5, 50.0, 1.0, 1),  # "Answer: B" reads A
}


@pytest.mark.parametrize("task", EXPECTED)
def test_exact_parity_and_strict_differences(scripted_run: Path, task: str) -> None:
    lmms_value, ours_own, strict_value, n_diffs = EXPECTED[task]
    report = parity(samples_file(scripted_run, task))
    assert report.exact and not report.mismatches
    if lmms_value is not None:
        assert math.isclose(report.lmms_value, lmms_value) and math.isclose(report.ours, report.lmms_value)
        assert math.isclose(report.scores["overall"], ours_own)
    assert math.isclose(report.strict_value, strict_value)
    assert len(report.strict_diffs) == n_diffs
    text = format_report(report)
    assert "parity: EXACT" in text and f"Strict parser differs on {n_diffs} questions" in text
    assert all(json.dumps(d["output"]) in text for d in report.strict_diffs)


def test_random_draws_are_listed_and_use_lmms_evals_letter(scripted_run: Path) -> None:
    report = parity(samples_file(scripted_run, "egoschema_subset_local"))
    (draw,) = report.draws
    assert draw["output"] == "no idea at all" and draw["strict"] is None
    assert "Random draws" in format_report(report)


def test_reasoning_blocks_are_parsed_as_lmms_eval_saw_them(scripted_run: Path) -> None:
    report = parity(samples_file(scripted_run, "videomme_local"))
    assert report.stripped == 1 and "reasoning blocks" in format_report(report)


def test_a_disagreement_fails_and_is_shown(scripted_run: Path, tmp_path: Path, capsys) -> None:
    lines = [json.loads(s) for s in samples_file(scripted_run, "videomme_local").read_text().splitlines()]
    lines[0]["videomme_perception_score"]["pred_answer"] = "B"  # as if lmms-eval had read the strict way
    doctored = tmp_path / "20990101_000000_samples_videomme_local.jsonl"
    doctored.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main([str(doctored)]) == 1  # no results file here: lmms-eval's number is recomputed from its parses
    out = capsys.readouterr().out
    assert "recomputed from the samples' parses" in out and "parity: DIFFERENT -- 1 parse mismatches" in out


def test_bad_input_is_named(scripted_run: Path, tmp_path: Path, capsys) -> None:
    assert main([str(samples_file(scripted_run, "mlvu_dev_local")), "--task", "videomme"]) == 2
    assert "is it a samples file of videomme" in capsys.readouterr().err
    assert main([str(samples_file(scripted_run, "mlvu_dev_local")), "--task", "perceptiontest"]) == 2
    assert "parity covers" in capsys.readouterr().err
    other = tmp_path / "answers.jsonl"
    other.write_text("{}\n")
    assert main([str(other)]) == 2
    assert "pass --task" in capsys.readouterr().err
