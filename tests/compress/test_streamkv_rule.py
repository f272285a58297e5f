"""StreamKV's steps held against the spec's vectors (spec/field2.md 1.7, from a numpy transcription of
sou1p0wer/StreamKV@b0dbe3f): segmentation with the most-similar-pair merge (T1), the per-layer compression counts
(T2) and retrieval counts (T2b), and the retrieval with the newest blocks forced in (T4); T3 (which frames a layer
keeps) runs through the real streaming method in tests/stream/test_streamkv_session.py."""

from __future__ import annotations

import math

import pytest
import torch

from infinipotv.compress import build
from infinipotv.compress.streamkv import Segmenter, apportion, obtain_cdf_num, rescale_sum_match

H_Q, H_KV, D = 6, 2, 8


def unit(degrees: float) -> torch.Tensor:
    r = math.radians(degrees)
    return torch.tensor([math.cos(r), math.sin(r)])


def angle(feature: torch.Tensor) -> float:
    return round(math.degrees(math.atan2(float(feature[1]), float(feature[0]))), 3)


def test_t1_segments_close_on_a_cosine_drop_and_the_most_similar_pair_merges_at_max_size():
    segmenter = Segmenter(min_size=2, max_size=3, theta=0.99)
    segments, actions = [], []
    for a in [0, 5, 10, 60, 62, 65, 66, 150]:
        before = [angle(f) for f in segmenter.frames]
        action = segmenter.push(unit(a))
        actions.append(action)
        if action == "close":
            segments.append(before)
    segments.append([angle(f) for f in segmenter.frames])
    assert segments == [[0, 5, 10], [60, 62, 65.5], [150]]
    assert actions == ["start", "append", "append", "close", "append", "append", 2, "close"]


def test_t1_the_cosine_is_against_the_raw_previous_frame_and_min_size_forces_appends():
    segmenter = Segmenter(min_size=3, max_size=8, theta=0.99)
    assert [segmenter.push(unit(a)) for a in [0, 90, 180, 181]] == ["start", "append", "append", "append"]
    assert segmenter.push(unit(270)) == "close"  # past min_size, cos(181, 270) is far below theta


T2_SCORES = [torch.tensor([10.0] + [0.0] * 19), torch.linspace(5, 0, 20), torch.tensor([1.0] * 19 + [1.5])]


@pytest.mark.parametrize(
    ("rho", "counts", "rescaled", "low", "high"),
    [(0.5, [10, 12, 10], [2, 20, 2], 1, 20), (0.3, [3, 9, 3], [2, 12, 1], 1, 12)],
)
def test_t2_layer_budgets_and_the_upstream_rescale_that_loses_the_total(rho, counts, rescaled, low, high):
    target = int(3 * 20 * rho)
    assert obtain_cdf_num(T2_SCORES, target) == counts
    assert rescale_sum_match(counts, low, high) == rescaled
    policy = build("streamkv", compression_ratio=rho, compress_temp=1.0)
    assert policy.reserved(T2_SCORES) == rescaled  # the bounds are the upstream ones: [1, min(F, 2 F rho)]
    strict = build("streamkv", compression_ratio=rho, budget_mode="strict").reserved(T2_SCORES)
    assert sum(strict) == target and all(1 <= n <= 20 for n in strict)  # the strict mode keeps the total exact
    assert strict[1] == max(strict)  # and the upstream ranking (layer 1's scores are the most spread)


def test_t2b_retrieval_counts():
    scores = [
        torch.tensor([9.0] + [1.0] * 11),
        torch.tensor([5.0, 4, 3, 2, 1] + [0.0] * 7),
        torch.tensor([1.0] * 11 + [2.0]),
    ]
    counts = obtain_cdf_num(scores, 3 * 4)
    assert counts == [3, 4, 3]
    assert rescale_sum_match(counts, max(4 * 0.5, 1), min(4 * 1.5, 128)) == [2, 6, 2]


