"""The field's table runs as written: every sweep of the cluster experiment (peers_table) and of the CPU study
(cpu_peers, each `sweep` line of its script) composes into jobs that the launcher's sweep check accepts, each job in a
run directory of its own, and every row of the experiments' tables is filled by exactly one job per benchmark; the
INT4 rows the methods cannot take are refused by the check, as the experiment file says."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import CompactHydraException

from hydra_plugins.infinipotv_launcher.sweep_check import check_sweep
from infinipotv import config
from infinipotv.config import as_run_config, register_configs
from infinipotv.factory import build_benchmark
from infinipotv.results.collect import _flatten
from infinipotv.results.report import load_experiment
from infinipotv.results.spec import AutoRows
from infinipotv.results.tables import matches

ROOT = Path(__file__).resolve().parents[2]
PEERS = ["swa", "van", "tar_van", "van_pool", "tar_van_pool", "rekv", "livevlm", "streammem", "streamingvlm"]
# issue 43's methods: rows of the cluster table only (the CPU study has not run them yet)
CLUSTER_ONLY = ["streamkv", "weavetime", "mukv"]
INT4_CLUSTER = [*PEERS[:-1], *CLUSTER_ONLY[:-1]]  # the sweep's INT4 rows: not StreamingVLM's nor MuKV's (yet)
CLUSTER_SWEEPS = [  # experiments/peers_table.yaml's three sweeps, as its header gives them
    [],
    ["quant=int4", "compress=" + ",".join(INT4_CLUSTER)],
    ["compress=full", "compress.budget=null"],
]


def _script_sweeps() -> list[list[str]]:
    """The overrides of every ``sweep`` line of experiments/cpu_peers.sh."""
    text = (ROOT / "experiments" / "cpu_peers.sh").read_text()
    return [shlex.split(m, comments=True) for m in re.findall(r"^\s*sweep (\S.*)$", text, flags=re.M)]


def _sweep(name: str, command: list[str], sweep_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """``run.py -m +experiment=NAME COMMAND`` as the launcher plans it: the experiment's sweep params crossed (the
    command's own keys winning, a comma list swept), every job composed and checked by the sweep check; each job as
    the fields a table row matches on, from the run config the check composed."""
    composed = []

    def recording(cfg: Any) -> Any:
        composed.append(as_run_config(cfg))
        return composed[-1]

    monkeypatch.setattr(config, "as_run_config", recording)  # what plan_job calls, so each job is composed once
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        fixed = [o for o in command if "," not in o.split("=", 1)[1] or "[" in o]
        swept = {o.split("=", 1)[0]: o.split("=", 1)[1].split(",") for o in command if o not in fixed}
        master = compose(
            "config",
            overrides=[f"hydra.sweep.dir={sweep_dir}", f"+experiment={name}", *fixed],
            return_hydra_config=True,
        )
        given = {o.split("=", 1)[0] for o in command}
        params = {k: str(v).split(",") for k, v in master.hydra.sweeper.params.items() if k not in given}
        params.update(swept)
        overrides = [  # a job's overrides are the whole command line's, as Hydra's sweeper hands them on
            [f"+experiment={name}", *fixed, *(f"{k}={v}" for k, v in zip(params, combo))]
            for combo in itertools.product(*params.values())
        ]
        composed.clear()  # the master's own composition is no job
        planned = check_sweep(GlobalHydra.instance().config_loader(), master, overrides)
    assert len(composed) == len(planned) and len({job.run_dir for job in planned}) == len(planned)
    return [
        {
            **_flatten(dataclasses.asdict(cfg)),
            "policy": cfg.compress.name,
            "kv": cfg.quant.name,
            "benchmark": cfg.benchmark.name,
            "run_dir": job.run_dir,
        }
        for job, cfg in zip(planned, composed)
    ]


@pytest.fixture
def cluster_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty stand-ins where the check looks for the real benchmarks' data (it checks presence, reads nothing)."""
    monkeypatch.setenv("INFINIPOTV_DATA", str(tmp_path / "data"))
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for benchmark in ("mlvu", "videomme", "streamingbench"):
            bench = build_benchmark(as_run_config(compose("config", overrides=[f"benchmark={benchmark}"])))
            bench.annotations.parent.mkdir(parents=True, exist_ok=True)
            bench.annotations.write_bytes(b"")
            bench.root.mkdir(parents=True, exist_ok=True)
    return tmp_path / "runs"


