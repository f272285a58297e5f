"""WeaveTime's gate and coarse-to-fine selection held against the spec's transcription vectors (shared/spec/field2.md
3.7, T1 and T2, computed there with a numpy transcription of upstream's ``mixins.py`` and ``kv_cache_manager.py``),
and against a direct transcription on random tensors with GQA (the queries averaged over each KV head's group)."""

from __future__ import annotations

import math

import pytest
import torch
from hydra import compose, initialize_config_dir

from infinipotv.compress import build
from infinipotv.compress.weavetime import coarse_to_fine, kv_queries, top_entropy
from infinipotv.config import ConfigError, as_run_config, register_configs
from infinipotv.factory import validate
from tests.helpers import ROOT

# T2: two query tokens in a 2-d KV space, five blocks of two tokens each.
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
BLOCKS = torch.tensor(
    [
        [[0.5, 0.5], [0.5, 0.5]],
        [[2.0, 0.0], [-2.0, 0.0]],
        [[0.4, 0.4], [0.4, 0.4]],
        [[0.3, 0.3], [0.3, 0.3]],
        [[3.0, -3.0], [-3.0, 3.0]],
    ]
)


def select(k: int, fetched: list[list[int]] | None = None) -> list[int]:
    def detailed(candidates: torch.Tensor):
        if fetched is not None:
            fetched.append(sorted(candidates.tolist()))
        yield BLOCKS[candidates]

    return coarse_to_fine(Q, BLOCKS.mean(dim=1), k, detailed, prefilter=3).tolist()


@pytest.mark.parametrize(("logits", "entropy", "branch"), [([10.0] + [0.0] * 20, 0.00195, False)])
def test_t1_a_peaked_distribution_answers_from_the_window(logits, entropy, branch):
    got = top_entropy(torch.tensor(logits))
    assert got == pytest.approx(entropy, abs=5e-6)
    assert build("weavetime").retrieves(got) is branch


def test_t1_a_flat_top_ten_retrieves():
    got = top_entropy(torch.tensor([1.0] * 4 + [0.5] * 6 + [0.0] * 11))
    assert got == pytest.approx(0.9865, abs=5e-5)
    assert build("weavetime").retrieves(got) and not build("weavetime", threshold=0.99).retrieves(got)
    assert build("weavetime", threshold=0.0).retrieves(0.0)  # at the threshold: retrieval (avg >= 0.6)


def test_t1_only_the_top_ten_count():
    """The eleventh logit onwards is not in the entropy: a flat top ten reads 1 whatever follows."""
    assert top_entropy(torch.tensor([1.0] * 10 + [0.99] * 50)) == pytest.approx(1.0, abs=1e-6)


def test_t2_the_prefilter_keeps_b1_and_b4_out_for_one_block():
    assert (BLOCKS.mean(dim=1) @ Q.mean(dim=0)).tolist() == pytest.approx([0.5, 0.0, 0.4, 0.3, 0.0])
    fetched: list[list[int]] = []
    assert select(1, fetched) == [0]
    assert fetched == [[0, 2, 3]]  # B1 and B4 never refined: their keys never leave the host


def test_t2_the_fine_score_picks_b1_and_b4_for_two_blocks():
    fetched: list[list[int]] = []
    assert select(2, fetched) == [1, 4]  # refined [0.5, 2, 0.4, 0.3, 3], sorted by time
    assert fetched == [[0, 1, 2, 3, 4]]


def transcription(queries: torch.Tensor, keys: torch.Tensor, block: int, k: int, prefilter: int) -> list[int]:
    """Upstream, loop by loop: ``q_kv`` = the mean over each GQA group (``_project_query_to_kv_dim``); block_k =
    the mean pre-RoPE key, heads concatenated; avg = mean_t(q_kv) . block_k; P = top-min(3k, n); refined_j =
    max_{t,s} q_kv[t] . k_j[s] on P, avg elsewhere; topk(refined, k), sorted."""
    h_q, n, d = queries.shape
    h_kv = keys.shape[0]
    g = h_q // h_kv
    q_kv = torch.stack([torch.cat([queries[h * g : (h + 1) * g, t].mean(0) for h in range(h_kv)]) for t in range(n)])
    tokens = torch.cat([keys[h] for h in range(h_kv)], dim=1)  # [T, H_kv * D]
    n_blocks = keys.shape[1] // block
    blocks = [tokens[b * block : (b + 1) * block] for b in range(n_blocks)]
    avg = [float(q_kv.mean(0) @ blk.mean(0)) for blk in blocks]
    pool = sorted(range(n_blocks), key=lambda b: -avg[b])[: min(prefilter * k, n_blocks)]
    refined = list(avg)
    for b in pool:
        refined[b] = max(float(q_kv[t] @ blocks[b][s]) for t in range(n) for s in range(block))
    return sorted(sorted(range(n_blocks), key=lambda b: -refined[b])[:k])


