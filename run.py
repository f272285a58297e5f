"""Hydra entry point: ``python run.py model=qwen2vl compress=tar_van_pool quant=int4 benchmark=videomme``.

The config is validated before anything is loaded; a config that cannot work fails with one line naming the option
and a valid value (exit code 2), in seconds: what a run needs beyond the checks (the job, the results code, the
model classes) is imported once the config has passed. Each run writes into its own directory (Hydra's), resumable
on rerun.
"""

# ruff: noqa: E402  (the OpenMP wait policy is set before the imports below load torch)
from __future__ import annotations

from infinipotv.threads import set_wait_default

set_wait_default()  # libgomp reads it once, when torch loads it (infinipotv.threads)

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from infinipotv.config import ConfigError, register_configs
from infinipotv.factory import as_run_config, validate
from infinipotv.models import MissingWeightsError
from infinipotv.models.loading import check_weights
from infinipotv.rundir import RunDirError, check_usable, discard_unused
from infinipotv.threads import use_threads

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(dcfg: DictConfig) -> dict:
    try:
        cfg = as_run_config(dcfg)
        check_weights(cfg.model)  # the first thing a missing checkpoint should hear about
        validate(cfg)
        use_threads(cfg.threads)
        from infinipotv.job import run_job, summary
        from infinipotv.results.tracking import track_run

        run_dir = Path(cfg.run_dir or HydraConfig.get().runtime.output_dir)
        metrics = run_job(cfg, run_dir, finished=track_run)
    except (ConfigError, MissingWeightsError, RunDirError) as err:
        print(f"error: {err}", file=sys.stderr)
        discard_unused(Path(HydraConfig.get().runtime.output_dir))  # a start that answered nothing leaves nothing
        sys.exit(2)
    except BaseException:
        discard_unused(Path(HydraConfig.get().runtime.output_dir))
        raise
    print(summary(metrics))
    print(f"\nrun directory: {run_dir}")
    return metrics


def _check_args(argv: list[str]) -> None:
    """Refused in one line before Hydra starts, where Hydra would end in its own traceback: a ``run_dir=`` that
    cannot hold a run (a file, a read-only folder; Hydra writes its files there first) and an ``experiment=`` file
    that is not plain YAML (a tag, bad syntax or encoding)."""
    given = dict(a.lstrip("+").split("=", 1) for a in argv if "=" in a)
    try:
        if given.get("run_dir") not in (None, "", "null"):
            check_usable(Path(given["run_dir"]))
        if given.get("experiment"):
            path = Path(__file__).parent / "experiments" / f"{given['experiment']}.yaml"
            if path.is_file():  # a missing one is Hydra's own one-line error
                from infinipotv.results.report import read_experiment

                read_experiment(path)
    except (RunDirError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _check_args(sys.argv[1:])
    main()
