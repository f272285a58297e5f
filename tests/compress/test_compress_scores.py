"""Each score pinned to its definition, against slow direct computations on small hand-made regions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from infinipotv.compress import POLICIES, FrameLayout, build, policy_params
from infinipotv.compress.layout import frame_coords
from infinipotv.compress.pooling import pool, pooling_kernel
from infinipotv.compress.scores import tar_scores


def as_sets(kept: torch.Tensor) -> list[set[int]]:
    return [set(row.tolist()) for row in kept]


def direct_coords(ids: torch.Tensor, p: int, view: str) -> tuple[list[list[int]], list[list[int]]]:
    """(frame, slot) per head and token, written out from the definitions of the two views."""
    heads, n_tokens = ids.shape
    pad = (-n_tokens) % p
    frames, slots = [], []
    for h in range(heads):
        if view == "pseudo_frames":
            frames.append([(i + pad) // p for i in range(n_tokens)])
            slots.append([(i + pad) % p for i in range(n_tokens)])
        else:
            first = int(ids.min()) // p
            frames.append([int(i) // p - first for i in ids[h]])
            slots.append([int(i) % p for i in ids[h]])
    return frames, slots


def direct_tar(keys: torch.Tensor, ids: torch.Tensor, p: int, r: int, view: str) -> torch.Tensor:
    """s_TaR by loops: -mean cos with the same slot in each of the r newest frames; recent tokens +inf."""
    frames, slots = direct_coords(ids, p, view)
    out = torch.empty(ids.shape, dtype=torch.float64)
    for h in range(ids.shape[0]):
        newest = max(frames[h])
        recent = [i for i in range(ids.shape[1]) if frames[h][i] > newest - r]
        for i in range(ids.shape[1]):
            if i in recent:
                out[h, i] = math.inf
                continue
            cos = [F.cosine_similarity(keys[h, i], keys[h, j], dim=0) for j in recent if slots[h][j] == slots[h][i]]
            out[h, i] = -sum(cos) / len(cos) if cos else 0.0
    return out


@pytest.mark.parametrize("view", ["pseudo_frames", "grid_aware"])
@pytest.mark.parametrize("compressed", [False, True])
def test_tar_scores_match_definition(region, view, compressed):
    keys, _, layout = region(frames=5, old_frames=6, keep_old=29) if compressed else region(frames=6)
    coords = frame_coords(layout, view, keys.shape[1])
    for r in (1, 2):
        fast = tar_scores(keys, coords, r)
        expected = direct_tar(keys, layout.token_ids, 12, r, view)
        assert torch.allclose(fast.double(), expected, atol=1e-5)


def test_repeated_frame_is_what_tar_drops_first(region):
    keys, values, layout = region(frames=8)  # p = 12, f = 8 -> r = 1
    keys = keys.clone()
    keys[:, 36:48] = 3.0 * keys[:, 84:96]  # frame 3 = the newest frame again (scaled: cosine 1)
    n_tokens, frame3 = keys.shape[1], set(range(36, 48))
    everything_but = set(range(n_tokens)) - frame3
    assert as_sets(build("tar")(keys, values, layout, n_tokens - 12, 0, 4)) == [everything_but] * 3
    assert as_sets(build("tar_frame")(keys, values, layout, n_tokens - 12, 0, 4)) == [everything_but] * 3
    reversed_kept = build("tar_reversed")(keys, values, layout, 24, 0, 4)
    assert as_sets(reversed_kept) == [frame3 | set(range(84, 96))] * 3


def test_van_keeps_largest_value_norms(region):
    keys, values, layout = region()
    kept = build("van")(keys, values, layout, 30, 0, 4)
    expected = values.norm(dim=-1).topk(30, dim=1).indices
    assert as_sets(kept) == as_sets(expected)
    knorm = build("knorm")(keys, values, layout, 30, 0, 4)
    assert as_sets(knorm) == as_sets((-keys.norm(dim=-1)).topk(30, dim=1).indices)


def direct_pool(dense: torch.Tensor, kernel: tuple[int, int, int]) -> torch.Tensor:
    """Average over the window, zeros outside the grid counted in the denominator. ``dense``: [F, h, w]."""
    out = torch.zeros_like(dense)
    n_frames, h, w = dense.shape
    kf, kh, kw = (k // 2 for k in kernel)
    for t in range(n_frames):
        for i in range(h):
            for j in range(w):
                total = 0.0
                for dt in range(-kf, kf + 1):
                    for di in range(-kh, kh + 1):
                        for dj in range(-kw, kw + 1):
                            if 0 <= t + dt < n_frames and 0 <= i + di < h and 0 <= j + dj < w:
                                total += float(dense[t + dt, i + di, j + dj])
                out[t, i, j] = total / (kernel[0] * kernel[1] * kernel[2])
    return out


# grid (2, 4), 3 dense frames: 3D 7 -> (3, 1, 3); 2D 5 -> (1, 1, 3); 1D 3 over the flattened sequence
@pytest.mark.parametrize("mode, size, kernel", [("3d", 7, (3, 1, 3)), ("2d", 5, (1, 1, 3)), ("1d", 3, None)])
@pytest.mark.parametrize("view", ["pseudo_frames", "grid_aware"])
def test_pooling_matches_direct_computation(mode, size, kernel, view):
    p, heads = 8, 2
    ids = torch.tensor(
        [
            [0, 1, 3, 4, 6, 7, 8, 10, 11, 13, 15, 16, 17, 18, 19, 20, 21, 22],
            [1, 2, 3, 5, 6, 7, 9, 10, 12, 13, 14, 16, 17, 18, 19, 21, 22, 23],
        ]
    )
    layout = FrameLayout(ids, (2, 4))
    scores = torch.rand(heads, ids.shape[1], generator=torch.Generator().manual_seed(1)) + 0.5
    coords = frame_coords(layout, view, ids.shape[1])
    assert coords.n_grid_frames == 3  # pseudo: 18 tokens = an oldest partial frame of 2 + 2 frames of p = 8
    pooled = pool(scores, coords, mode, size)
    frames, slots = direct_coords(ids, p, view)
    for h in range(heads):
        dense = torch.zeros(3, 2, 4)
        for i in range(ids.shape[1]):
            dense[frames[h][i], slots[h][i] // 4, slots[h][i] % 4] = scores[h, i]
        if kernel is None:
            flat = dense.flatten()
            expected = torch.stack([flat[max(0, c - 1) : c + 2].sum() / 3 for c in range(flat.numel())]).view(3, 2, 4)
        else:
            expected = direct_pool(dense, kernel)
        direct = torch.stack([expected[frames[h][i], slots[h][i] // 4, slots[h][i] % 4] for i in range(ids.shape[1])])
        assert torch.allclose(pooled[h], direct, atol=1e-6)


@pytest.mark.parametrize("n_layers", [1, 2, 3, 4, 5, 6, 28])
def test_layer_quartile_axes_kernels(n_layers):
    van = torch.ones(2, 10)
    modes = [
        pooling_kernel("layer_quartile_axes", layer, n_layers, van, (1.0, 0.6, 0.3))[0] for layer in range(n_layers)
    ]
    order = ["3d", "2d", "1d", "none"]
    assert modes[0] == "3d" and [order.index(m) for m in modes] == sorted(order.index(m) for m in modes)
    if n_layers >= 4:
        assert set(modes) == set(order) and modes[-1] == "none"
    explicit = {
        2: ["3d", "1d"],
        6: ["3d", "3d", "2d", "1d", "1d", "none"],
        28: ["3d"] * 7 + ["2d"] * 7 + ["1d"] * 7 + ["none"] * 7,
    }
    if n_layers in explicit:  # groups of equal size by index: group = layer * 4 // n_layers
        assert modes == explicit[n_layers]


def public_code_kernel(layer: int, n_layers: int) -> str:
    """The public code's layer groups, transcribed: group = layer // max(1, n_layers // 4) into its 4 kernels
    (past the last one, where the public code would index out of range: none)."""
    kernels = ["3d", "2d", "1d", "none"]
    group = layer // max(1, n_layers // 4)
    return kernels[group] if group < len(kernels) else "none"


@pytest.mark.parametrize("n_layers", [1, 2, 5, 6, 28, 30])
def test_layer_quartile_is_the_public_codes_grouping(n_layers):
    van = torch.ones(2, 10)
    modes = [pooling_kernel("layer_quartile", layer, n_layers, van, (1.0, 0.6, 0.3)) for layer in range(n_layers)]
    assert [mode for mode, _, _ in modes] == [public_code_kernel(layer, n_layers) for layer in range(n_layers)]
    assert {clip for _, _, clip in modes} == {"cube"}


def public_code_pool(van: torch.Tensor, grid: tuple[int, int], mode: str) -> torch.Tensor:
    """The public code's pooling of a fresh region [H, F*p], transcribed: the 2D/3D kernel is a cube of side
    min(size, frames, h, w) (frames count for 2D too), minus 1 if even, and no pooling under 2; 1D: kernel 3."""
    heads, n_tokens = van.shape
    h, w = grid
    n_frames = n_tokens // (h * w)
    if mode == "none":
        return van
    if mode == "1d":
        return torch.stack(
            [torch.stack([van[i, max(0, c - 1) : c + 2].sum() / 3 for c in range(n_tokens)]) for i in range(heads)]
        )
    side = min(7 if mode == "3d" else 5, n_frames, h, w)
    if side % 2 == 0:
        side -= 1
    if side < 2:
        return van
    kernel = (side if mode == "3d" else 1, side, side)
    return torch.stack([direct_pool(van[i].view(n_frames, h, w), kernel).flatten() for i in range(heads)])


@pytest.mark.parametrize("grid, frames", [((2, 4), 3), ((3, 4), 5), ((5, 6), 2), ((3, 3), 9), ((1, 6), 8)])
def test_public_code_preset_selects_what_the_public_code_selects(region, grid, frames):
    """On grids smaller than the kernels (where clipping decides), VaN + pooling under ``preset=public_code`` with
    its pooling keeps exactly the public code's picks in every layer group, the one past the 4 kernels included."""
    keys, values, layout = region(grid=grid, frames=frames, heads=2)
    n_layers, n_keep = 5, keys.shape[1] // 3
    policy = build("van_pool", preset="public_code", pooling="layer_quartile")
    for layer in range(n_layers):
        pooled = public_code_pool(values.norm(dim=-1), grid, public_code_kernel(layer, n_layers))
        expected = pooled.topk(n_keep, dim=1).indices.sort(dim=1).values
        assert torch.equal(policy(keys, values, layout, n_keep, layer, n_layers), expected), (grid, frames, layer)


