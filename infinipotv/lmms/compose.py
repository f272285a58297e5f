"""lmms-eval ``--model_args`` -> a validated :class:`~infinipotv.config.RunConfig`, composed by Hydra from ``conf/``.

``model=tiny_qwen2vl,compress=tar_van_pool,compress.budget=200,quant=int4`` becomes the Hydra overrides
``model=tiny_qwen2vl compress=tar_van_pool compress.budget=200 quant=int4`` on the same configs ``run.py`` uses, so a
setting means the same in both harnesses. lmms-eval has already turned numbers and booleans into Python values; they
are written back as Hydra literals.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from infinipotv.config import ConfigError, RunConfig, as_run_config, register_configs
from infinipotv.factory import validate

#: The repository's conf/ (an editable install); INFINIPOTV_CONF or ``config_dir=`` in --model_args point elsewhere.
DEFAULT_CONF = Path(__file__).resolve().parents[2] / "conf"
#: Config nodes lmms-eval decides (which task, where outputs go) or that only run.py uses.
NOT_FROM_MODEL_ARGS = ("benchmark", "hydra", "run_dir", "tracking", "experiment", "table")


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def to_overrides(model_args: Mapping[str, Any]) -> list[str]:
    """Hydra override strings, one per model_args entry; keys lmms-eval decides are refused with the reason."""
    overrides = []
    for key, value in model_args.items():
        if key.split(".")[0].lstrip("+~") in NOT_FROM_MODEL_ARGS:
            raise ConfigError(
                f"--model_args {key}={value}: {key.split('.')[0]} is not set through the model; the "
                f"task comes from lmms-eval's --tasks and outputs go to its --output_path"
            )
        overrides.append(f"{key}={_literal(value)}")
    return overrides


def config_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Where Hydra's conf/ is: ``explicit``, else $INFINIPOTV_CONF, else the repository's."""
    conf = Path(explicit or os.environ.get("INFINIPOTV_CONF") or DEFAULT_CONF).expanduser().resolve()
    if not (conf / "config.yaml").is_file():
        raise ConfigError(
            f"config_dir={conf} holds no config.yaml: pass config_dir=/path/to/repo/conf in --model_args "
            f"or set INFINIPOTV_CONF (a non-editable install does not ship conf/)"
        )
    return conf


def compose_run_config(model_args: Mapping[str, Any], conf: str | os.PathLike | None = None) -> RunConfig:
    """The RunConfig that ``python run.py <the same overrides>`` would run, validated."""
    overrides = to_overrides(model_args)
    register_configs()
    with initialize_config_dir(config_dir=str(config_dir(conf)), version_base="1.3", job_name="lmms_eval"):
        try:
            cfg = as_run_config(compose(config_name="config", overrides=overrides))
        except (HydraException, OmegaConfBaseException) as err:
            raise ConfigError(f"--model_args {','.join(overrides)}: {err}") from None
    validate(cfg)
    return cfg
