"""The sweep check that runs before submission: every job composed and validated, run directories safe to resume,
and a sweep with one bad job rejected whole, naming the job, with nothing submitted (locally and on Slurm)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import CompactHydraException
from omegaconf import OmegaConf

from hydra_plugins.infinipotv_launcher.sweep_check import PlannedJob, check_sweep
from infinipotv.config import register_configs
from tests.helpers import ROOT
from tests.slurm.sweeps import run_dirs, slurm, slurm_job_ids, sweep

EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml"))
# Hydra's plugin scan re-executes every hydra_plugins module, so the SweepRejected class raised is not the one a test
# imported: catch its stable base class.
Rejected = CompactHydraException


def _check(sweep_dir: Path, jobs: list[list[str]], *hydra_overrides: str):
    """check_sweep as the launcher calls it: Hydra's config loader and the master config of ``run.py -m``."""
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        master = compose(
            "config", overrides=[f"hydra.sweep.dir={sweep_dir}", *hydra_overrides], return_hydra_config=True
        )
        return check_sweep(GlobalHydra.instance().config_loader(), master, jobs)


def test_every_job_of_a_valid_sweep_gets_its_own_run_directory(tmp_path):
    jobs = _check(tmp_path, [["quant=fp16"], ["quant=int8"], ["compress=tar_van_pool", "compress.budget=400"]])
    assert [j.problem for j in jobs] == [None] * 3
    assert len({j.run_dir for j in jobs}) == 3 and all(j.run_dir.parent == tmp_path for j in jobs)
    assert jobs[2].run_dir.name == "compress.budget=400,compress=tar_van_pool"  # its overrides, not its position


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (["compress=tar_van_pool", "compress.budget=null"], "needs a budget"),
        (["compress=tar_van_pool", "compress.budget=40"], "lower eval.chunk_frames or raise compress.budget"),
        (["compress.c_ratio=1.5"], "compress.c_ratio=1.5 must lie in (0, 1)"),
        (["quant.bits=3"], "quant.bits=3 is not supported"),
        (["model=tiny_qwen2vl", "eval.chunk_frames=3"], "eval.chunk_frames=3 must be a multiple of 2"),
        (["compress.alpha=high"], "compress.alpha"),
    ],
)
def test_one_bad_job_rejects_the_sweep_naming_its_overrides_and_problem(tmp_path, bad, needle):
    with pytest.raises(Rejected) as err:
        _check(tmp_path, [["quant=fp16"], bad, ["quant=int8"]])
    message = str(err.value)
    assert "1 of 3 jobs cannot run" in message and "nothing submitted" in message
    assert f"#1 {' '.join(bad)}: " in message and needle in message, message
    assert "#0" not in message and "#2" not in message


def test_two_jobs_sharing_a_run_directory_are_rejected(tmp_path):
    with pytest.raises(Rejected, match="#1 quant=int8: writes to the same run directory as #0 quant=fp16"):
        _check(tmp_path, [["quant=fp16"], ["quant=int8"]], "hydra.sweep.subdir=one_dir")


def test_a_run_directory_holding_another_config_is_not_resumed(tmp_path):
    (job,) = _check(tmp_path, [["quant=int8"]])
    job.run_dir.mkdir(parents=True)
    saved = OmegaConf.to_yaml(OmegaConf.structured(_run_config(["quant=int8"])))
    (job.run_dir / "config.yaml").write_text(saved)
    assert _check(tmp_path, [["quant=int8"]])[0].problem is None  # the same config: resume

    other = OmegaConf.create(saved)
    other.table = {"caption": "a table's looks are not what was run"}
    (job.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(other))
    assert _check(tmp_path, [["quant=int8"]])[0].problem is None

    other.seed = 7
    (job.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(other))
    with pytest.raises(Rejected, match=r"holds a run of another configuration \(seed: 7 -> 0\)"):
        _check(tmp_path, [["quant=int8"]])


def _run_config(overrides: list[str]):
    from infinipotv.config import as_run_config

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return as_run_config(compose("config", overrides=overrides))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_an_experiment_sweeps_into_its_own_fixed_directory(name):
    """``+experiment=NAME`` finds experiments/NAME.yaml and sweeps into results/runs/NAME at every launch, so
    resubmitting the sweep resumes its runs (a ${now:} folder would start them all over)."""
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={name}"], return_hydra_config=True)
    assert cfg.experiment == name
    assert cfg.hydra.sweep.dir == f"results/runs/{name}"