@pytest.mark.parametrize("low, mode", [(0.0, "3d"), (0.2, "2d"), (0.5, "1d"), (0.8, "none")])
def test_cv_kernels(low, mode):
    van = torch.tensor([[1.0, low]])  # CV = (1 - low) / (1 + low): 1, 0.67, 0.33, 0.11
    assert pooling_kernel("cv", 0, 1, van, (1.0, 0.6, 0.3))[0] == mode


@pytest.mark.parametrize("pooling", ["none", "layer_quartile", "layer_quartile_axes", "cv"])
def test_alpha_zero_is_van_and_alpha_one_is_tar(region, pooling):
    keys, values, layout = region(old_frames=10, keep_old=40)
    for layer in range(4):
        args = (keys, values, layout, 50, layer, 4)
        pooled_van = build("van_pool", pooling=pooling)(*args)
        assert torch.equal(build("tar_van_pool", alpha=0.0, pooling=pooling)(*args), pooled_van)
        assert torch.equal(build("tar_van_pool", alpha=1.0, pooling=pooling)(*args), build("tar")(*args))
    assert torch.equal(build("tar_van", alpha=0.0)(*args), build("van")(*args))
    assert torch.equal(build("van_pool", pooling="none")(*args), build("van")(*args))


def test_tar_alone_is_recent_frames_plus_top_past(region):
    keys, values, layout = region(frames=8)  # f = 8 -> r = 1: the last 12 tokens
    direct = direct_tar(keys, layout.token_ids, 12, 1, "pseudo_frames")
    assert as_sets(build("tar")(keys, values, layout, 40, 0, 4)) == as_sets(direct.topk(40, dim=1).indices)