def test_t2b_layer_adaptive_counts_keep_the_upstream_spread_and_the_total():
    """The spec's T2b through the rule: cdf [3, 4, 3], stretched into [2, 6] as upstream ([2, 6, 2], 10 frames of
    12), then apportioned to exactly L R = 12; temp 0 gives every layer R; no layer past its candidates."""
    scores = [
        torch.tensor([9.0] + [1.0] * 11),
        torch.tensor([5.0, 4, 3, 2, 1] + [0.0] * 7),
        torch.tensor([1.0] * 11 + [2.0]),
    ]
    assert build("streamkv", retrieve_temp=0.5).retrieval_counts(scores, [4, 4, 4]) == [3, 6, 3]
    assert build("streamkv").retrieval_counts(scores, [4, 4, 4]) == [4, 4, 4]
    few = [scores[0], scores[1][:3], scores[2]]  # layer 1 holds 3 candidate frames: the rest go elsewhere
    counts = build("streamkv", retrieve_temp=0.5).retrieval_counts(few, [4, 3, 4])
    assert sum(counts) == 11 and counts[1] <= 3 and all(2 <= n <= 6 for n in counts)


def test_apportion_is_exact_bounded_and_proportional():
    assert apportion([10, 12, 10], 30, 1, 20) == [10, 11, 9]  # 9.375, 11.25, 9.375 by largest remainder
    assert apportion([1, 1, 100], 30, 2, 12) == [9, 9, 12]  # the cap moves the rest to the others
    assert sum(apportion([3, 9, 3], 18, 1, 12)) == 18
    assert apportion([2, 6, 2], 12, 2, [6, 3, 6]) == [5, 3, 4]  # per-layer caps


def rekv_local_transcription(queries, pre_rope_keys, block, n_select, local):
    """_calc_block_topk with retrieve_local: the last ``local`` blocks, plus the top (n - local) of the others by
    the mean question query dotted with each block's GQA-expanded mean key; sorted."""
    group = H_Q // H_KV
    expanded = pre_rope_keys.repeat_interleave(group, dim=0)
    n_blocks = pre_rope_keys.shape[1] // block
    reps = [expanded[:, b * block : (b + 1) * block].mean(dim=1).reshape(-1) for b in range(n_blocks)]
    q_bar = queries.mean(dim=1).reshape(-1)
    scores = [float(q_bar @ rep) for rep in reps[: n_blocks - local]]
    top = sorted(range(n_blocks - local), key=lambda b: -scores[b])[: n_select - local]
    return sorted(top + list(range(n_blocks - local, n_blocks)))


def test_t4_retrieval_forces_the_newest_blocks_and_ranks_the_rest():
    g = torch.Generator().manual_seed(4)
    policy = build("streamkv", retrieve_local=8)
    for trial in range(5):
        keys = torch.randn(H_KV, 12 * 20, D, generator=g)
        queries = torch.randn(H_Q, 5, D, generator=g)
        picked = policy.select(queries, policy.block_keys(keys, 12), 10).tolist()
        assert picked == rekv_local_transcription(queries, keys, 12, 10, 8), trial
        assert picked[-8:] == list(range(12, 20))
    assert build("streamkv").select(queries, policy.block_keys(keys, 12), 25).tolist() == list(range(20))


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("min_segment_size", 1, "min_segment_size=1"),
        ("segment_theta", 1.5, "segment_theta"),
        ("compression_ratio", 0.0, "compression_ratio"),
        ("budget_mode", "loose", "budget_mode"),
        ("retrieve_local", -1, "retrieve_local=-1"),
        ("retrieve_temp", 1.5, "retrieve_temp=1.5"),
    ],
)
def test_bad_knobs_are_refused_in_one_line(knob, value, message):
    with pytest.raises(ValueError, match=message) as err:
        build("streamkv", **{knob: value})
    assert "\n" not in str(err.value)


def test_a_forced_recency_that_fills_the_buffer_is_refused_at_config_time():
    policy = build("streamkv", retrieve_local=3)
    policy.validate(72, 16, 144 + 32)  # (176 - 72) // 16 = 6 frames: 3 forced leaves room to rank
    with pytest.raises(ValueError, match="compress.retrieve_local"):
        build("streamkv", retrieve_local=6).validate(72, 16, 144 + 32)
