"""compress=streamkv composes with its knobs, and a bad one stops the run in one line before any video streams
(the retrieval buffer is cut into whole frames: the shared check holds a chunk under it, and the forced recency
must leave frames to rank)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from infinipotv.config import ConfigError, as_run_config, register_configs
from infinipotv.factory import build_policy, validate
from tests.helpers import ROOT, lines, run_py

TINY = ["model=tiny_qwen2vl", "compress=streamkv", "compress.budget=96", "eval.chunk_frames=2", "quant=fp16"]


def composed(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return as_run_config(compose("config", overrides=list(overrides)))


def test_the_knobs_compose():
    cfg = composed(*TINY, "compress.min_segment_size=2", "compress.max_segment_size=8", "compress.budget_mode=strict")
    validate(cfg)
    policy = build_policy(cfg)
    assert (policy.min_segment_size, policy.max_segment_size, policy.budget_mode) == (2, 8, "strict")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("compress.max_segment_size=3", "min_segment_size=4, max_segment_size=3"),
        ("compress.compression_ratio=1.5", "compression_ratio"),
        ("compress.budget_mode=loose", "budget_mode"),
        ("compress.retrieve_local=3", "forces every frame the retrieval buffer holds"),
    ],
)
def test_a_bad_knob_is_refused_in_one_line(override, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        validate(composed(*TINY, override))
    assert "\n" not in str(err.value)


def test_a_forced_recency_filling_the_buffer_stops_before_any_video(tmp_path):
    run_dir = tmp_path / "run"
    data = [f"benchmark.root={tmp_path / 'data'}", "benchmark.options.n_videos=1", "benchmark.options.frames=48"]
    out = run_py(*TINY, "compress.retrieve_local=6", *data, f"run_dir={run_dir}")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = [line for line in out.stderr.strip().splitlines() if not line.startswith("run directory: ")]
    assert len(said) == 1 and "compress.retrieve_local" in said[0] and not lines(run_dir / "predictions.jsonl")
