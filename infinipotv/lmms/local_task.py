"""lmms-eval tasks read from local files: its own task config, with only the dataset source replaced.

A task YAML in ``infinipotv/lmms/tasks/`` names a ``base`` config of lmms-eval (``videomme/videomme.yaml``...) and the
local annotation file(s) as ``data_files`` for HF ``datasets``' json/parquet builders. Prompts, generation settings,
answer parser and metric all come from lmms-eval's own YAML, loaded from the installed package, so the scores are
lmms-eval's by construction. Paths may use ``$HF_HOME`` (default ``~/.cache/huggingface``, as in lmms-eval): its
task utils look for the videos there, under the base config's ``dataset_kwargs.cache_dir``.

lmms-eval indexes built-in tasks first and lets them win a name clash, hence the ``_local`` task names.
"""

from __future__ import annotations

import os
from pathlib import Path
from string import Template
from typing import Any

import lmms_eval.tasks
from lmms_eval.api.task import ConfigurableTask
from lmms_eval.utils import load_yaml_config

LMMS_TASKS = Path(lmms_eval.tasks.__file__).resolve().parent
DEFAULT_HF_HOME = "~/.cache/huggingface"


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or DEFAULT_HF_HOME).expanduser()


def expand(value: str, task: str) -> str:
    """``$HF_HOME`` / ``${VAR}`` / ``~`` in a path; an unset variable is an error naming it."""
    env = {**os.environ, "HF_HOME": str(hf_home())}
    try:
        return os.path.expanduser(Template(value).substitute(env))
    except KeyError as err:
        raise ValueError(f"task {task}: data_files path {value!r} uses ${err.args[0]}, which is not set") from None


def local_config(config: dict[str, Any]) -> dict[str, Any]:
    """lmms-eval's ``base`` task config with this YAML's keys on top and its data files resolved and checked."""
    own = {k: v for k, v in config.items() if k not in ("class", "base")}
    task = own.get("task", "?")
    if "base" not in config:
        raise ValueError(f"task {task}: name lmms-eval's task config to build on, e.g. base: videomme/videomme.yaml")
    base_path = LMMS_TASKS / config["base"]
    if not base_path.is_file():
        raise FileNotFoundError(
            f"task {task}: base: {config['base']} is not a task config of the installed lmms-eval ({LMMS_TASKS})"
        )
    base = load_yaml_config(str(base_path), mode="full")
    videos = hf_home() / base["dataset_kwargs"]["cache_dir"]
    if not videos.is_dir():
        raise FileNotFoundError(
            f"task {task}: lmms-eval looks for its videos under {videos}, which does not exist; "
            f"put the videos there (see docs/lmms_eval.md) or set HF_HOME"
        )
    kwargs = dict(own.get("dataset_kwargs") or {})
    files = kwargs.get("data_files")
    if not isinstance(files, dict) or not files:
        raise ValueError(
            f"task {task}: dataset_kwargs.data_files must map the split to a local file, "
            f"e.g. {{test: $HF_HOME/videomme/videomme/test-00000-of-00001.parquet}}"
        )
    kwargs["data_files"] = {split: expand(str(path), task) for split, path in files.items()}
    for split, path in kwargs["data_files"].items():
        if not Path(path).is_file():
            raise FileNotFoundError(
                f"task {task}: annotation file for split {split!r} not found: {path}; download it "
                f"there (see docs/lmms_eval.md) or edit data_files in a copy of this task YAML"
            )
    return {**base, **own, "dataset_kwargs": kwargs}


class LocalTask(ConfigurableTask):
    """A ConfigurableTask built by :func:`local_config` (lmms-eval constructs it with ``config=`` the YAML's keys)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config=local_config(config))
