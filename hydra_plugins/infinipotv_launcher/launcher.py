"""submitit's Slurm and local launchers, checking the whole sweep before submitting any job, and reporting on it.

From hydra-submitit-launcher: the executor parameters, one array job per sweep, requeue on preemption and (up to
``max_num_timeout`` times) on timeout through submitit's checkpoint, which pickles the launcher with the master config
and its resolver cache, so a requeued job lands in the same run directory, even under a ``${now:...}`` sweep dir.

Ours: the sweep check (:func:`check_sweep`); a job whose task raised exits non-zero, so Slurm and ``sacct`` say
FAILED (Hydra's ``run_job`` turns the exception into a returned ``JobReturn``, which submitit would store as a
success); the array is named after what the sweep varies, not ``run``; the submitting process prints each job's id,
overrides and run directory, then one line per job as it ends, then a summary; a failed job fails the sweep command.
A Slurm job's script ends its setup with run.py's OpenMP wait policy (:func:`job_setup`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from omegaconf import OmegaConf

from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.infinipotv_launcher.sweep_check import PlannedJob, check_sweep, job_name
from infinipotv.threads import WAIT_SETUP

log = logging.getLogger(__name__)
POLL_S = 2.0  # how often the submitting process asks Slurm about its jobs (submitit caches sacct between asks)


class JobFailed(CompactHydraException):
    """A job of the sweep failed on the cluster; Hydra prints this one line, without a traceback, and exits 1."""


def outcome(metrics: Any) -> str:
    """One line of what a finished job did, from the metrics run.py returns."""
    if not isinstance(metrics, dict) or "n_questions" not in metrics:
        return "done"
    overall = (metrics.get("scores") or {}).get("overall")
    score = "n/a" if overall is None else f"{overall:.1f}"
    errors = f", {metrics['n_errors']} failed" if metrics.get("n_errors") else ""
    return f"done: {metrics['n_questions']} of {metrics.get('n_expected')} questions{errors}, accuracy {score}"


def _failure(job: Any, error: Exception) -> str:
    """Why a job failed, in one line: the last line its process wrote to stderr (the exception a traceback ends
    with, or run.py's ``error:`` line), else submitit's own message; and where the full log is."""
    log_file = Path(job.paths.stderr)
    lines = log_file.read_text(errors="replace").splitlines() if log_file.is_file() else []
    lines = [line.strip() for line in lines if line.strip() and not line.startswith(("srun:", "submitit "))]
    cause = lines[-1] if lines else " ".join(str(error).split())
    return f"FAILED: {cause} (log: {log_file})"


def job_setup(setup: Sequence[str] | None) -> list[str]:
    """A Slurm job's setup lines: the profile's, then run.py's default OpenMP wait policy where they and the job's
    environment set none (:data:`infinipotv.threads.WAIT_SETUP`). The job's Python loads torch when it unpickles
    the task, before any of run.py's code could set it; a shell line runs before Python starts."""
    return [*(setup or []), WAIT_SETUP]


class _CheckedLaunch:
    """Mixin over hydra-submitit-launcher's launchers: check, submit, watch, report."""

    _EXECUTOR: str
    params: dict[str, Any]

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """The job itself (on the node). A raised task is re-raised: submitit stores the traceback as the job's
        result, logs it, and the process exits 1, which Slurm records as FAILED."""
        ret = super().__call__(*args, **kwargs)  # type: ignore[misc]
        if ret.status is JobStatus.FAILED:
            raise ret._return_value
        return ret

    def _executor(self, planned: Sequence[PlannedJob]) -> Any:
        import submitit  # lazy: Hydra imports every plugin at start-up

        params = dict(self.params)
        if self._EXECUTOR == "slurm":  # a local job is a child of this process: it inherits run.py's setting
            params["setup"] = job_setup(params.get("setup"))
        folder = params.pop("submitit_folder")
        init = (
            {f"{self._EXECUTOR}_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
        )
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=folder, **init)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())  # the keys submitit knows without a prefix
        if params.get("name") == self.config.hydra.job.name:  # type: ignore[attr-defined]  # the default, "run"
            params["name"] = job_name(self.config, planned)  # type: ignore[attr-defined]
        executor.update_parameters(**{k if k in shared else f"{self._EXECUTOR}_{k}": v for k, v in params.items()})
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from submitit.helpers import as_completed

        planned = check_sweep(
            self.hydra_context.config_loader,
            self.config,
            job_overrides,  # type: ignore
            initial_job_idx,
        )
        sweep = self.config.hydra.sweep  # type: ignore[attr-defined]
        Path(str(sweep.dir)).mkdir(parents=True, exist_ok=True)
        if "mode" in sweep:
            os.chmod(str(sweep.dir), int(str(sweep.mode), 8))
        executor = self._executor(planned)
        calls = [
            (list(job.overrides), "hydra.sweep.dir", job.num, f"job_id_for_{job.num}", Singleton.get_state())
            for job in planned
        ]
        jobs = executor.map_array(self, *zip(*calls))
        for job, plan in zip(jobs, planned):
            log.info(f"submitted job {job.job_id}: {plan.describe()} -> {plan.run_dir}")
        by_id = {job.job_id: (job, plan) for job, plan in zip(jobs, planned)}
        returns: dict[str, JobReturn] = {}
        for job in as_completed(jobs, poll_frequency=POLL_S):
            plan = by_id[job.job_id][1]
            try:
                ret = job.results()[0]
                line = outcome(ret._return_value)
            except Exception as err:  # FailedJobError, UncompletedJobError (cancelled, node failure, timeouts)
                line = _failure(job, err)
                ret = JobReturn(
                    overrides=list(plan.overrides),
                    status=JobStatus.FAILED,
                    _return_value=JobFailed(f"job {job.job_id} ({plan.describe()}) {line}"),
                )
            log.info(f"job {job.job_id} {plan.describe()}: {line}")
            returns[job.job_id] = ret
        failed = [ret for ret in returns.values() if ret.status is JobStatus.FAILED]
        log.info(f"sweep finished: {len(jobs) - len(failed)} of {len(jobs)} jobs done, {len(failed)} failed")
        return [returns[job.job_id] for job in jobs]


class NoSlurm(CompactHydraException, ValueError):
    """A Slurm sweep on a machine without Slurm: one line, without a traceback (Hydra's exit 1 in the launcher,
    run.py's exit 2 before Hydra starts)."""


def check_slurm(selected_by: str) -> None:
    """:class:`NoSlurm` where ``sbatch`` or ``srun`` is not on PATH, naming the local launcher to use in place of
    ``selected_by`` (the override that chose Slurm)."""
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if missing:
        raise NoSlurm(
            f"no Slurm found here ({' and '.join(missing)} not on PATH): start the single-node one with "
            f"`sudo slurm/start_slurm.sh` (slurm/README.md), or run the sweep on this machine with "
            f"hydra/launcher=local in place of {selected_by}"
        )


class SlurmLauncher(_CheckedLaunch, submitit_launcher.SlurmLauncher):
    """``hydra/launcher=slurm``: an sbatch array through submitit."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Refuse at once, in one line, where no Slurm is installed (submitit's own error is a 29-line traceback
        after the sweep check)."""
        check_slurm("+cluster=")
        return super().launch(job_overrides, initial_job_idx)


class LocalLauncher(_CheckedLaunch, submitit_launcher.LocalLauncher):
    """``hydra/launcher=local``: submitit's local executor (subprocesses on this machine, same resume semantics)."""
