"""End to end: lmms-eval's CLI runs our plugin (tiny Qwen2-VL, InfiniPot-V, KIVI INT4) on our local task overrides,
and our scorer reproduces its numbers from the samples file it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infinipotv.data.toy_lmms import our_config
from tests.lmms.lmms_data import NO_LMMS

pytestmark = [pytest.mark.lmms, pytest.mark.slow]
pytest.importorskip("lmms_eval", reason=NO_LMMS)

from infinipotv.data.loading import benchmark_class  # noqa: E402
from infinipotv.lmms.parity import family_of, parity  # noqa: E402
from tests.lmms.cli import TASKS, samples_file  # noqa: E402


def test_results_file_scores_every_task(plugin_run: Path) -> None:
    results = json.loads(plugin_run.read_text())
    assert set(TASKS) <= set(results["results"])
    for task in TASKS:
        assert f"{family_of(task).metric},none" in results["results"][task]
    assert results["config"]["model"] == "infinipotv"


@pytest.mark.parametrize("task", TASKS)
def test_prompts_are_our_benchmarks(plugin_run: Path, hf_home: Path, task: str) -> None:
    """lmms-eval's prompts (its own task code on our local files) equal our benchmark's, question by question."""
    lines = [json.loads(s) for s in samples_file(plugin_run, task).read_text().splitlines()]
    cfg = our_config(hf_home, task)
    ours = [q.prompt for s in benchmark_class(cfg.name)(cfg).load() for q in s.questions]
    assert [line["input"] for line in sorted(lines, key=lambda x: x["doc_id"])] == ours


@pytest.mark.parametrize("task", TASKS)
def test_our_scorer_reproduces_lmms_eval(plugin_run: Path, task: str) -> None:
    report = parity(samples_file(plugin_run, task))
    assert report.lmms_source.startswith("results file")
    assert not report.mismatches
    assert report.exact, (report.lmms_value, report.ours_with_their_draws)
    if not report.draws:
        assert report.ours == report.lmms_value


def test_parity_command(plugin_run: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "infinipotv.lmms.parity", str(samples_file(plugin_run, TASKS[0])), "--task", "videomme"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "parity: EXACT" in done.stdout and "| lmms-eval (results file" in done.stdout
