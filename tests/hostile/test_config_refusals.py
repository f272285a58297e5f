"""Configs that cannot work are refused by run.py in one line before anything streams, never run to fail every
question alike (exit 0, accuracy 0.0): block sizes that do not fit a chunk, pixel limits no frame can meet."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.config import ConfigError
from infinipotv.factory import validate
from tests.helpers import run_py
from tests.hostile.test_config_knobs import composed

REFUSED = [
    (
        ["compress=rekv", "compress.block_frames=100000"],
        "error: compress.block_frames=100000 does not divide a chunk's 2 model frame(s) of eval.chunk_frames=2, "
        "and a chunk is offloaded in whole blocks: use compress.block_frames=1 or 2, or eval.chunk_frames=100000 "
        "(or a multiple)",
    ),
    (
        ["compress=rekv", "compress.block_frames=3", "eval.chunk_frames=2"],
        "error: compress.block_frames=3 does not divide a chunk's 2 model frame(s) of eval.chunk_frames=2, and a "
        "chunk is offloaded in whole blocks: use compress.block_frames=1 or 2, or eval.chunk_frames=3 (or a multiple)",
    ),
    (
        ["model=tiny_qwen25vl", "compress=rekv", "compress.block_frames=2"],
        "error: compress.block_frames=2 does not divide a chunk's 1 model frame(s) (2 raw frames each) of "
        "eval.chunk_frames=2, and a chunk is offloaded in whole blocks: use compress.block_frames=1, or "
        "eval.chunk_frames=4 (or a multiple)",
    ),
    (
        ["compress=livevlm", "compress.r_frames=3"],
        "error: compress.r_frames=3 is more than a chunk's 2 model frame(s) of eval.chunk_frames=2, and the scores "
        "read the chunk's own queries: use compress.r_frames in 1..2, or eval.chunk_frames=3 (or more)",
    ),
    (
        ["model.max_pixels=1000"],
        "error: the benchmark's frames of 48x64 = 3072 pixels exceed model.max_pixels=1000: raise model.max_pixels "
        "to 3072, or make the frames smaller (benchmark.options.patch, benchmark.options.grid)",
    ),
    (
        ["model.max_pixels=-5"],
        "error: model.max_pixels=-5 must be >= 256 (one glyph of model.options.patch=16), e.g. "
        "model.max_pixels=3072 (the symbolic benchmark's 3x4 glyphs)",
    ),
    (
        ["model=tiny_qwen2vl", "model.max_pixels=0"],
        "error: model.max_pixels=0 must be >= 784 (one 28x28 patch, the smallest frame model.family=qwen2vl "
        "encodes), e.g. model.max_pixels=100352",
    ),
    (
        ["model=tiny_qwen25vl", "model.max_pixels=-5"],
        "error: model.max_pixels=-5 must be >= 784 (one 28x28 patch, the smallest frame model.family=qwen25vl "
        "encodes), e.g. model.max_pixels=100352",
    ),
    (
        ["model=tiny_qwen2vl", "model.min_pixels=20000"],
        "error: model.min_pixels=20000 must lie in [0, model.max_pixels=12544]: lower it (Qwen's default: 3136) "
        "or raise model.max_pixels",
    ),
    (
        ["benchmark.options.patch=32"],
        "error: the benchmark's frames of 96x128 = 12288 pixels exceed model.max_pixels=3072: raise "
        "model.max_pixels to 12288, or make the frames smaller (benchmark.options.patch, benchmark.options.grid)",
    ),
]


@pytest.mark.parametrize("overrides, refusal", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_a_config_that_would_fail_every_question_is_refused_before_anything_runs(overrides, refusal, tmp_path: Path):
    """A config that would fail every question (block or pixel sizes no chunk or frame fits) exits 2 in one line"""
    run_dir = tmp_path / "run"
    done = run_py(*overrides, "benchmark.limit=1", f"run_dir={run_dir}", timeout=180)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [refusal]
    assert not (run_dir / "predictions.jsonl").exists()


FITTING = [
    ["compress=rekv", "compress.block_frames=2"],
    ["compress=rekv", "compress.block_frames=2", "eval.chunk_frames=4", "compress.budget=240"],
    ["model=tiny_qwen25vl", "compress=rekv", "compress.block_frames=2", "eval.chunk_frames=4"],
    ["compress=livevlm", "compress.r_frames=2"],
    ["model=tiny_qwen2vl", "model.min_pixels=12544"],
    ["model=tiny_qwen2vl", "model.max_pixels=784", "model.min_pixels=0"],
    ["benchmark.options.patch=32", "model.max_pixels=12288", "model.options.patch=32"],
]


@pytest.mark.parametrize("overrides", FITTING, ids=[" ".join(o) for o in FITTING])
def test_the_sizes_at_the_edge_of_each_refusal_pass(overrides):
    """Block sizes that divide a chunk and pixel limits a frame meets pass the same checks"""
    validate(composed(*overrides))


def test_the_refusals_name_the_fix_in_process():
    """validate() itself refuses each case (the lmms-eval plugin and the benches validate without run.py)"""
    for overrides, refusal in REFUSED:
        with pytest.raises(ConfigError) as err:
            validate(composed(*overrides))
        assert f"error: {err.value}" == refusal
