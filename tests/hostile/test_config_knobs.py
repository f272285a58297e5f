"""Nonsense knobs are refused before anything streams, in one line naming the option and a valid value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from infinipotv import factory
from infinipotv.config import ConfigError, as_run_config, register_configs
from infinipotv.factory import build_adapter, validate
from tests.helpers import ROOT, run_py


def composed(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return as_run_config(compose("config", overrides=list(overrides)))


KNOBS = [
    (["model.max_frames=-1"], r"model.max_frames=-1 must be >= 1 frame, e.g. model.max_frames=768"),
    (["model.max_frames=0"], r"model.max_frames=0 must be >= 1"),
    (["model.fps=0"], r"model.fps=0.0 must be a finite rate > 0 .*e.g. model.fps=2"),
    (["model.fps=-1"], r"model.fps=-1.0 must be a finite rate > 0"),
    (["model.fps=nan"], r"model.fps=nan must be a finite rate > 0"),
    (["model.fps=inf"], r"model.fps=inf must be a finite rate > 0"),
    (["model.num_frames=0"], r"model.num_frames=0 must be >= 1 frame, e.g. model.num_frames=128, or null"),
    (["model.num_frames=-4"], r"model.num_frames=-4 must be >= 1"),
    (["eval.max_new_tokens=0"], r"eval.max_new_tokens=0 must be >= 1 token, e.g. eval.max_new_tokens=16"),
    (["eval.max_new_tokens=-1"], r"eval.max_new_tokens=-1 must be >= 1 token"),
    (["compress.budget=null", "compress.budget_mib=inf"], r"compress.budget_mib=inf must be > 0 MiB and finite"),
    (
        ["+model.options.num_layerz=7"],
        r"model.options \(model.family=symbolic, tiny=False\) has unknown key\(s\) num_layerz; known: patch, "
        r"positions",
    ),
    (
        ["model=tiny_qwen2vl", "+model.options.num_layerz=7"],
        r"has unknown key\(s\) num_layerz; known: num_layers, hidden_size",
    ),
    (
        ["+benchmark.options.frobnicate=1"],
        r"benchmark.options \(benchmark=symbolic\) has unknown key\(s\) frobnicate; known: n_videos",
    ),
    (
        ["model=tiny_qwen2vl", "benchmark=videomme", "+benchmark.options.frobnicate=1"],
        r"benchmark.options \(benchmark=videomme\) has unknown key\(s\) frobnicate; this choice reads none",
    ),
    (
        ["model=tiny_qwen2vl", "benchmark=streamingbench", "+benchmark.options.csv_vidoe=x"],
        r"unknown key\(s\) csv_vidoe; known: csv_video",
    ),
]


@pytest.mark.parametrize("overrides, refused", KNOBS, ids=[" ".join(o) for o, _ in KNOBS])
def test_a_nonsense_knob_is_refused_naming_the_option_and_a_valid_value(overrides, refused):
    """Nonsense model/eval/compress knobs and typo'd option keys are refused in one line"""
    assert_refused(overrides, refused)


def assert_refused(overrides: list[str], refused: str) -> None:
    """The config of ``overrides`` is refused when validated, in one line matching ``refused``."""
    with pytest.raises(ConfigError, match=refused) as err:
        validate(composed(*overrides))
    assert "\n" not in str(err.value)


def test_the_defaults_and_the_shipped_option_keys_pass():
    """Every shipped model and benchmark choice passes the knob checks with its own options"""
    for model in [p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")]:
        for benchmark in ("symbolic", "streamingbench", "videomme"):
            validate(composed(f"model={model}", f"benchmark={benchmark}", "compress=full"))


def test_model_options_table_lists_every_key_the_adapters_read():
    """The model.options table names every key an adapter reads (a key it misses would be refused wrongly)"""
    source = "\n".join(p.read_text() for p in (ROOT / "infinipotv" / "models").glob("*.py"))
    read = set(re.findall(r"\b(?:o|options)\.get\(\"(\w+)\"", source))
    read |= set(re.findall(r"\bvision\[\"(\w+)\"\]", source))  # llava_ov's {**defaults, **cfg.options}
    listed = {key for always, tiny in factory.MODEL_OPTIONS.values() for key in (*always, *tiny)}
    assert read and read <= listed, read - listed
    assert set(factory.MODEL_OPTIONS) == {"qwen2vl", "qwen25vl", "llava_ov", "symbolic"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_one_line_before_loading():
    """model.device=cuda on a machine without CUDA is one line naming the option, not a traceback"""
    with pytest.raises(ConfigError, match=r"model.device=cuda but this machine has 0 CUDA device\(s\): use "):
        build_adapter(composed("model=tiny_qwen2vl", "model.device=cuda"))
    with pytest.raises(ConfigError, match=r"model.device='gpu' is not a device; use model.device=cpu"):
        build_adapter(composed("model=tiny_qwen2vl", "model.device=gpu"))


@pytest.mark.parametrize("override", ["model.max_frames=-1", "eval.max_new_tokens=-1"])
def test_run_py_refuses_before_writing_anything(override, tmp_path: Path):
    """run.py with max_frames=-1 or max_new_tokens=-1 exits 2 with one line and writes no run"""
    run_dir = tmp_path / "run"
    done = run_py(override, f"run_dir={run_dir}", timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {override} must be >= 1")
    assert "Traceback" not in done.stderr
    assert not (run_dir / "predictions.jsonl").exists()
