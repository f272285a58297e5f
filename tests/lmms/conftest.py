"""Fixtures of the lmms-eval tests: a tiny $HF_HOME, and one lmms-eval CLI run per model over it.

Where lmms-eval is installed, this session's HF_HOME is a temporary folder set before anything imports ``datasets``
(which reads it once), so no test writes to the user's Hugging Face cache and nothing is looked up online.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from infinipotv.data.toy_lmms import build_hf_home

HF_HOME: Path | None = None
if importlib.util.find_spec("lmms_eval") is not None:
    HF_HOME = Path(tempfile.mkdtemp(prefix="lmms-hf-home-"))
    os.environ.update(HF_HOME=str(HF_HOME), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

#: What our plugin runs in the end-to-end test: InfiniPot-V on KIVI INT4, budget and chunks sized to the tiny videos.
PLUGIN_ARGS = "model=tiny_qwen2vl,compress=tar_van_pool,compress.budget=200,eval.chunk_frames=4,quant=int4"


@pytest.fixture(scope="session")
def hf_home() -> Iterator[Path]:
    yield build_hf_home(HF_HOME)
    shutil.rmtree(HF_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def plugin_run(hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Results file of ``lmms-eval --model infinipotv`` on the four local tasks."""
    from tests.lmms.cli import run_lmms_eval

    return run_lmms_eval("infinipotv", PLUGIN_ARGS, tmp_path_factory.mktemp("plugin_run") / "out", hf_home)


@pytest.fixture(scope="session")
def scripted_run(hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Results file of lmms-eval scoring the fixed replies of tests/lmms/scripted_replies.py."""
    from tests.lmms.cli import run_lmms_eval, scripted_replies_dist

    root = tmp_path_factory.mktemp("scripted_run")
    return run_lmms_eval("scripted_replies", "", root / "out", hf_home, [scripted_replies_dist(root / "dist")])