@pytest.mark.parametrize("launcher", ["hydra/launcher=local", pytest.param("+cluster=ci", marks=pytest.mark.slurm)])
def test_a_sweep_with_one_invalid_combination_submits_nothing(request, tmp_path, launcher):
    on_slurm = launcher.startswith("+cluster")
    if on_slurm:
        request.getfixturevalue("slurm_cluster")
    name = f"reject_{uuid.uuid4().hex[:8]}"
    out = sweep(
        tmp_path,
        "compress=full,tar_van_pool",
        "compress.budget=null",
        "eval.chunk_frames=4,8",
        f"hydra.launcher.name={name}",
        data=tmp_path,
        cluster=launcher,
        timeout=120,
    )
    assert out.returncode != 0
    assert "sweep rejected, nothing submitted: 2 of 4 jobs cannot run" in out.stderr, out.stderr[-3000:]
    assert (
        "compress=tar_van_pool compress.budget=null eval.chunk_frames=4: compress=tar_van_pool evicts tokens and "
        "needs a budget"
    ) in out.stderr
    assert "Traceback" not in out.stderr
    assert not run_dirs(tmp_path) and not slurm_job_ids(tmp_path)
    if on_slurm:
        assert not slurm("squeue", "-h", "-n", name).strip()
        assert not slurm("sacct", "-a", "-X", "-n", "--name", name, "-S", "now-1hour").strip()


@pytest.mark.parametrize("benchmark", ["mlvu", "videomme", "streamingbench"])
def test_a_sweep_without_its_data_is_refused_naming_the_variable_and_keys_to_set(tmp_path, monkeypatch, benchmark):
    monkeypatch.setenv("INFINIPOTV_DATA", str(tmp_path / "data"))
    with pytest.raises(Rejected) as err:
        _check(tmp_path, [[f"benchmark={benchmark}", "quant=fp16"], [f"benchmark={benchmark}", "quant=int8"]])
    message = str(err.value)
    assert "2 of 2 jobs cannot run" in message, message
    assert f"video root {tmp_path / 'data' / benchmark} and annotation file {tmp_path / 'data' / benchmark}/" in message
    assert (
        f"set INFINIPOTV_DATA to the folder that holds {benchmark}/ (now {tmp_path / 'data'}), or "
        f"benchmark.root=DIR and benchmark.annotations=FILE"
    ) in message


def test_a_sweep_whose_data_exists_passes_and_a_missing_annotation_file_alone_is_named(tmp_path, monkeypatch):
    from infinipotv.data.mlvu import MLVU

    root = tmp_path / "data" / "mlvu"
    (root / MLVU.default_annotations).parent.mkdir(parents=True)
    (root / MLVU.default_annotations).write_bytes(b"")  # existence is what the check can see without reading it
    monkeypatch.setenv("INFINIPOTV_DATA", str(tmp_path / "data"))
    assert _check(tmp_path, [["benchmark=mlvu"]])[0].problem is None
    with pytest.raises(
        Rejected,
        match=r"#0 benchmark=mlvu benchmark.annotations=.*: annotation file .*elsewhere.json "
        r"not found",
    ):
        _check(tmp_path, [["benchmark=mlvu", f"benchmark.annotations={tmp_path / 'elsewhere.json'}"]])


def test_the_symbolic_benchmark_is_generated_so_only_an_explicit_annotation_file_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("INFINIPOTV_DATA", str(tmp_path / "nothing_here"))
    assert _check(tmp_path, [["benchmark=symbolic"]])[0].problem is None
    with pytest.raises(Rejected, match="annotation file .*missing.json not found"):
        _check(tmp_path, [["benchmark=symbolic", f"benchmark.annotations={tmp_path / 'missing.json'}"]])


def test_the_array_is_named_after_its_experiment_and_what_its_jobs_vary(tmp_path):
    from hydra_plugins.infinipotv_launcher.sweep_check import job_name

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        master = compose("config", overrides=[f"hydra.sweep.dir={tmp_path}"], return_hydra_config=True)
        jobs = check_sweep(
            GlobalHydra.instance().config_loader(),
            master,
            [["compress=full", "quant=fp16"], ["compress=full", "quant=int8"]],
        )
        assert job_name(master, jobs) == "quant=fp16,int8"
        assert job_name(master, jobs[:1]) == "compress=full quant=fp16"
        assert job_name(master, [PlannedJob(0, ["+cluster=ci", "seed=1"], None)]) == "seed=1"  # as run dirs
        experiment = compose("config", overrides=["+experiment=int4_vs_fp16"], return_hydra_config=True)
        assert job_name(experiment, jobs) == "int4_vs_fp16 quant=fp16,int8"
