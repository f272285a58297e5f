"""A job that fails is seen failing: its process exits non-zero (``sacct`` says FAILED on Slurm), the submitting
process prints each job's id, a one-line result per job and a summary, and exits non-zero itself.

The failing job reads an annotation file that exists (so the sweep check passes it) but is not JSON: the job raises
on the node, after submission, as a job whose data broke does.
"""

from __future__ import annotations

import re

import pytest

from tests.slurm.conftest import JOB
from tests.slurm.sweeps import run_dirs, sacct_states, slurm, slurm_job_ids, sweep


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken" / "annotations.json"
    path.parent.mkdir()
    path.write_text('[{"question_id": "q0", "video_id": "v0",\n')  # cut off mid-file
    return path


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["hydra/launcher=local", pytest.param("+cluster=ci", marks=pytest.mark.slurm)])
def test_a_job_that_raises_fails_visibly_and_the_others_still_report(request, tmp_path, broken, launcher):
    on_slurm = launcher.startswith("+cluster")
    if on_slurm:
        request.getfixturevalue("slurm_cluster")
    out = sweep(tmp_path / "sweep", *JOB, f"benchmark.annotations=null,{broken}", data=tmp_path / "data",
                cluster=launcher, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-3000:]
    submitted = re.findall(r"submitted job (\S+): #(\d) ", log)
    assert [num for _, num in submitted] == ["0", "1"], log[-3000:]
    ids = {num: job_id for job_id, num in submitted}
    assert re.search(rf"job {ids['0']} #0 .*benchmark.annotations=null.*: done: (\d+) of \1 questions", log), log
    failed = re.search(rf"job {ids['1']} #1 .*: FAILED: (.*) \(log: (\S+)\)", log)
    assert failed and "JSONDecodeError" in failed.group(1), log[-3000:]
    assert "sweep finished: 1 of 2 jobs done, 1 failed" in log
    assert len(run_dirs(tmp_path / "sweep")) == 1  # the good job's run; the bad one wrote no predictions
    if on_slurm:
        assert sacct_states(ids["1"])[-1] == "FAILED", sacct_states(ids["1"])
        assert sacct_states(ids["0"])[-1] == "COMPLETED"
        array = ids["0"].split("_")[0]
        names = slurm("sacct", "-X", "-n", "-P", "-j", array, "-o", "JobName").splitlines()
        assert set(names) == {f"benchmark.annotations=null,{broken}"[:120]}, names  # what the sweep varies
        assert slurm_job_ids(tmp_path / "sweep") == sorted(ids.values())