def test_tar_van_combination(region):
    keys, values, layout = region(frames=8)
    kept = as_sets(build("tar_van", alpha=0.5)(keys, values, layout, 40, 0, 4))  # n_tar = 20
    tar = direct_tar(keys, layout.token_ids, 12, 1, "pseudo_frames")
    van = values.norm(dim=-1)
    for h in range(keys.shape[0]):
        picked = set(tar[h].topk(20).indices.tolist())
        rest = van[h].clone()
        rest[list(picked)] = -math.inf
        assert kept[h] == picked | set(rest.topk(20).indices.tolist())


def test_reversed_variants_rank_the_other_way(region):
    keys, values, layout = region(frames=8)
    n_tokens, recent = keys.shape[1], set(range(84, 96))

    def dropped(name: str) -> list[set[int]]:
        return [set(range(n_tokens)) - s for s in as_sets(build(name)(keys, values, layout, n_tokens - 25, 0, 4))]

    assert as_sets(build("van_reversed")(keys, values, layout, 25, 0, 4)) == dropped("van")
    dropped_by_tar = dropped("tar")
    kept = as_sets(build("tar_reversed")(keys, values, layout, 12 + 25, 0, 4))
    assert kept == [recent | d for d in dropped_by_tar]


FRAME_VIEW_POLICIES = [name for name in sorted(POLICIES) if "frame_view" in policy_params(name)]


