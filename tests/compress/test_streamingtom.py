"""StreamingTOM's CTR against a transcription of upstream's per-frame reduction (YIGE24/StreamingTOM@6c66b05,
``streamingtom/modules/ctr.py``: ``_classify_tokens``, ``_compress_single_frame``, ``_dpc_cluster``,
``_select_and_merge_tokens_by_dpc``, ``_select_tokens_by_attention``), on random tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from infinipotv.compress.streamingtom import budgets, classify_static, embedding_saliency, reduce_frame


def _upstream_static(frames, last):
    masks = []
    for i in range(frames.shape[0]):
        if i == 0 and last is None:
            masks.append(torch.zeros(frames.shape[1], dtype=torch.bool))
            continue
        prev = last if i == 0 else frames[i - 1]
        sim = (F.normalize(frames[i], p=2, dim=-1) * F.normalize(prev, p=2, dim=-1)).sum(-1)
        masks.append(sim > 0.9)
    return torch.stack(masks)


def _upstream_dpc(tokens, cluster_num, k, noise):
    n, d = tokens.shape
    if n <= 1:
        return torch.arange(n)
    dist = torch.cdist(tokens, tokens) / (d**0.5)
    nearest, _ = torch.topk(dist, min(k, n - 1), dim=-1, largest=False)
    density = (-(nearest**2).mean(dim=-1)).exp()
    density += noise * 1e-6
    higher = density[:, None] > density[None, :]
    to_higher = torch.where(higher, dist, dist.max()).min(dim=-1)[0]
    _, centers = torch.topk(density * to_higher, min(cluster_num, n))
    return torch.sort(centers)[0]


def _upstream_frame(features, scores, static, retain, k, beta, noise):
    dynamic = ~static
    n_static, n_dynamic = int(static.sum()), int(dynamic.sum())
    s_budget = int(retain * n_static / (n_static + n_dynamic))
    d_budget = retain - s_budget
    if s_budget > n_static:
        s_budget, d_budget = n_static, retain - n_static
    if d_budget > n_dynamic:
        d_budget = n_dynamic
        s_budget = retain - d_budget
    feats, poss = [], []
    if s_budget > 0:
        masked = features[static]
        centres = _upstream_dpc(masked, s_budget, k, noise)
        positions = torch.where(static)[0][centres]
        if s_budget == masked.shape[0]:
            feats.append(masked[centres])
        else:
            dist = torch.cdist(masked, masked) / (masked.shape[1] ** 0.5)
            rest = torch.tensor([i for i in range(masked.shape[0]) if i not in centres.tolist()], dtype=torch.long)
            assignment = torch.argmin(dist[rest][:, centres], dim=1)
            merged = []
            for i, c in enumerate(centres):
                members = masked[rest][assignment == i]
                merged.append(beta * masked[c] + (1 - beta) * members.mean(0) if len(members) else masked[c])
            feats.append(torch.stack(merged))
        poss.append(positions)
    if d_budget > 0:
        _, top = torch.topk(scores[dynamic], d_budget)
        positions = torch.where(dynamic)[0][top]
        feats.append(features[positions])
        poss.append(positions)
    pos = torch.cat(poss)
    return torch.cat(feats)[torch.argsort(pos)], pos.sort().values


def test_static_tokens_are_those_like_the_previous_frames_token_at_the_same_place():
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(5, 16, 8, generator=g)
    frames[2, :9] = frames[1, :9] + 0.05 * torch.randn(9, 8, generator=g)
    last = frames[0] + 0.01 * torch.randn(16, 8, generator=g)
    for previous in (None, last):
        assert torch.equal(classify_static(frames, previous), _upstream_static(frames, previous))


@pytest.mark.parametrize(("n_static", "retain"), [(0, 5), (7, 5), (16, 5), (3, 12), (13, 12), (9, 16)])
def test_budgets_follow_upstreams_rounding_and_clamps(n_static, retain):
    p = 16
    k_s, k_d = budgets(n_static, p, retain)
    assert k_s + k_d == retain and 0 <= k_s <= n_static and 0 <= k_d <= p - n_static
    assert k_s == min(int(retain * n_static / p), n_static) or k_d == p - n_static


@pytest.mark.parametrize("seed", range(6))
def test_a_frame_reduces_as_upstreams_ctr(seed):
    g = torch.Generator().manual_seed(seed)
    p, hidden, retain = 36, 8, 10
    x = torch.randn(p, hidden, generator=g)
    static = torch.rand(p, generator=g) < [0.0, 0.3, 0.6, 0.9, 1.0, 0.5][seed]
    scores = torch.rand(p, generator=g)
    noise = torch.rand(int(static.sum()), generator=g)
    tokens, slots = reduce_frame(x, scores, static, retain, k=7, beta=0.6, noise=noise)
    want_tokens, want_slots = _upstream_frame(x, scores, static, retain, 7, 0.6, noise)
    assert slots.tolist() == want_slots.tolist()
    torch.testing.assert_close(tokens, want_tokens)
    assert tokens.shape == (retain, hidden)


def test_the_stand_in_saliency_ranks_the_odd_token_first():
    frame = torch.ones(9, 4)
    frame[5] = torch.tensor([1.0, -1.0, 2.0, 0.0])
    assert int(embedding_saliency(frame).argmax()) == 5
