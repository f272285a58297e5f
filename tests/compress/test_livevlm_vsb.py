"""LiveVLM's vision-sink buckets keep exactly ``n_keep`` tokens whatever the bucket size B: where B does not divide
``n_keep``, the remainder goes to the best-scoring tokens left (the issue's example kept 2 of 3)."""

from __future__ import annotations

import pytest
import torch

from infinipotv.compress.livevlm import vsb_keep


def test_the_remainder_is_filled_by_score() -> None:
    assert vsb_keep(torch.tensor([0.4, 0.3, 0.2, 0.1]), 3, 0, 2).tolist() == [0, 1, 2]


@pytest.mark.parametrize("bucket_size", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("sink_share", [0.0, 0.5, 1.0])
def test_always_n_keep_distinct_tokens(bucket_size: int, sink_share: float) -> None:
    generator = torch.Generator().manual_seed(bucket_size)
    for n_tokens in (7, 20, 64):
        scores = torch.rand(n_tokens, generator=generator)
        for n_keep in range(1, n_tokens + 1):
            kept = vsb_keep(scores, n_keep, round(sink_share * n_keep), bucket_size)
            assert kept.numel() == n_keep and kept.unique().numel() == n_keep, (n_tokens, n_keep)
            assert (kept[1:] > kept[:-1]).all() and 0 <= kept.min() and kept.max() < n_tokens


def test_a_divisible_capacity_is_unchanged() -> None:
    """Where B divides n_keep the buckets are full and nothing is filled: at most B tokens per bucket."""
    scores = torch.rand(40, generator=torch.Generator().manual_seed(0))
    kept = vsb_keep(scores, 12, 0, 3)
    bucket = kept * 4 // 40  # 12 // 3 = 4 buckets over 40 positions
    assert torch.bincount(bucket, minlength=4).tolist() == [3, 3, 3, 3]
