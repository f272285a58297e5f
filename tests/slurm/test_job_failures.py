"""A job that fails is seen failing: its process exits non-zero (``sacct`` says FAILED on Slurm), the submitting
process prints each job's id, a one-line result per job and a summary, and exits non-zero itself.

Both failing jobs pass the sweep check and fail on the node through run.py's one-line error (exit code 2): one's
annotation file exists, so the check passes it, but the data layer refuses it on the node in one line (its
benchmark root is missing, or the file is cut off mid-file); the other's weights are not on this machine.
"""

from __future__ import annotations

import re

import pytest

from tests.slurm.conftest import JOB
from tests.slurm.sweeps import run_dirs, sacct_states, slurm, slurm_job_ids, sweep

SLURM = pytest.mark.slurm
BROKEN_FILE = ("benchmark.annotations=null,{broken}", "error: ", "2:0")  # the data layer's one line
# the real Qwen2-VL config (on the CPU) beside the tiny one; the tiny one reads no checkpoint
EXITS_2 = (
    "model=tiny_qwen2vl,qwen2vl model.device=cpu model.checkpoint=/nonexistent/qwen",
    "error: weights for model.checkpoint=",
    "2:0",
)


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken" / "annotations.json"
    path.parent.mkdir()
    path.write_text('[{"question_id": "q0", "video_id": "v0",\n')  # cut off mid-file
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "failing"),
    [
        pytest.param("+cluster=ci", BROKEN_FILE, marks=SLURM),
        pytest.param("+cluster=ci", EXITS_2, marks=SLURM),
    ],
)
def test_a_failed_job_fails_visibly_and_the_others_still_report(request, tmp_path, broken, launcher, failing):
    overrides, cause, exit_code = failing
    on_slurm = launcher.startswith("+cluster")
    if on_slurm:
        request.getfixturevalue("slurm_cluster")
    swept = overrides.format(broken=broken).split()
    out = sweep(tmp_path / "sweep", *JOB, *swept, data=tmp_path / "data", cluster=launcher, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-3000:]
    submitted = re.findall(r"submitted job (\S+): #(\d) ", log)
    assert [num for _, num in submitted] == ["0", "1"], log[-3000:]
    ids = {num: job_id for job_id, num in submitted}
    assert re.search(rf"job {ids['0']} #0 .*: done: (\d+) of \1 questions", log), log[-3000:]
    failed = re.search(rf"job {ids['1']} #1 .*: FAILED: (.*) \(log: (\S+)\)", log)
    assert failed and cause in failed.group(1), log[-3000:]
    assert "sweep finished: 1 of 2 jobs done, 1 failed" in log
    assert len(run_dirs(tmp_path / "sweep")) == 1  # the good job's run; the bad one wrote no predictions
    if on_slurm:
        assert sacct_states(ids["1"])[-1] == "FAILED", sacct_states(ids["1"])
        assert sacct_states(ids["0"])[-1] == "COMPLETED"
        array = ids["0"].split("_")[0]
        codes = slurm("sacct", "-X", "-n", "-P", "-j", ids["1"], "-o", "ExitCode").split()
        assert codes[-1] == exit_code, codes
        names = slurm("sacct", "-X", "-n", "-P", "-j", array, "-o", "JobName").splitlines()
        assert set(names) == {swept[0].replace("true", "True").replace("false", "False")[:120]}, names
        assert slurm_job_ids(tmp_path / "sweep") == sorted(ids.values())
