"""submitit's Slurm and local launchers, checking the whole sweep before submitting any job.

Everything else is hydra-submitit-launcher's: one array job per sweep, requeue on preemption and (up to
``max_num_timeout`` times) on timeout through submitit's checkpoint, which pickles the launcher with the master config
and its resolver cache, so a requeued job lands in the same run directory, even under a ``${now:...}`` sweep dir.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher import submitit_launcher

from hydra_plugins.infinipotv_launcher.sweep_check import check_sweep


class _CheckedLaunch:
    """Mixin: compose and validate every job (:func:`check_sweep`), then let submitit submit them."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        check_sweep(self.hydra_context.config_loader, self.config, job_overrides, initial_job_idx)
        return super().launch(job_overrides, initial_job_idx)


class SlurmLauncher(_CheckedLaunch, submitit_launcher.SlurmLauncher):
    """``hydra/launcher=slurm``: an sbatch array through submitit."""


class LocalLauncher(_CheckedLaunch, submitit_launcher.LocalLauncher):
    """``hydra/launcher=local``: submitit's local executor (subprocesses on this machine, same resume semantics)."""
