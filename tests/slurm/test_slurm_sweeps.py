"""Sweeps on a real Slurm cluster (slurm/start_slurm.sh): an array of four configurations (a benchmark and its three
shards, which merge into it), and a job preempted, then cancelled, that finishes on resubmission answering every
question exactly once.

Every job goes through ``python run.py -m +cluster=ci``: Hydra, the checking launcher, submitit, sbatch, and back.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from infinipotv.results import load_runs
from tests.slurm.sweeps import (
    by_question,
    comparable,
    metrics,
    predictions,
    run_dirs,
    sacct_states,
    slurm,
    slurm_job_ids,
    start_sweep,
    sweep,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]


def _check_complete_run(run_dir: Path) -> int:
    """The job's whole contract: config, every question answered once, metrics, memory trace, provenance."""
    records = predictions(run_dir)
    m = metrics(run_dir)
    assert m["complete"] and m["n_errors"] == 0, m
    assert len(records) == m["n_questions"] == m["n_expected"] == len({r["question_id"] for r in records}), run_dir
    assert (run_dir / "memory.jsonl").read_text().strip(), f"{run_dir}: empty memory trace"
    assert OmegaConf.load(run_dir / "provenance.json")["end"], f"{run_dir}: provenance without an end time"
    return len(records)


@dataclass
class ShardedSweep:
    sweep_dir: Path
    whole: Path  # the unsharded run
    shards: list[Path]


@pytest.fixture(scope="session")
def sharded(slurm_cluster, tmp_path_factory, big_data) -> ShardedSweep:
    """One array of four configurations: the whole benchmark and each of its three shards (the whole run is also the
    uninterrupted reference of the resume test)."""
    sweep_dir = tmp_path_factory.mktemp("sharded")
    out = sweep(sweep_dir, *big_data.overrides, "benchmark.shard=null,0/3,1/3,2/3", data=big_data.data)
    assert out.returncode == 0, out.stderr[-3000:]
    by_shard = {OmegaConf.load(d / "config.yaml").benchmark.shard: d for d in run_dirs(sweep_dir)}
    assert set(by_shard) == {None, "0/3", "1/3", "2/3"}, by_shard
    return ShardedSweep(sweep_dir, by_shard[None], [by_shard[f"{i}/3"] for i in range(3)])


def test_a_sweep_of_four_configurations_runs_as_one_array_and_completes(sharded, big_data):
    assert _check_complete_run(sharded.whole) == big_data.n_questions
    assert sum(_check_complete_run(d) for d in sharded.shards) == big_data.n_questions
    jobs = slurm_job_ids(sharded.sweep_dir)
    assert len(jobs) == 4 and len({j.split("_")[0] for j in jobs}) == 1, f"not one array of 4: {jobs}"
    for job in jobs:
        wait_for(lambda: sacct_states(job)[-1:] == ["COMPLETED"], 30, f"sacct to report job {job} COMPLETED")


def test_three_shards_merge_into_the_unsharded_run(sharded, big_data):
    shard_questions = [{r["question_id"] for r in predictions(d)} for d in sharded.shards]
    assert all(shard_questions), "a shard ran no question"
    assert sum(map(len, shard_questions)) == len(set().union(*shard_questions)) == big_data.n_questions
    assert all(metrics(d)["subset"]["is_subset"] for d in sharded.shards)

    runs = load_runs(sharded.sweep_dir)  # the results code: shards of one run merged, duplicates refused
    merged = [r for r in runs if len(r.dirs) == 3]
    whole = [r for r in runs if r.dirs == (sharded.whole,)]
    assert len(runs) == 2 and len(merged) == 1 and len(whole) == 1, [r.id for r in runs]
    assert merged[0].complete and not merged[0].subset, merged[0].problems
    assert by_question(merged[0].predictions) == by_question(whole[0].predictions)
    assert merged[0].scores == whole[0].scores


def test_preempted_then_cancelled_job_finishes_on_resubmission_answering_each_question_once(
    tmp_path, big_data, sharded
):
    total = big_data.n_questions
    sweeps = tmp_path / "sweeps"
    # A ${now:} sweep dir: submitit's requeue must land in it again (it pickles the resolved config); a resubmission
    # names it explicitly, as a researcher resuming that sweep would.
    launcher = start_sweep(
        sweeps / "${now:%H-%M-%S-%f}", *big_data.overrides, data=big_data.data, log=tmp_path / "launcher.log"
    )
    job = None
    try:
        found = wait_for(lambda: list(sweeps.glob("*/*/predictions.jsonl")), 150, "the job's first answers", every=0.3)
        preds = found[0]
        run_dir, sweep_dir = preds.parent, preds.parent.parent
        wait_for(lambda: len(predictions(run_dir)) >= 3, 60, "three answers")
        (job,) = slurm_job_ids(sweep_dir)

        slurm("scancel", "--signal=USR2", job)  # what Slurm sends before preemption or the time limit
        wait_for(lambda: "REQUEUED" in sacct_states(job), 60, f"submitit to requeue job {job}")
        at_preemption = len(predictions(run_dir))
        assert at_preemption < total, "the job finished before it was preempted: raise N_VIDEOS"
        wait_for(lambda: len(predictions(run_dir)) >= at_preemption + 2, 120, "the requeued job to answer more")

        slurm("scancel", job)
        wait_for(lambda: "CANCELLED" in "".join(sacct_states(job)[-1:]), 60, f"job {job} to be cancelled")
    finally:
        launcher.terminate()  # the login-node process would wait for sacct's verdict on the cancelled job
        launcher.wait(timeout=30)
        if job is not None:  # a failed wait above must not leave the job running into the next test
            subprocess.run(["scancel", job], capture_output=True, timeout=30)
    at_cancel = predictions(run_dir)
    assert len(at_cancel) < total, "the job finished before it was cancelled: raise N_VIDEOS"

    resumed = sweep(sweep_dir, *big_data.overrides, data=big_data.data)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_dirs(sweeps) == [run_dir], "requeue and resubmission must land in the one run directory"
    got = predictions(run_dir)
    assert got[: len(at_cancel)] == at_cancel, "answers given before the cancel were rewritten"
    assert _check_complete_run(run_dir) == total
    reference = sharded.whole  # the same benchmark, run without interruption
    assert by_question(got) == by_question(predictions(reference))
    assert comparable(metrics(run_dir)) == comparable(metrics(reference))
