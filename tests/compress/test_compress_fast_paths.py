"""The compression pass's fast paths (docs/performance.md, "What was optimised"), each checked bit for bit against
the plain computation it replaces: unit keys, the pseudo-frames TaR path, half-precision reads, and the sorting of
the kept indices."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from infinipotv.compress import FrameLayout, build
from infinipotv.compress.base import ascending
from infinipotv.compress.layout import FrameCoords, frame_coords
from infinipotv.compress.pooling import KERNELS, pool
from infinipotv.compress.scores import KEY_EPS, tar_scores, unit_keys


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_unit_keys_equal_normalize(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    full = (torch.randn(3, 130, 64, generator=gen) * 3).to(dtype)
    full[1, 40] = 0  # a zero key: eps in the denominator
    keys = full[:, 10:]  # a slice along tokens, as the session passes the region after the prefix
    got = unit_keys(keys)
    assert got.dtype == torch.float32 and torch.equal(got, F.normalize(keys.float(), dim=-1, eps=KEY_EPS))
    assert torch.equal(keys, full[:, 10:]) and got.data_ptr() != keys.data_ptr()  # the input is left as it was


@pytest.mark.parametrize(("n_tokens", "grid"), [(600, (3, 4)), (605, (3, 4)), (7, (3, 4)), (12, (2, 6)), (61, (5, 5))])
def test_periodic_tar_path_equals_the_general_path(n_tokens: int, grid: tuple[int, int]) -> None:
    """The pseudo-frames view's coordinates (no integer division) and its broadcast dot product (in place) give
    exactly the coordinates and scores of the general per-token path."""
    p = grid[0] * grid[1]
    layout = FrameLayout.fresh(3, n_tokens, grid)
    coords = frame_coords(layout, "pseudo_frames", n_tokens)
    n_frames = math.ceil(n_tokens / p)
    cell = (torch.arange(n_tokens) + n_frames * p - n_tokens).expand(3, n_tokens)
    assert torch.equal(coords.frame, cell // p) and torch.equal(coords.slot, cell % p)
    general = FrameCoords(
        coords.frame.contiguous(), coords.slot.contiguous(), coords.n_grid_frames, coords.n_frames, grid, offset=None
    )
    keys = torch.randn(3, n_tokens, 32, generator=torch.Generator().manual_seed(n_tokens))
    for r in (1, max(1, n_frames // 4)):
        assert torch.equal(coords.recent(r), general.recent(r))
        for reverse in (False, True):
            assert torch.equal(tar_scores(keys, coords, r, reverse), tar_scores(keys, general, r, reverse))
    scores = torch.rand(3, n_tokens, generator=torch.Generator().manual_seed(1))
    for mode, size in KERNELS:  # pooling reads the pseudo-frames grid as a shifted copy instead of a scatter/gather
        assert torch.equal(pool(scores, coords, mode, size), pool(scores, general, mode, size))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["tar_van_pool", "tar_van", "tar", "van", "van_pool", "tar_reversed"])
def test_policies_read_half_precision_as_fp32(dtype: torch.dtype, name: str) -> None:
    """A reads_any_float policy given a half-precision cache keeps exactly what it keeps on the fp32 copy."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.randn(3, 620, 64, generator=gen).to(dtype)[:, 20:]
    values = (torch.randn(3, 620, 64, generator=gen) * torch.rand(3, 620, 1, generator=gen)).to(dtype)[:, 20:]
    layout = FrameLayout.fresh(3, 600, (3, 4))
    for pooling in ("layer_quartile", "cv"):
        kw = {"pooling": pooling} if name in ("tar_van_pool", "van_pool") else {}
        policy = build(name, **kw)
        for layer in (0, 9, 17, 29):
            got = policy(keys, values, layout, 450, layer, 30)
            assert torch.equal(got, policy(keys.float(), values.float(), layout, 450, layer, 30))


def test_ascending_sorts_and_names_bad_indices() -> None:
    """Sorted kept indices, and the policy's fault named for an index outside the region or a repeated one."""
    gen = torch.Generator().manual_seed(0)
    for n_tokens, n_keep in ((600, 450), (37, 1), (50, 50)):
        kept = torch.rand(3, n_tokens, generator=gen).argsort(1)[:, :n_keep]
        got = ascending(kept, n_tokens, "p")
        assert torch.equal(got, kept.sort(1).values)
        assert torch.equal(ascending(got, n_tokens, "p"), got)  # a policy's indices already in order are copied
    bad = {
        "outside": torch.tensor([[0, 5], [1, 2]]),
        "repeated": torch.tensor([[0, 1], [3, 3]]),
        "negative": torch.tensor([[0, -1], [1, 2]]),
        "outside, in order": torch.tensor([[0, 1], [2, 5]]),
        "negative, in order": torch.tensor([[-1, 0], [1, 2]]),
    }
    for name, kept in bad.items():
        match = "a token twice" if name == "repeated" else r"indices outside \[0, 5\)"
        with pytest.raises(RuntimeError, match=match):
            ascending(kept, 5, "p")
