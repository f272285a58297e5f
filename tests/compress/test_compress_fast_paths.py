"""The compression pass's fast paths (docs/performance.md, "What was optimised"), each checked bit for bit against
the plain computation it replaces: unit keys, the pseudo-frames TaR path, half-precision reads, and the CPU kernels
of TaR's similarity and VaN's norm (:mod:`infinipotv.compress.native`) against the PyTorch path."""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

from infinipotv.compress import FrameLayout, build, native
from infinipotv.compress.base import ascending, top_indices
from infinipotv.compress.layout import FrameCoords, frame_coords
from infinipotv.compress.pooling import KERNELS, pool
from infinipotv.compress.scores import KEY_EPS, tar_scores, unit_keys, van_scores


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "torch_path"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_unit_keys_equal_normalize(dtype: torch.dtype, kernels: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    full = (torch.randn(3, 130, 64, generator=gen) * 3).to(dtype)
    full[1, 40] = 0  # a zero key: eps in the denominator
    keys = full[:, 10:]  # a slice along tokens, as the session passes the region after the prefix
    with nullcontext() if kernels else native.torch_path():
        assert native.applies(keys) == (kernels and native.library() is not None)
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


def _region(dtype: torch.dtype, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys and values of a region after a prefix (a slice along tokens, as the session passes it), with a zero key,
    and each head's ids after an eviction (for the grid-aware view)."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(3, 620, dim, generator=gen)
    keys[1, 40] = 0
    values = torch.randn(3, 620, dim, generator=gen) * torch.rand(3, 620, 1, generator=gen)
    ids = torch.rand(3, 1200, generator=gen).argsort(1)[:, :600].sort(1).values
    return keys.to(dtype)[:, 20:], values.to(dtype)[:, 20:], ids


@pytest.mark.skipif(native.library() is None, reason="the score kernels cannot be built or differ from PyTorch here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [64, 128, 40])
def test_score_kernels_equal_the_torch_path(dtype: torch.dtype, dim: int) -> None:
    """TaR's scores, VaN's norms and the kept indices of InfiniPot-V are the same bits with the kernels as without,
    in both frame views (head_dim 40 takes the kernels' general loop)."""
    keys, values, ids = _region(dtype, dim, dim)
    assert native.applies(keys) and native.applies(values)
    for layout in (FrameLayout.fresh(3, 600, (3, 4)), FrameLayout(ids, (3, 4))):
        for view in ("pseudo_frames", "grid_aware"):
            coords = frame_coords(layout, view, 600)
            got = tar_scores(keys, coords, 10), van_scores(values)
            policy = build("tar_van_pool", frame_view=view)
            kept = [policy(keys, values, layout, 450, layer, 30) for layer in (0, 9, 17, 29)]
            with native.torch_path():
                assert not native.applies(keys)
                assert torch.equal(got[0], tar_scores(keys, coords, 10))
                assert torch.equal(got[1], van_scores(values))
                for layer, k in zip((0, 9, 17, 29), kept):
                    assert torch.equal(k, policy(keys, values, layout, 450, layer, 30))


def test_tensors_the_kernels_do_not_take_go_the_torch_way() -> None:
    """A head_dim that is not a multiple of 8, rows that are not contiguous, another dtype or device."""
    x = torch.randn(2, 30, 64)
    assert not native.applies(torch.randn(2, 30, 36))
    assert not native.applies(x[:, :, ::2])
    assert not native.applies(x.transpose(0, 1))
    assert not native.applies(x.double())
    assert not native.applies(torch.empty(2, 30, 64, device="meta"))


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV, "0")
    native.library.cache_clear()
    try:
        assert native.library() is None
        assert not native.applies(torch.randn(2, 30, 64))
    finally:
        monkeypatch.undo()
        native.library.cache_clear()


def test_a_failed_build_warns_and_the_torch_path_runs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("INFINIPOTV_CACHE", str(tmp_path))
    native.library.cache_clear()
    x = torch.randn(2, 30, 64)
    try:
        with pytest.warns(UserWarning, match="compression scores: building scores_kernels.c with .*no-such-compiler"):
            assert native.library() is None
        assert not native.applies(x)
        got = van_scores(x)
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
    assert torch.equal(got, x.norm(dim=-1))


def test_a_build_that_differs_from_pytorch_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load check: kernels whose bits differ from PyTorch's (here: a norm off by one ulp) warn once and leave
    the PyTorch path running."""
    if native.library() is None:
        pytest.skip("the score kernels cannot be built here")
    real = native._row_norms

    def off_by_one_ulp(lib, x):
        out = real(lib, x)
        return torch.nextafter(out, torch.full_like(out, math.inf))

    monkeypatch.setattr(native, "_row_norms", off_by_one_ulp)
    native.library.cache_clear()
    try:
        with pytest.warns(UserWarning, match="differ from PyTorch .*row norms"):
            assert native.library() is None
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.library() is not None


@pytest.mark.skipif(native.library() is None, reason="the score kernels cannot be built or differ from PyTorch here")
def test_ascending_kernel_equals_the_torch_path() -> None:
    """Sorted kept indices, and the same error for an index outside the region or a repeated one."""
    gen = torch.Generator().manual_seed(0)
    for n_tokens, n_keep in ((600, 450), (37, 1), (50, 50)):
        kept = torch.rand(3, n_tokens, generator=gen).argsort(1)[:, :n_keep]
        assert native.takes_indices(kept)
        got = ascending(kept, n_tokens, "p")
        with native.torch_path():
            assert not native.takes_indices(kept)
            assert torch.equal(got, ascending(kept, n_tokens, "p"))
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
        for path in ("native", "torch"):
            with native.torch_path() if path == "torch" else nullcontext(), pytest.raises(RuntimeError, match=match):
                ascending(kept, 5, "p")


def _scores_with_ties(gen: torch.Generator, kind: str, n_tokens: int) -> torch.Tensor:
    """Scores as passes make them: distinct, tied (whole frames share a rank), +inf forced picks and -inf, zeros of
    both signs among subnormals, and a NaN."""
    s = torch.randn(3, n_tokens, generator=gen)
    if kind == "tied":
        s = torch.randint(-3, 4, (3, n_tokens), generator=gen).float()
    elif kind == "infinite":
        s[:, : n_tokens // 3] = math.inf
        s[:, -2:] = -math.inf
    elif kind == "zeros":
        s = s * 1e-40
        s[0, ::5], s[1, ::7] = -0.0, 0.0
    elif kind == "nan":
        s[1, n_tokens // 2] = math.nan
    return s


@pytest.mark.skipif(native.library() is None, reason="the score kernels cannot be built or differ from PyTorch here")
@pytest.mark.parametrize("kind", ["distinct", "tied", "infinite", "zeros", "nan"])
def test_top_set_is_the_torch_topk_set_or_declines(kind: str) -> None:
    """The kernel's top-k is torch.topk's set, ascending, wherever that set is unique; where scores tie across the
    k-th place (or a NaN is present) it declines and top_indices returns torch.topk's own pick, so no kept index
    changes either way."""
    gen = torch.Generator().manual_seed(len(kind))
    declined = 0
    for n_tokens in (1, 2, 7, 64, 300, 6044):
        score = _scores_with_ties(gen, kind, n_tokens)
        for k in sorted({1, max(1, n_tokens // 2), max(1, 3 * n_tokens // 4), n_tokens}):
            assert native.takes_scores(score, k)
            ref = torch.topk(score, k, dim=1, sorted=False).indices
            got = native.top_set(score, k)
            kth = torch.topk(score, k, dim=1).values[:, -1:]
            unique = not score.isnan().any() and bool(((score >= kth).sum(1) == k).all())
            assert (got is not None) == unique, (n_tokens, k)
            if got is None:
                declined += 1
                assert torch.equal(top_indices(score, k), ref)
            else:
                assert torch.equal(got, ref.sort(1).values)
                assert torch.equal(top_indices(score, k), got)
    assert declined == 0 if kind == "distinct" else declined > 0
    assert not native.takes_scores(score.double(), 1) and not native.takes_scores(score, 0)
    with native.torch_path():
        assert not native.takes_scores(score, 1)


@pytest.mark.skipif(native.library() is None, reason="the score kernels cannot be built or differ from PyTorch here")
@pytest.mark.parametrize("view", ["pseudo_frames", "grid_aware"])
@pytest.mark.parametrize(("n_tokens", "grid"), [(600, (3, 4)), (605, (3, 4)), (9, (3, 4)), (700, (5, 7)), (40, (1, 1))])
def test_pooling_kernel_equals_avg_pool(n_tokens: int, grid: tuple[int, int], view: str) -> None:
    """Every pooling mode and clipping gives avg_pool1d's / avg_pool3d's bits through the kernel, on grids with
    and without whole lane groups of frames, and on one whose kernel spans every frame."""
    gen = torch.Generator().manual_seed(n_tokens)
    layout = FrameLayout.fresh(3, n_tokens, grid)
    coords = frame_coords(layout, view, n_tokens)
    scores = torch.rand(3, n_tokens, generator=gen) * torch.logspace(-3, 3, n_tokens)
    scores[1, ::7] = 0.0
    for mode, size in KERNELS:
        for clip in ("cube", "axes"):
            got = pool(scores, coords, mode, size, clip)
            with native.torch_path():
                assert torch.equal(got, pool(scores, coords, mode, size, clip)), (mode, clip)
    assert native.takes_grid(torch.zeros(3, 4, 3, 4), (3, 3, 3))
    assert not native.takes_grid(torch.zeros(3, 4, 3, 4), (3, 2, 3))  # an even side
    assert not native.takes_grid(torch.zeros(3, 4, 3, 4), (5, 3, 3))  # longer than its axis
    assert not native.takes_grid(torch.zeros(3, 4, 3, 4).double(), (3, 3, 3))