def _rows_filled(name: str, jobs: list[dict]) -> Counter:
    """How many jobs fill each (table, policy, kv, benchmark) cell group of the experiment's tables."""
    _, spec = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    filled: Counter = Counter()
    for table in spec.tables:
        assert isinstance(table.rows, AutoRows)
        benchmarks = {c.benchmark for c in table.columns}
        filled.update(
            (table.name, j["policy"], j["kv"], j["benchmark"])
            for j in jobs
            if j["benchmark"] in benchmarks and matches(j, table.rows.where)
        )
    return filled


ALL = [*PEERS, "streamingtom"]
BENCHMARKS = ("mlvu", "videomme", "streamingbench")
# peers_table's sweeps split by model (a sweep over both models is these two), with the rows each fills: model ->
# (methods, storage); both of the model's tables (accuracy, cost) take each job
CLUSTER_ALL = [*ALL, *CLUSTER_ONLY]
CLUSTER_CASES = [
    (["model=qwen2vl"], {"qwen2vl": (CLUSTER_ALL, "fp16")}),
    (["model=llava_ov"], {"llava_ov": (CLUSTER_ALL, "fp16")}),
    (["model=qwen2vl", *CLUSTER_SWEEPS[1]], {"qwen2vl": (INT4_CLUSTER, "int4")}),
    (["model=llava_ov", *CLUSTER_SWEEPS[1]], {"llava_ov": (INT4_CLUSTER, "int4")}),
    (CLUSTER_SWEEPS[2], {"qwen2vl": (["full"], "fp16"), "llava_ov": (["full"], "fp16")}),
]


@pytest.mark.parametrize(("command", "rows"), CLUSTER_CASES, ids=[" ".join(c) or "fp16" for c, _ in CLUSTER_CASES])
def test_every_job_of_the_cluster_table_composes_passes_the_sweep_check_and_fills_its_row(
    cluster_data: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], rows: dict
) -> None:
    jobs = _sweep("peers_table", command, cluster_data, monkeypatch)
    assert {j["compress.budget"] for j in jobs} <= {6000, None} and {j["eval.chunk_frames"] for j in jobs} == {4}
    expected = {
        (table, policy, kv, benchmark): 1
        for model, (methods, kv) in rows.items()
        for table in (model, f"{model}_cost")
        for policy in methods
        for benchmark in BENCHMARKS
    }
    gated = [(p, kv) for methods, kv in rows.values() for p in methods if p == "weavetime"]
    expected.update({("weavetime_gate", p, kv, b): 1 for p, kv in gated for b in BENCHMARKS})  # a row per model, KV
    assert dict(_rows_filled("peers_table", jobs)) == expected


def test_the_cluster_cases_are_the_documented_sweeps_and_every_table_row() -> None:
    """The cases above split peers_table's documented sweeps by model, and cover each row of its tables once."""
    header = (ROOT / "experiments" / "peers_table.yaml").read_text()
    assert all(f"-m +experiment=peers_table {' '.join(c)}".rstrip() in header for c in CLUSTER_SWEEPS)
    covered = Counter((m, p, kv) for _, rows in CLUSTER_CASES for m, (ps, kv) in rows.items() for p in ps)
    for model in ("qwen2vl", "llava_ov"):  # StreamingVLM: no INT4 (shrink)
        wanted = {(model, p, "fp16") for p in [*CLUSTER_ALL, "full"]} | {(model, p, "int4") for p in INT4_CLUSTER}
        assert {k for k in covered if k[0] == model} == wanted and set(covered.values()) == {1}


@pytest.mark.parametrize(
    ("command", "refusal"),
    [
        (["quant=int4", "compress=streamingtom", "model=qwen2vl"], "quant= does not apply"),
        (["quant=int4", "compress=streamingtom", "model=llava_ov"], "its own 4-bit store, OQM"),
    ],
)
def test_the_int4_rows_a_method_cannot_take_are_refused(
    cluster_data: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], refusal: str
) -> None:
    with pytest.raises(CompactHydraException) as err:
        _sweep("peers_table", [*command, "benchmark=mlvu"], cluster_data, monkeypatch)
    assert "1 of 1 jobs cannot run" in str(err.value) and refusal in str(err.value)


