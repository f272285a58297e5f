"""A job that fails is seen failing: its process exits non-zero (``sacct`` says FAILED on Slurm), the submitting
process prints each job's id, a one-line result per job and a summary, and exits non-zero itself.

One array of four jobs: the good one, and three that pass the sweep check and fail on the node through run.py's
one-line error (exit code 2). The data layer refuses a file cut off mid-file (the check passes it: the file exists);
the real Qwen2-VL config (on the CPU) finds no weights on this machine, whatever its annotation file (weights are
checked first). The tiny Qwen2-VL reads no checkpoint.
"""

from __future__ import annotations

import re

import pytest

from tests.slurm.conftest import JOB
from tests.slurm.sweeps import run_dirs, sacct_states, slurm, slurm_job_ids, sweep

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]

DATA_ERROR = "error: "  # the data layer's one line, naming the file
WEIGHTS_ERROR = "error: weights for model.checkpoint="


def test_failed_jobs_fail_visibly_and_the_others_still_report(tmp_path):
    broken = tmp_path / "broken" / "annotations.json"
    broken.parent.mkdir()
    broken.write_text('[{"question_id": "q0", "video_id": "v0",\n')  # cut off mid-file
    swept = [
        "model=tiny_qwen2vl,qwen2vl",
        "model.device=cpu",
        "model.checkpoint=/nonexistent/qwen",
        f"benchmark.annotations=null,{broken}",
    ]
    out = sweep(tmp_path / "sweep", *JOB, *swept, data=tmp_path / "data", timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-3000:]
    submitted = re.findall(r"submitted job (\S+): #(\d) ", log)
    assert [num for _, num in submitted] == ["0", "1", "2", "3"], log[-3000:]
    ids = {int(num): job_id for job_id, num in submitted}
    # Hydra's order: the first swept key varies slowest (#0 tiny + its own data, #1 tiny + the broken file, ...)
    assert re.search(rf"job {ids[0]} #0 .*: done: (\d+) of \1 questions", log), log[-3000:]
    for num, cause in ((1, DATA_ERROR), (2, WEIGHTS_ERROR), (3, WEIGHTS_ERROR)):
        failed = re.search(rf"job {ids[num]} #{num} .*: FAILED: (.*) \(log: (\S+)\)", log)
        assert failed and cause in failed.group(1), (num, log[-3000:])
    assert "broken/annotations.json" in re.search(rf"job {ids[1]} #1 .*", log).group(0)
    assert "sweep finished: 1 of 4 jobs done, 3 failed" in log
    assert len(run_dirs(tmp_path / "sweep")) == 1  # the good job's run; the bad ones wrote no predictions

    assert sacct_states(ids[0])[-1] == "COMPLETED"
    for num in (1, 2, 3):
        assert sacct_states(ids[num])[-1] == "FAILED", (num, sacct_states(ids[num]))
        assert slurm("sacct", "-X", "-n", "-P", "-j", ids[num], "-o", "ExitCode").split()[-1] == "2:0"
    array = ids[0].split("_")[0]
    names = slurm("sacct", "-X", "-n", "-P", "-j", array, "-o", "JobName").splitlines()
    assert set(names) == {f"model=tiny_qwen2vl,qwen2vl benchmark.annotations=null,{broken}"[:120]}, names
    assert slurm_job_ids(tmp_path / "sweep") == sorted(ids.values())
