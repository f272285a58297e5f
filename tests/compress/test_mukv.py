"""MuKV's rule held against the spec's transcription vectors (shared/spec/field2.md 2.7, T1 and T2, computed there
with a numpy transcription of upstream's ``mukv_dualsignal_compression.py`` and ``mukv_rerank.py``): each vector
fails when its step is removed (the FFT signal, the attention signal, the over-retrieval, the rerank). Then the
knobs: a frame that cannot be cut into patch blocks, or a budget that retrieves no block of some granularity, is
refused in one line when the config is checked, before any video streams."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from infinipotv.compress import build
from infinipotv.compress.mukv import (
    attention_importance,
    fft_importance,
    kept_tokens,
    minmax,
    pick,
    representative,
    token_importance,
)
from infinipotv.config import ConfigError, as_run_config, register_configs
from infinipotv.factory import validate
from tests.helpers import ROOT

# T1: g = 8 block tokens after n_init = 2 prefix tokens, one head; uniform causal rows.
PREFIX, G = 2, 8
ATTENTION = torch.tensor(
    [[[1 / (PREFIX + i + 1) if j <= PREFIX + i else 0.0 for j in range(PREFIX + G)] for i in range(G)]]
)
KEYS = torch.tensor([[0, 0, 0, 5, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, -3]], dtype=torch.float32).T.unsqueeze(0)


def test_t1_attention_signal():
    expected = torch.tensor([1.429, 1.0956, 0.8456, 0.6456, 0.479, 0.3361, 0.2111, 0.1])
    torch.testing.assert_close(attention_importance(ATTENTION, PREFIX), expected, atol=1e-3, rtol=0)


def test_t1_fft_signal():
    expected = torch.tensor([0.1364, 0, 0.2364, 1, 0.2364, 0, 0.1364, 0.8])
    torch.testing.assert_close(fft_importance(KEYS), expected, atol=1e-4, rtol=0)


def test_t1_combined_importance_and_kept_tokens():
    combined = token_importance(ATTENTION, KEYS, PREFIX, alpha=0.5)
    expected = torch.tensor([0.5682, 0.3746, 0.3987, 0.7053, 0.2608, 0.0888, 0.11, 0.4])
    torch.testing.assert_close(combined, expected, atol=1e-4, rtol=0)
    assert kept_tokens(combined, int(G * 0.5)).tolist() == [0, 2, 3, 7]
    # each signal alone keeps another set: the vector fails when either step is removed
    assert kept_tokens(minmax(attention_importance(ATTENTION, PREFIX)), 4).tolist() != [0, 2, 3, 7]
    assert kept_tokens(fft_importance(KEYS), 4).tolist() != [0, 2, 3, 7]


def test_the_representative_is_the_mean_kept_key_heads_concatenated():
    keys = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)  # [H_kv, s, D]
    assert representative(keys).tolist() == [2.0, 3.0, 8.0, 9.0]


ROWS = {
    "patch": torch.empty(0, 2),
    "frame": torch.tensor([[1.0, -0.3], [0.8, 0.6]]),  # m0, m1
    "segment": torch.tensor([[0.6, 0.8], [-1.0, 0.0]]),  # c0, c1
}
TOPK = {"patch": 1, "frame": 1, "segment": 1}


def test_t2_the_rerank_flips_the_frame_pick():
    picked = pick(torch.tensor([1.0, 0.0]), ROWS, TOPK, top_n=1, rerank={"patch": 0.3, "frame": 0.3})
    assert picked["frame"].tolist() == [1] and picked["segment"].tolist() == [0] and picked["patch"].numel() == 0
    no_rerank = pick(torch.tensor([1.0, 0.0]), ROWS, TOPK, top_n=1, rerank={"patch": 0.0, "frame": 0.0})
    assert no_rerank["frame"].tolist() == [0]  # without the rerank: m0 (0.958 > 0.800)


def test_t2_needs_the_over_retrieval(monkeypatch):
    """With one candidate per pick (no 2x over-retrieval) m1 is never a candidate, so the rerank cannot pick it."""
    monkeypatch.setattr("infinipotv.compress.mukv.OVER_RETRIEVE", 1)
    picked = pick(torch.tensor([1.0, 0.0]), ROWS, TOPK, top_n=1, rerank={"patch": 0.3, "frame": 0.3})
    assert picked["frame"].tolist() == [0]


def test_picks_come_best_first():
    """T4's order: each granularity's blocks in score order (the view reads them so)."""
    rows = {**ROWS, "patch": torch.tensor([[0.0, 1.0], [0.9, 0.1], [0.1, 0.9], [1.0, 0.05]])}
    picked = pick(torch.tensor([1.0, 0.0]), rows, {**TOPK, "patch": 2}, top_n=1, rerank={"patch": 0.0, "frame": 0.0})
    assert picked["patch"].tolist() == [3, 1]


def test_retrieved_counts_fit_the_budget():
    policy = build("mukv")
    for per_frame, budget in [(16, 96), (4, 96), (196, 12544), (12, 144)]:
        kept, counts = policy.kept(per_frame), policy.retrieved(per_frame, budget)
        assert sum(kept[g] * counts[g] for g in counts) <= budget
        assert min(counts.values()) >= 1
    assert policy.kept(196) == {"patch": 4, "frame": 19, "segment": 627}  # upstream's int(g * keep) at 196 tokens


def compose_run(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return as_run_config(compose(config_name="config", overrides=list(overrides)))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["compress.patch_split=3"], "compress.patch_split=1 or 2 or 4 or 8 or 16"),
        (["compress.budget=40"], "raise compress.budget to 56"),
        (["compress.keep_patch=0"], "keep_patch=0"),
    ],
)
def test_bad_knobs_are_refused_in_one_line_before_any_video(overrides, needle):
    cfg = compose_run("model=tiny_llava_ov", "compress=mukv", "eval.chunk_frames=2", *overrides)
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    message = str(refused.value)
    assert needle in message and "\n" not in message, message


def test_the_defaults_validate_on_the_tiny_model():
    validate(compose_run("model=tiny_llava_ov", "compress=mukv", "compress.budget=96", "eval.chunk_frames=2"))
