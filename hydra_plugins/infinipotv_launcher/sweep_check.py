"""Check a whole sweep on the login node before a single job is submitted.

Each job's config is composed exactly as the job itself will compose it (Hydra's config loader on the master config,
whose resolver cache is copied, so ``${now:...}`` gives the job's value) and passed through
:func:`infinipotv.factory.validate`; its benchmark's annotation file and video root must exist (where the benchmark
itself says they are), or the job would fail on the node. Two more things are checked because they silently corrupt
results rather than fail: two jobs writing to one run directory, and a job whose run directory already holds a run
with a different config (resume would append this config's answers to that run's predictions). One bad job rejects
the sweep, with a message naming each bad job by its overrides and its problem.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import filter_overrides
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

log = logging.getLogger(__name__)
DATA_ENV = "INFINIPOTV_DATA"  # the data folder conf/benchmark/*.yaml put every benchmark root under
NAME_CHARS = 120  # Slurm keeps longer job names, but squeue/sacct columns are narrow anyway


class SweepRejected(CompactHydraException):
    """At least one job of a sweep cannot run; nothing was submitted. Hydra prints the message without a traceback."""


@dataclass
class PlannedJob:
    """One job of a sweep as it will run: its number, overrides, run directory and what is wrong with it, if any."""

    num: int
    overrides: list[str]
    run_dir: Path | None
    problem: str | None = None

    def describe(self) -> str:
        return f"#{self.num} {' '.join(filter_overrides(self.overrides)) or '(no overrides)'}"


def _task_config(sweep_config: DictConfig) -> DictConfig:
    """The job's own config: the sweep config without its ``hydra`` node, as Hydra hands it to the task."""
    task = copy.deepcopy(sweep_config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


def _run_dir(sweep_config: DictConfig, run_dir_override: str | None) -> Path | None:
    """Where the job will write: ``run_dir`` if set, else Hydra's sweep dir / subdir (as run.py picks it)."""
    if run_dir_override:
        return Path(run_dir_override).absolute()
    try:
        return Path(
            os.path.abspath(os.path.join(str(sweep_config.hydra.sweep.dir), str(sweep_config.hydra.sweep.subdir)))
        )
    except OmegaConfBaseException:
        return None  # a subdir naming ${hydra.job.id}: known only once submitted (and never resumable)


def data_problem(cfg: Any) -> str | None:
    """Why the job's benchmark cannot find its data (annotation file, video root), naming what to set; or None.

    The paths are the benchmark's own (``Benchmark.root`` / ``.annotations``, defaults included). The symbolic
    benchmark generates its data on first use, so only an explicit ``benchmark.annotations`` must exist there.
    """
    from infinipotv.data.loading import AnnotatedBenchmark
    from infinipotv.data.symbolic import Symbolic
    from infinipotv.factory import build_benchmark

    bench = build_benchmark(cfg)
    if not isinstance(bench, AnnotatedBenchmark):
        return None
    generated = isinstance(bench, Symbolic)
    if generated and not cfg.benchmark.annotations:
        return None
    missing = [] if generated or bench.root.is_dir() else [f"video root {bench.root.absolute()}"]
    if not bench.annotations.is_file():
        missing.append(f"annotation file {bench.annotations.absolute()}")
    if not missing:
        return None
    data = os.environ.get(DATA_ENV)
    return (
        f"{' and '.join(missing)} not found: set {DATA_ENV} to the folder that holds {bench.root.name}/ "
        f"(now {data or 'unset'}), or benchmark.root=DIR and benchmark.annotations=FILE"
    )


def job_name(master: DictConfig, jobs: Sequence[PlannedJob]) -> str:
    """The Slurm name of a sweep's array: its experiment and what its jobs vary, e.g.
    ``budget_sweep compress=swa,tar compress.budget=72,144``; a lone job: its overrides."""
    hidden = set(OmegaConf.select(master, "hydra.job.config.override_dirname.exclude_keys", default=[]))
    overrides = [dict(o.lstrip("+~").split("=", 1) for o in filter_overrides(j.overrides) if "=" in o) for j in jobs]
    keys = [k for k in dict.fromkeys(k for o in overrides for k in o) if k not in hidden]  # as run dirs are named
    values = {k: list(dict.fromkeys(o.get(k, "-") for o in overrides)) for k in keys}
    varied = [f"{k}={','.join(v)}" for k, v in values.items() if len(v) > 1] or [
        f"{k}={v[0]}" for k, v in values.items()
    ]
    experiment = OmegaConf.select(master, "experiment", default=None)
    name = " ".join([str(experiment)] * bool(experiment) + varied) or str(master.hydra.job.name)
    return name[:NAME_CHARS]


def plan_job(config_loader: Any, master: DictConfig, overrides: Sequence[str], num: int) -> PlannedJob:
    """Compose and check one job of the sweep; a failure becomes the job's ``problem``, never an exception."""
    # Imported here: Hydra imports every hydra_plugins module at start-up, and torch should not slow that down.
    from infinipotv.config import ConfigError, as_run_config
    from infinipotv.factory import validate
    from infinipotv.runs import CONFIG, config_conflict

    job = PlannedJob(num, list(overrides), None)
    hydra_config = HydraConfig.instance()
    saved_cfg = hydra_config.cfg
    try:
        sweep_config = config_loader.load_sweep_config(master, list(overrides))
        with open_dict(sweep_config.hydra.job):
            sweep_config.hydra.job.num = num
        hydra_config.set_config(sweep_config)  # resolves ${hydra:...} in the task config as the job will
        run_cfg = as_run_config(_task_config(sweep_config))
        job.run_dir = _run_dir(sweep_config, run_cfg.run_dir)
        validate(run_cfg)
        if job.run_dir is not None and (job.run_dir / CONFIG).is_file():  # the YAML costs ~0.2 s a job: only to compare
            job.problem = config_conflict(job.run_dir, OmegaConf.to_yaml(OmegaConf.structured(run_cfg)))
        job.problem = job.problem or data_problem(run_cfg)
    except Exception as err:  # anything that fails here fails on the node too: report it, keep checking the rest
        message = " ".join(str(err).split())  # OmegaConf errors span lines; one line per job reads better
        job.problem = message if isinstance(err, ConfigError) else f"{type(err).__name__}: {message}"
    finally:
        hydra_config.cfg = saved_cfg
    return job


def check_sweep(
    config_loader: Any, master: DictConfig, job_overrides: Sequence[Sequence[str]], first_num: int = 0
) -> list[PlannedJob]:
    """Plan every job of a sweep; raise :class:`SweepRejected` naming each job that cannot run."""
    jobs = [plan_job(config_loader, master, o, first_num + i) for i, o in enumerate(job_overrides)]
    owner: dict[Path, PlannedJob] = {}
    for job in jobs:
        if job.run_dir is None or job.problem:
            continue
        if job.run_dir in owner:
            job.problem = (
                f"writes to the same run directory as {owner[job.run_dir].describe()} ({job.run_dir}): "
                f"put ${{hydra.job.num}} or ${{hydra.job.override_dirname}} in hydra.sweep.subdir"
            )
        owner.setdefault(job.run_dir, job)
    bad = [job for job in jobs if job.problem]
    if bad:
        lines = [f"  {job.describe()}: {job.problem}" for job in bad]
        raise SweepRejected(
            f"sweep rejected, nothing submitted: {len(bad)} of {len(jobs)} jobs cannot run\n" + "\n".join(lines)
        )
    log.info(f"sweep checked: {len(jobs)} jobs compose and validate")
    return jobs
