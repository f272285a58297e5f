"""The fair study runs as written (experiments/fair_peers.sh and .yaml): every `sweep` its lanes launch, expanded
by bash as the script expands it, composes into jobs the launcher's sweep check accepts (every method's split fits
the smallest budget with one-frame chunks), each job in a run directory of its own; the test runs fill every row of
the tables once per method, setting and storage; the equal-bytes MiB are the code's own."""

from __future__ import annotations

import math
import shlex
import subprocess
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from infinipotv.factory import build_adapter, build_parts
from infinipotv.models.base import ModelAdapter
from infinipotv.results.report import load_experiment
from infinipotv.results.spec import AutoRows
from infinipotv.results.tables import matches
from tests.results.test_peer_experiments import _sweep
from tests.symbolic.conftest import compose_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "fair_peers.sh"
TUNED = "rekv"  # the method the stand-in rule "chose" a setting for (the others keep their default)
# the experiment's own sweep: every method a plain `sweep` line runs
METHODS = yaml.safe_load((ROOT / "experiments" / "fair_peers.yaml").read_text())["hydra"]["sweeper"]["params"][
    "compress"
].split(",")


def _lane_sweeps(script: Path, end: str, lanes: tuple[str, ...]) -> dict[str, list[list[str]]]:
    """Every `sweep` of each lane function of ``script`` (its text before ``end``, where it starts running), as bash
    expands it (a stand-in `tuned` picks c_ratio 0.25 for TUNED and keeps every other method's default)."""
    body = script.read_text().split(end, 1)[0].replace("source experiments/study.sh", "")
    found = {}
    for lane in lanes:
        text = (
            f"{body}\nsweep() {{ printf '%q ' \"$@\"; echo; }}\n"
            f'tuned() {{ [ "$1" = {TUNED} ] && echo compress.c_ratio=0.25 || true; }}\n{lane}\n'
        )
        out = subprocess.run(["bash", "-c", text], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        found[lane] = [shlex.split(line) for line in out.splitlines() if line.strip()]
    return found


LANES = _lane_sweeps(SCRIPT, "\nphase=", ("dev_a", "dev_b", "m144_a", "m144_b", "test_a", "test_b"))
ROBUSTNESS = _lane_sweeps(ROOT / "experiments" / "robustness.sh", "\nmain\n", ("lane_a", "lane_b"))
SWEEPS = [("fair_peers", lane, command) for lane, commands in LANES.items() for command in commands]
SWEEPS += [("robustness", lane, command) for lane, commands in ROBUSTNESS.items() for command in commands]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("experiment", "lane", "command"), SWEEPS, ids=[f"{e} {lane}: {' '.join(c)}" for e, lane, c in SWEEPS]
)
def test_every_sweep_composes_and_passes_the_sweep_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, experiment: str, lane: str, command: list[str]
) -> None:
    jobs = _sweep(experiment, command, tmp_path, monkeypatch)
    assert {j["eval.chunk_frames"] for j in jobs} == {1}
    assert {(j["benchmark.seed"], j["benchmark.options.n_videos"]) for j in jobs} <= {(2, 10), (0, 20), (1, 20)}
    if lane.startswith("dev"):
        assert {j["benchmark.seed"] for j in jobs} == {2} and {j["label"] for j in jobs} == {None}


def test_the_test_runs_fill_every_row_once() -> None:
    """Seed 0 at every budget: each method at its upstream split, the tuned method again, InfiniPot-V in INT4 at
    equal bytes, the full cache, StreamKV with layer-adaptive retrieval; StreamingTOM at |M| = 576's bytes; seed 1
    at |M| = 144 the same; nothing else reaches a table."""
    _, spec = load_experiment(ROOT / "experiments" / "fair_peers.yaml")
    methods = [m for m in spec.tables[0].rows.order["policy"] if m != "full"]
    filled: Counter = Counter()
    for lane in ("test_a", "test_b"):
        for command in LANES[lane]:
            for job in _expand(command):
                for table in spec.tables:
                    assert isinstance(table.rows, AutoRows)
                    if matches(job, table.rows.where):
                        filled[(table.name, job["policy"], job["label"], job["kv"])] += 1
    want = Counter()
    for table in ("m72", "m144", "m288", "m576", "seed1_m144"):
        want.update({(table, m, "upstream", "fp16"): 1 for m in methods})
        want[(table, TUNED, "tuned", "fp16")] = 1
        want[(table, "full", "upstream", "fp16")] = 1
        want[(table, "tar_van_pool", "upstream", "int4")] = 1
        want[(table, "streamkv", "adaptive", "fp16")] = 1
    want[("m576", "streamingtom", "equal_bytes", "fp16")] = 1
    # the INT4 field: every method that takes KIVI at |M| = 144's bytes (InfiniPot-V's row counted above)
    want.update({("m144", m, "upstream", "int4"): 1 for m in methods if m not in ("streamingtom", "tar_van_pool")})
    want.update({("int4_field", m, "upstream", "fp16"): 1 for m in [*methods, "full"]})
    want.update({("int4_field", m, "upstream", "int4"): 1 for m in methods if m != "streamingtom"})
    assert dict(filled) == dict(want)