def test_the_selection_follows_upstream_on_random_gqa_tensors():
    g = torch.Generator().manual_seed(0)
    weave = build("weavetime")
    for trial in range(8):
        h_q, h_kv, d, block, k = 6, 2, 8, 5, 3
        keys = torch.randn(h_kv, block * 30, d, generator=g)
        queries = torch.randn(h_q, 7, d, generator=g)
        rows = weave.block_keys(keys, block)

        def detailed(candidates: torch.Tensor):
            for batch in candidates.split(k):
                per_block = keys.view(h_kv, -1, block, d)[:, batch]  # [H_kv, n, block, D]
                yield per_block.permute(1, 2, 0, 3).reshape(len(batch), block, h_kv * d)

        got = coarse_to_fine(kv_queries(queries, h_kv), rows, k, detailed, weave.prefilter).tolist()
        assert got == transcription(queries, keys, block, k, weave.prefilter), trial


def test_queries_are_averaged_not_summed_over_the_group():
    queries = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)  # two query heads on one KV head
    assert torch.equal(kv_queries(queries, 1), queries.mean(dim=0))


def test_a_score_is_a_logit_entropy_in_the_unit_interval():
    g = torch.Generator().manual_seed(4)
    for _ in range(20):
        h = top_entropy(torch.randn(50, generator=g) * 5)
        assert 0.0 <= h <= 1.0 + 1e-6
    assert top_entropy(torch.zeros(10)) == pytest.approx(1.0) and math.isfinite(top_entropy(torch.tensor([1e4, 0.0])))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threshold": 1.5}, r"threshold=1.5 must be in \[0.0, 1.0\]"),
        ({"threshold": -0.1}, r"threshold=-0.1 must be in \[0.0, 1.0\]"),
        ({"prefilter": 0}, r"prefilter=0 must be >= 1 \(upstream: prefilter=3\)"),
        ({"block_frames": 0}, "block_frames=0 must be >= 1"),
        ({"positions": "shifted"}, "positions='shifted' is unknown"),
    ],
)
def test_bad_knobs_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build("weavetime", **kwargs)


def test_a_stream_the_blocks_cannot_cut_is_refused():
    weave = build("weavetime", block_frames=2)
    with pytest.raises(ValueError, match="a chunk of 3 model frames cannot be cut into blocks of block_frames=2"):
        weave.check_stream(3, 16, 96, 48)
    with pytest.raises(ValueError, match=r"exceeds the retrieval buffer \|M\| - \|C\| = 16"):
        weave.check_stream(2, 16, 64, 48)
    weave.check_stream(4, 16, 96, 48)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (
            ["model=tiny_llava_ov", "eval.chunk_frames=3", "compress.block_frames=2"],
            "compress: a chunk of 3 model frames cannot be cut into blocks of block_frames=2",
        ),
        (  # Qwen2-VL merges two raw frames: 4 raw frames are 2 model frames
            ["model=tiny_qwen2vl", "eval.chunk_frames=4", "compress.block_frames=4"],
            "a chunk of 2 model frames cannot be cut into blocks of block_frames=4",
        ),
        (["model=tiny_qwen2vl", "compress.threshold=1.2"], r"compress: threshold=1.2 must be in \[0.0, 1.0\]"),
    ],
)
def test_a_bad_stream_or_knob_is_refused_when_the_config_is_checked(overrides, needle):
    """Through Hydra and the factory's check, before any model loads or video streams."""
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        base = ["compress=weavetime", "compress.budget=192", "compress.c_ratio=0.5"]
        cfg = as_run_config(compose("config", overrides=[*base, *overrides]))
    with pytest.raises(ConfigError, match=needle):
        validate(cfg)
