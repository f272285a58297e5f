"""Hydra entry point: ``python run.py model=qwen2vl compress=tar_van_pool quant=int4 benchmark=videomme``.

The config is validated before anything is loaded; a config that cannot work fails with one line naming the option
and a valid value (exit code 2), in seconds: a knob's own value (a negative budget, a ratio out of range, an unknown
policy or storage) is refused before torch loads, and what a run needs beyond the checks (the job, the results code,
the model classes) is imported once the config has passed. Each run writes into its own directory (Hydra's), resumable
on rerun. A run whose every question ended in an error keeps its files and exits 1 with one line naming the cause.
"""

# ruff: noqa: E402  (the OpenMP wait policy is set before the imports below load torch)
from __future__ import annotations

from infinipotv.threads import set_wait_default

set_wait_default()  # libgomp reads it once, when torch loads it (infinipotv.threads)

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from infinipotv.config import ConfigError, RunConfig, as_run_config, check_values, register_configs
from infinipotv.runs import RunDirError, check_ours, check_usable, discard_unused, inventory
from infinipotv.threads import use_threads

register_configs()
#: What the folder of a ``run_dir=`` or ``hydra.run.dir=`` held before Hydra wrote there (None: there was none),
#: taken by ``_check_args``: a failed start removes only what it added.
_FOUND: dict[str, frozenset[str] | None] = {}
#: The Hydra override that names the folder of a single run, as ``run_dir=`` does (conf/config.yaml).
_HYDRA_RUN_DIR = "hydra.run.dir"


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(dcfg: DictConfig) -> dict:
    found = _found_before(dcfg)
    try:
        cfg = as_run_config(dcfg)
        check_values(cfg)  # a knob's own value is refused here, before torch and the model stack load
        metrics, run_dir = _run(cfg)
    except (ConfigError, RunDirError) as err:
        print(f"error: {err}", file=sys.stderr)
        _discard(dcfg, found)  # a start that answered nothing leaves nothing it wrote
        sys.exit(2)
    except BaseException:
        _discard(dcfg, found)
        raise
    from infinipotv.job import summary

    print(summary(metrics))
    print(f"\nrun directory: {run_dir}")
    return metrics


def _run(cfg: RunConfig) -> tuple[dict, Path]:
    """The checks that need the model stack, then the job (its metrics and run directory), imported once every
    knob's own value has passed. A missing checkpoint is refused as a config is, in one line."""
    from infinipotv.data.answers import RunFailed
    from infinipotv.factory import validate
    from infinipotv.job import run_job
    from infinipotv.models import MissingWeightsError
    from infinipotv.models.loading import check_weights
    from infinipotv.results.tracking import track_run

    try:
        check_weights(cfg.model)  # the first thing a missing checkpoint should hear about, once the knobs pass
    except MissingWeightsError as err:
        raise ConfigError(str(err)) from None
    validate(cfg)
    use_threads(cfg.threads)
    run_dir = Path(cfg.run_dir or HydraConfig.get().runtime.output_dir)
    try:
        return run_job(cfg, run_dir, finished=track_run), run_dir
    except RunFailed as err:  # its files are kept; exit 1, so that a sweep counts the job FAILED
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


def _found_before(dcfg: DictConfig) -> frozenset[str] | None:
    """What the run directory held before this start: as ``_check_args`` found a folder named by ``run_dir=`` or
    ``hydra.run.dir=``; nothing for Hydra's own unique folder of a single run; else (a sweep's job, whose folder may
    hold its earlier run, or a named folder ``_check_args`` could not resolve) what it holds now, Hydra's files of
    this start included, so that they are kept."""
    hydra = HydraConfig.get()
    output_dir = os.path.abspath(hydra.runtime.output_dir)
    if output_dir in _FOUND:
        return _FOUND[output_dir]
    named = dcfg.get("run_dir") or any(o.lstrip("+").startswith(f"{_HYDRA_RUN_DIR}=") for o in hydra.overrides.hydra)
    if not named and hydra.mode == RunMode.RUN:
        return None
    return inventory(Path(output_dir))


def _discard(dcfg: DictConfig, found: frozenset[str] | None) -> None:
    discard_unused(Path(HydraConfig.get().runtime.output_dir), found)


def _check_args(argv: list[str]) -> None:
    """Refused in one line before Hydra starts, where Hydra would end in its own traceback or write into a folder
    not ours: a ``run_dir=`` or ``hydra.run.dir=`` that cannot hold a run (a file, a link to nothing, a read-only
    folder; Hydra writes its files there first) or that holds files no run wrote, an ``experiment=`` file that is not
    plain YAML (a tag, bad syntax or encoding) or whose table spec does not parse, and a sweep on
    hydra-submitit-launcher's own ``submitit_slurm`` where no Slurm is installed (as ``+cluster=`` is). What such a
    folder holds is noted, so that a failed start removes only what it added."""
    given = dict(a.lstrip("+").split("=", 1) for a in argv if "=" in a)
    try:
        for key in ("run_dir", _HYDRA_RUN_DIR):
            if given.get(key) not in (None, "", "null"):
                run_dir = Path(given[key])
                check_usable(run_dir, key)
                check_ours(run_dir, key)  # before Hydra writes its .hydra/ and log there
                _FOUND[os.path.abspath(run_dir)] = inventory(run_dir)
        if given.get("experiment"):
            path = Path(__file__).parent / "experiments" / f"{given['experiment']}.yaml"
            if path.is_file():  # a missing one is Hydra's own one-line error
                _check_experiment(path)
        if given.get("hydra/launcher") == "submitit_slurm" and {"-m", "--multirun"} & set(argv):
            from hydra_plugins.infinipotv_launcher.launcher import check_slurm

            check_slurm("hydra/launcher=submitit_slurm")
    except (RunDirError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def _check_experiment(path: Path) -> None:
    """The experiment file read as plain YAML and its table spec parsed (a ValueError line naming the file): Hydra
    would end a `table: 5` in a multi-line error of its own, and the aggregator only after the runs."""
    from infinipotv.results.report import read_experiment
    from infinipotv.results.spec import parse_experiment

    table = read_experiment(path).get("table")
    if table is not None:
        parse_experiment(table, f"{path}: table")


if __name__ == "__main__":
    _check_args(sys.argv[1:])
    main()