def test_the_m144_phase_runs_only_test_rows_at_144() -> None:
    """The m144 phase (the robustness study's default column, run first) adds no run of its own: each of its jobs
    is a test-phase job at |M| = 144 on seed 0, so the test phase resumes them."""

    def jobs(lanes: tuple[str, ...]) -> set[str]:
        return {repr(sorted(j.items())) for lane in lanes for c in LANES[lane] for j in _expand(c)}

    m144 = jobs(("m144_a", "m144_b"))
    assert m144 and m144 <= jobs(("test_a", "test_b"))
    assert all("('compress.budget', 144)" in j and "('benchmark.seed', 0)" in j for j in m144)


def test_the_robustness_lanes_fill_every_row_once_on_every_setting() -> None:
    """Each method at its upstream split, the tuned method again, the full cache and InfiniPot-V INT4 at equal bytes
    on each of the three settings (the default column is the fair study's own runs); the INT4 field on the kind cue
    (its own table, and rows of the main one beside the fair study's INT4 runs); nothing else reaches a table. And
    the rows the README's findings rest on run before any other on each lane."""
    experiment = "robustness"
    _, spec = load_experiment(ROOT / "experiments" / "robustness.yaml")
    assert isinstance(spec.tables[0].rows, AutoRows)
    methods = [m for m in spec.tables[0].rows.order["policy"] if m != "full"]
    filled: Counter = Counter()
    for lane in ("lane_a", "lane_b"):
        for command in ROBUSTNESS[lane]:
            for job in _expand(command, experiment):
                for table in spec.tables:
                    assert isinstance(table.rows, AutoRows)
                    for column in table.columns:  # the score columns of this study's runs (not the default's)
                        if column.score is None or column.where.get("experiment", experiment) != experiment:
                            continue
                        if matches(job, table.rows.where) and matches(job, column.where):
                            filled[(table.name, column.label, job["policy"], job["label"], job["kv"])] += 1
    want: Counter = Counter()
    for setting in ("Kind cue", "Lengths 3/6", "Background"):
        want.update({("robustness", setting, m, "upstream", "fp16"): 1 for m in methods})
        want[("robustness", setting, TUNED, "tuned", "fp16")] = 1
        want[("robustness", setting, "full", "upstream", "fp16")] = 1
        want[("robustness", setting, "tar_van_pool", "upstream", "int4")] = 1
    # the INT4 field's rows, beside the default column's INT4 runs of the fair study, as in its m144 table
    int4 = [m for m in methods if m not in ("streamingtom", "tar_van_pool")]
    want.update({("robustness", "Kind cue", m, "upstream", "int4"): 1 for m in int4})
    want.update({("int4_cue", "FP16", m, "upstream", "fp16"): 1 for m in [*methods, "full"]})
    want.update({("int4_cue", "INT4", m, "upstream", "int4"): 1 for m in methods if m != "streamingtom"})
    assert dict(filled) == dict(want)
    findings = {("tar_van_pool", "fp16"), ("tar_van_pool", "int4"), ("van", "fp16"), ("swa", "fp16")}
    for lane in ("lane_a", "lane_b"):
        jobs = [(j["policy"], j["kv"]) for c in ROBUSTNESS[lane] for j in _expand(c, experiment)]
        first = [j in findings for j in jobs]
        assert any(first) and first == sorted(first, reverse=True), lane  # the findings' rows, then the rest


def _expand(command: list[str], experiment: str = "fair_peers") -> list[dict]:
    """A sweep line's jobs as the fields tables match on, without composing (the sweeper's crossing of the
    experiment's params with the line's own, a comma list swept; a bracketed value is one list)."""
    base = {
        "experiment": experiment,
        "policy": None,
        "compress.budget": 144,
        "kv": "fp16",
        "label": None,
        "benchmark.seed": 0,
        "compress.budget_mib": None,
    }
    keys = {"compress": "policy", "quant": "kv"}
    swept = {"policy": ",".join(METHODS)}
    for item in command:
        key, value = item.split("=", 1)
        swept[keys.get(key, key)] = value
    jobs = [{}]
    for key, values in swept.items():
        items = [yaml.safe_load(values)] if values.startswith("[") else [_value(v) for v in values.split(",")]
        jobs = [{**j, key: v} for j in jobs for v in items]
    return [{**base, **j} for j in jobs]


def _value(text: str):
    if text == "null":
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


@lru_cache(maxsize=1)
def _symbolic() -> ModelAdapter:
    return build_adapter(compose_run())


@pytest.mark.parametrize(("budget", "mib"), [(72, 1.7853), (144, 3.3921), (288, 6.6056), (576, 13.0326)])
def test_equal_bytes_are_the_least_mib_that_hold_the_budget(budget: int, mib: float) -> None:
    """The script's MiB hold |M| and the prefix in FP16 (and no 4-decimal MiB less does); INT4 holds more tokens."""
    symbolic = _symbolic()
    fp16 = build_parts(compose_run("+experiment=fair_peers", f"compress.budget={budget}"), symbolic)
    assert mib == math.ceil(fp16.budget_bytes / 2**20 * 1e4) / 1e4
    overrides = ("+experiment=fair_peers", "quant=int4", "compress.budget=null", f"compress.budget_mib={mib}")
    int4 = build_parts(compose_run(*overrides), symbolic)
    assert int4.budget > budget and int4.byte_cap.cap <= mib * 2**20
    assert str(mib) in SCRIPT.read_text().split("MIB=(", 1)[1].split(")", 1)[0]
