"""Every bench script runs end to end at tiny sizes (``--smoke``) and leaves its JSON, from which the report renders:
the scripts cannot rot. Performance itself is never asserted here; the benches measure it side by side in one run."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from bench.report import SECTIONS, render

SCRIPTS = (
    "kivi_throughput",
    "memory",
    "overhead",
    "ttft",
    "encode_counts",
    "gpu_table_a4",
    "host_memory",
    "default_run",
    "threads",
)


@pytest.fixture(autouse=True)
def _restore_threads():
    """The scripts set torch's thread count (--threads): give the other tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[dict[str, Any], Path]]:
    """``bench.NAME --smoke`` run once per script (what it returned, its output folder): the generic test and a
    script's own checks read the same run. A bench writes its JSON only; bench.report renders the report."""
    done: dict[str, tuple[dict[str, Any], Path]] = {}

    def run(name: str) -> tuple[dict[str, Any], Path]:
        if name not in done:
            out = tmp_path_factory.mktemp(name)
            data = importlib.import_module(f"bench.{name}").main(["--smoke", "--threads", "1", "--out", str(out)])
            assert not (out / "report.md").exists(), f"bench.{name} wrote the report"
            done[name] = (data, out)
        return done[name]

    return run


@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_script_runs_in_smoke_mode(name: str, smoke: Callable) -> None:
    _, tmp_path = smoke(name)
    result = json.loads((tmp_path / f"{name}.json").read_text())
    assert result["bench"] == name and result["smoke"] is True
    report = render(tmp_path).read_text()
    assert "Smoke run" in report and "Not run yet" in report  # this section filled, the others pending
    for figure in (line.split("](")[1].rstrip(")") for line in report.splitlines() if line.startswith("![")):
        assert (tmp_path / figure).stat().st_size > 0


def test_memory_smoke_checks_the_claims_on_its_data(smoke: Callable) -> None:
    """The flatness and byte-accounting checks are computed from the recorded steps, for every configuration."""
    data, _ = smoke("memory")
    runs = {(r["policy"], r["quant"]): r for r in data["runs"]}
    assert set(runs) == {(p, q) for p in ("full", "tar_van_pool") for q in ("fp16", "int4")}
    for (policy, _), run in runs.items():
        assert [c["multiple"] for c in run["checkpoints"]] == [1.0, 4.0, 16.0]
        grows = run["checkpoints"][-1]["peak_cache_bytes"] > 2 * run["checkpoints"][0]["peak_cache_bytes"]
        assert grows == (policy == "full")
    assert "analytic" in runs[("full", "int4")] and "analytic" not in runs[("full", "fp16")]


def test_report_renders_with_no_results(tmp_path: Path) -> None:
    text = render(tmp_path).read_text()
    assert text.count("Not run yet") == len(SECTIONS)


def test_kivi_throughput_smoke_measures_its_ratios_and_errors(smoke: Callable) -> None:
    """The one codec path is timed beside the reference, quanto and a copy, a ratio to each from the run (measured,
    not claimed), every dequantized tensor is within the codec's error bound and equal to ours, and the streaming
    loop runs each cache."""
    data, tmp_path = smoke("kivi_throughput")
    impls = {r["impl"] for r in data["codec"]}
    assert {"ours", "reference", "copy"} <= impls <= {"ours", "reference", "quanto", "copy"}
    assert len(data["ratios"]) == 2 * 2 * 2 * (3 if "quanto" in impls else 2)  # bits x axes x ops x others
    assert "claims" not in data and "Claims (issue 19, CPU)" not in render(tmp_path).read_text()
    for row in data["codec"]:
        if row["impl"] != "copy":
            assert row["within_bound"] and row["dequantized_equals_ours"], row
    caches = {(r["impl"], r["bits"]) for r in data["stream"]["rows"]}
    assert {("dynamic_cache", None), ("kivi_store", 4), ("kivi_store", 2)} <= caches
    assert (("quanto_cache", 4) in caches) == ("quanto" in impls)


def test_gpu_table_a4_smoke_checks_the_gpu_claims_and_profiles(smoke: Callable) -> None:
    """The GPU script, at tiny shapes on the CPU: the issue's three claims computed from its runs and a profile of
    the InfiniPot-V int4 stream, as the device run will write them."""
    data, tmp_path = smoke("gpu_table_a4")
    assert [c["claim"].split(" ")[0] for c in data["claims"]] == ["passes", "passes", "int4"]
    assert all(isinstance(c["holds"], bool) for c in data["claims"])
    rows = data["profile"]["rows"]
    assert 0 < len(rows) <= 15 and all(r["self_ms"] >= 0 for r in rows)
    assert "Where the time goes" in render(tmp_path).read_text()