@pytest.mark.parametrize("name", FRAME_VIEW_POLICIES)
@pytest.mark.parametrize("pooling", ["layer_quartile", "cv"])
def test_views_agree_before_any_compression(region, name, pooling):
    keys, values, layout = region(frames=8)
    extra = {"pooling": pooling} if "pooling" in policy_params(name) else {}
    pseudo, grid = build(name, **extra), build(name, frame_view="grid_aware", **extra)
    for layer in range(4):
        args = (keys, values, layout, 40, layer, 4)
        assert torch.equal(pseudo(*args), grid(*args))


def test_views_differ_after_a_pass(region):
    keys, values, layout = region(old_frames=10, keep_old=40)
    args = (keys, values, layout, 50, 0, 4)
    assert not torch.equal(build("tar")(*args), build("tar", frame_view="grid_aware")(*args))


def test_pseudo_frames_count_from_the_end():
    layout = FrameLayout.fresh(1, 30, (3, 4))  # 2 whole frames + an oldest partial frame of 6 tokens
    coords = frame_coords(layout, "pseudo_frames", 30)
    assert coords.n_frames == 3 and coords.frame[0].tolist() == [0] * 6 + [1] * 12 + [2] * 12
    assert coords.slot[0, :6].tolist() == list(range(6, 12)) and coords.slot[0, 6:18].tolist() == list(range(12))


def test_positional_baselines(region):
    keys, values, layout = region(frames=8)  # T = 96, p = 12
    expected_tokens = [i * 95 // 39 for i in range(40)]
    assert build("uniform_tokens")(keys, values, layout, 40, 0, 4)[1].tolist() == expected_tokens
    assert build("uniform_tokens")(keys, values, layout, 1, 0, 4).tolist() == [[95]] * 3
    # ceil(40 / 12) = 4 frames at 0, 2, 4, 7; the oldest picked frame is the one truncated (to its first 4 slots)
    frames = list(range(4)) + list(range(24, 36)) + list(range(48, 60)) + list(range(84, 96))
    assert build("uniform_frames")(keys, values, layout, 40, 0, 4)[2].tolist() == frames
    assert build("swa", n_sink=4)(keys, values, layout, 40, 0, 4)[0].tolist() == list(range(4)) + list(range(60, 96))


def test_random_is_seeded_by_stream_not_history(region):
    keys, values, layout = region(frames=8)
    draw = lambda seed, layer: build("random", seed=seed)(keys, values, layout, 40, layer, 4)  # noqa: E731
    first = draw(0, 1)
    torch.rand(100)  # global RNG state must not matter
    assert torch.equal(first, draw(0, 1))
    assert not torch.equal(first, draw(1, 1)) and not torch.equal(first, draw(0, 2))
