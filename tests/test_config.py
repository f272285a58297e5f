"""The policy is its config: a compress= choice takes exactly its policy's parameters, presets follow one rule, the
run records what ran, and a bad value is one line before anything loads."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from infinipotv.compress import build
from infinipotv.config import ConfigError, as_run_config, register_configs
from infinipotv.factory import build_policy, validate
from tests.helpers import ROOT, lines, run_py


def composed(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return as_run_config(compose("config", overrides=list(overrides)))


@pytest.mark.parametrize(
    "overrides, refused",
    [
        (
            ["compress=tar", "+compress.alpha=0.3"],
            r"compress=tar has no parameter alpha \(it pins alpha=1.0\); its "
            r"parameters: r_ratio, frame_view, budget, budget_mib, c_ratio, preset",
        ),
        (["compress=swa", "+compress.window=3"], "compress=swa has no parameter window; its parameters: n_sink,"),
        (["compress=van", "+compress.pooling=cv"], r"no parameter pooling \(it pins pooling='none'\)"),
    ],
)
def test_a_knob_the_policy_lacks_or_pins_is_refused_when_composed(overrides, refused):
    with pytest.raises(ConfigError, match=refused):
        composed(*overrides)


def test_a_knob_the_policy_lacks_cannot_even_be_overridden():
    with pytest.raises(ConfigCompositionException, match="compress.alpha"):
        composed("compress=tar", "compress.alpha=0.3")


def test_one_precedence_rule_explicit_then_preset_then_default():
    cfg = composed("compress=tar_van_pool", "compress.preset=public_code", "compress.r_ratio=0.2")
    assert cfg.compress.r_ratio == 0.2 and cfg.compress.pooling == "none"
    assert build_policy(cfg) == build("tar_van_pool", preset="public_code", r_ratio=0.2)
    preset = composed("compress=tar_van_pool", "compress.preset=public_code")
    assert (preset.compress.r_ratio, preset.compress.pooling) == (0.25, "none")
    assert build_policy(preset) == build("tar_van_pool", preset="public_code")
    paper = composed("compress=tar")
    assert paper.compress.r_ratio == 0.125 and not hasattr(paper.compress, "alpha")


def test_the_run_records_the_parameters_that_ran(tmp_path):
    run_dir = tmp_path / "run"
    out = run_py(
        "model=tiny_qwen2vl",
        "compress=tar",
        "compress.budget=96",
        "compress.preset=public_code",
        "eval.chunk_frames=2",
        "benchmark.options.n_videos=1",
        "benchmark.options.frames=48",
        f"benchmark.root={tmp_path / 'data'}",
        "benchmark.limit=1",
        f"run_dir={run_dir}",
    )
    assert out.returncode == 0, out.stderr
    saved = OmegaConf.load(run_dir / "config.yaml").compress
    assert saved.r_ratio == 0.25 and saved.preset == "public_code" and "alpha" not in saved and "pooling" not in saved


@pytest.mark.parametrize(
    "override, needle",
    [
        ("compress.budget_mib=-1", "compress.budget_mib=-1.0 must be > 0"),
        ("quant.residual_length=-4", "quant.residual_length=-4 must be >= 0"),
        ("compress.budget=1", "compress.budget=1 must be >= 2"),
        ("compress.preset=mine", "preset='mine' is unknown"),
    ],
)
def test_bad_values_are_refused_in_one_line(override, needle):
    cfg_overrides = [
        "model=tiny_qwen2vl",
        "compress=tar_van_pool",
        "compress.budget=null",
        "compress.budget_mib=1",
        "eval.chunk_frames=2",
    ]
    if override.startswith("compress.budget="):
        cfg_overrides.remove("compress.budget_mib=1")
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        validate(composed(*cfg_overrides, override))


def test_a_byte_budget_too_small_for_a_chunk_stops_before_any_video(tmp_path):
    run_dir = tmp_path / "run"
    out = run_py(
        "model=tiny_qwen2vl",
        "compress=tar_van_pool",
        "compress.budget=null",
        "compress.budget_mib=0.02",
        "eval.chunk_frames=2",
        "benchmark.options.n_videos=1",
        "benchmark.options.frames=48",
        f"benchmark.root={tmp_path / 'data'}",
        f"run_dir={run_dir}",
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = [line for line in out.stderr.strip().splitlines() if not line.startswith("run directory: ")]
    assert len(said) == 1 and said[0].startswith("error: eval.chunk_frames=2 gives up to")
    assert "compress.budget_mib=0.02" in said[0] and not lines(run_dir / "predictions.jsonl")