SCRIPT = _script_sweeps()
INT4_BYTES = ["tar_van_pool"]
QUARTER = ["tar_van_pool"]  # the 1/4 rows, trimmed to InfiniPot-V to fit 150 minutes
# what each `sweep` line of experiments/cpu_peers.sh fills: its tables, methods and storage (the full cache has no
# budget, so seed 0's plain run is the full-cache row of both the 1/8 and the 1/4 table)
SCRIPT_ROWS = [
    (("eighth",), ALL, "fp16"),
    (("eighth", "quarter"), ["full"], "fp16"),
    (("eighth",), INT4_BYTES, "int4"),
    (("quarter",), QUARTER, "fp16"),
    (("quarter",), INT4_BYTES, "int4"),
    (("background_eighth",), ["rekv", "livevlm", "streammem", "van_pool"], "fp16"),
    (("background_eighth",), INT4_BYTES, "int4"),
    (("seed1_eighth",), ALL, "fp16"),
    (("seed1_eighth",), INT4_BYTES, "int4"),
    (("seed1_eighth",), ["full"], "fp16"),
    (("background_eighth",), ["swa", "van", "tar_van", "tar_van_pool", "streamingvlm", "streamingtom"], "fp16"),
    (("background_eighth",), ["full"], "fp16"),
]


ABLATIONS = ["van", "tar_van", "van_pool", "tar_van_pool"]  # the attribution tables' rows, paired with VaN
ATTRIBUTION = {
    "eighth": "attribution",
    "seed1_eighth": "seed1_attribution",
    "background_eighth": "background_attribution",
}


def _cells(tables: tuple[str, ...], methods: list[str], kv: str) -> list[tuple[str, str]]:
    """The (table, method) cells a sweep line fills: its tables' rows, and InfiniPot-V's FP16 ablations again in the
    attribution table of their stream and seed."""
    cells = [(t, p) for t in tables for p in methods]
    attribution = [(ATTRIBUTION[t], p) for t in tables if t in ATTRIBUTION for p in methods if p in ABLATIONS]
    return cells + (attribution if kv == "fp16" else [])


@pytest.mark.parametrize(("command", "rows"), list(zip(SCRIPT, SCRIPT_ROWS)), ids=[" ".join(c) for c in SCRIPT])
def test_every_sweep_of_the_cpu_study_composes_passes_the_sweep_check_and_fills_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], rows: tuple
) -> None:
    jobs = _sweep("cpu_peers", command, tmp_path, monkeypatch)
    assert {
        (j["benchmark.options.n_videos"], j["benchmark.options.n_needles"], j["eval.chunk_frames"]) for j in jobs
    } == {(20, 10, 2)}
    if any(j["benchmark.options.background_rows"] for j in jobs):
        assert {(tuple(j["benchmark.options.grid"]), j["model.max_pixels"]) for j in jobs} == {((4, 4), 64 * 64)}
    tables, methods, kv = rows
    assert dict(_rows_filled("cpu_peers", jobs)) == {(t, p, kv, "symbolic"): 1 for t, p in _cells(tables, methods, kv)}


def test_the_cpu_study_fills_every_row_of_its_tables_once() -> None:
    """The script's 12 sweeps (38 runs) cover each table's rows once: every method in FP16 (the 1/4 table InfiniPot-V
    alone), InfiniPot-V in INT4 at equal bytes, the full cache; the attribution tables InfiniPot-V's FP16
    ablations on each stream and seed."""
    assert len(SCRIPT) == len(SCRIPT_ROWS) == 12
    assert sum(len(methods) for _, methods, _ in SCRIPT_ROWS) == 38
    covered = Counter((t, p, kv) for tables, methods, kv in SCRIPT_ROWS for t, p in _cells(tables, methods, kv))
    assert set(covered.values()) == {1}
    for table in ("eighth", "quarter", "seed1_eighth", "background_eighth"):
        fp16 = QUARTER if table == "quarter" else ALL
        rows = {(p, "fp16") for p in [*fp16, "full"]} | {("tar_van_pool", "int4")}
        assert {k[1:] for k in covered if k[0] == table} == rows, table
    for table in ATTRIBUTION.values():
        assert {k[1:] for k in covered if k[0] == table} == {(p, "fp16") for p in ABLATIONS}, table
