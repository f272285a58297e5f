"""The field's table runs as written: every sweep of the cluster experiment (peers_table) and of the CPU study
(cpu_peers, each `sweep` line of its script) composes into jobs that the launcher's sweep check accepts, each job in a
run directory of its own, and every row of the experiments' tables is filled by exactly one job per benchmark; the
INT4 rows the methods cannot take are refused by the check, as the experiment file says."""

from __future__ import annotations

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
from omegaconf import OmegaConf

from hydra_plugins.infinipotv_launcher.sweep_check import check_sweep
from infinipotv import factory
from infinipotv.config import register_configs
from infinipotv.factory import as_run_config, build_benchmark
from infinipotv.results.collect import _flatten
from infinipotv.results.report import load_experiment
from infinipotv.results.spec import AutoRows
from infinipotv.results.tables import matches

ROOT = Path(__file__).resolve().parents[2]
PEERS = ["swa", "van", "tar_van", "van_pool", "tar_van_pool", "rekv", "livevlm", "streammem", "streamingvlm"]
CLUSTER_SWEEPS = [  # experiments/peers_table.yaml's three sweeps, as its header gives them
    [],
    ["quant=int4", "compress=" + ",".join(PEERS[:-1])],
    ["quant=int4", "compress=streamingvlm", "model=qwen2vl"],
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

    monkeypatch.setattr(factory, "as_run_config", recording)  # what plan_job calls, so each job is composed once
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
            **_flatten(OmegaConf.to_container(OmegaConf.structured(cfg))),
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


def _rows_filled(name: str, jobs: list[dict]) -> dict[str, Counter]:
    """Per table of the experiment: how many jobs each (policy, kv) row gets per benchmark."""
    _, spec = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    filled = {}
    for table in spec.tables:
        assert isinstance(table.rows, AutoRows)
        benchmarks = {c.benchmark for c in table.columns}
        filled[table.name] = Counter(
            (j["policy"], j["kv"], j["benchmark"])
            for j in jobs
            if j["benchmark"] in benchmarks and matches(j, table.rows.where)
        )
    return filled


def test_the_cluster_table_composes_every_job_and_the_sweep_check_accepts_it(
    cluster_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [j for command in CLUSTER_SWEEPS for j in _sweep("peers_table", command, cluster_data, monkeypatch)]
    assert len(jobs) == 60 + 48 + 3 + 6
    assert len({j["run_dir"] for j in jobs}) == len(jobs)  # one run directory each, across the sweeps
    assert {j["compress.budget"] for j in jobs} == {6000, None} and {j["eval.chunk_frames"] for j in jobs} == {4}
    filled = _rows_filled("peers_table", jobs)
    rows = {
        "qwen2vl": {(p, "fp16") for p in [*PEERS, "streamingtom", "full"]} | {(p, "int4") for p in PEERS},
        "llava_ov": {(p, "fp16") for p in [*PEERS, "streamingtom", "full"]} | {(p, "int4") for p in PEERS[:-1]},
    }
    for table, counts in filled.items():
        model = table.removesuffix("_cost")
        expected = {(*row, b): 1 for row in rows[model] for b in ("mlvu", "videomme", "streamingbench")}
        assert dict(counts) == expected, table


@pytest.mark.parametrize(
    ("command", "refusal"),
    [
        (["quant=int4", "compress=streamingtom", "model=qwen2vl"], "quant= does not apply"),
        (["quant=int4", "compress=streamingvlm", "model=llava_ov"], "pos_mode=shrink re-rotates stored keys"),
    ],
)
def test_the_int4_rows_a_method_cannot_take_are_refused(
    cluster_data: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], refusal: str
) -> None:
    with pytest.raises(CompactHydraException) as err:
        _sweep("peers_table", [*command, "benchmark=mlvu"], cluster_data, monkeypatch)
    assert "1 of 1 jobs cannot run" in str(err.value) and refusal in str(err.value)


def test_the_cpu_study_composes_every_job_and_fills_each_table_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = _script_sweeps()
    assert len(sweeps) == 11
    jobs = [j for command in sweeps for j in _sweep("cpu_peers", command, tmp_path, monkeypatch)]
    assert len(jobs) == 47 and len({j["run_dir"] for j in jobs}) == 47
    assert {
        (j["benchmark.options.n_videos"], j["benchmark.options.n_needles"], j["eval.chunk_frames"]) for j in jobs
    } == {(20, 10, 2)}
    rows = {(p, "fp16") for p in [*PEERS, "streamingtom", "full"]} | {("tar_van_pool", "int4")}
    filled = _rows_filled("cpu_peers", jobs)
    for table, counts in filled.items():
        assert dict(counts) == {(*row, "symbolic"): 1 for row in rows}, table
    background = [j for j in jobs if j["benchmark.options.background_rows"] == 1]
    assert len(background) == 12 and {tuple(j["benchmark.options.grid"]) for j in background} == {(4, 4)}
