"""StreamMem's scores, kept set, frame merging and prototypes against a direct transcription of the paper's
formulas (spec/peers.md section 3), on random tensors."""

from __future__ import annotations

import math

import pytest
import torch

from infinipotv.compress.streammem import frame_prototypes, keep_top, merge_frames, merge_runs, proxy_scores


def _paper_scores(queries, keys, aggregate, select):
    """A = softmax(Q_proxy K^T / sqrt d) per query head, rows aggregated, query heads of a KV head together."""
    hq, q, d = queries.shape
    hkv, t, _ = keys.shape
    group = hq // hkv
    out = torch.zeros(hkv, t)
    for kv in range(hkv):
        rows = []
        for h in range(kv * group, (kv + 1) * group):
            for r in range(q):
                logits = torch.tensor([float(queries[h, r] @ keys[kv, j]) / math.sqrt(d) for j in range(t)])
                rows.append(torch.softmax(logits, dim=0))
        rows = torch.stack(rows)
        out[kv] = rows.mean(0) if aggregate == "mean" else rows.max(0).values
    if select == "layer":
        out = out.mean(0, keepdim=True).expand(hkv, t)
    return out


@pytest.mark.parametrize("aggregate", ["mean", "max"])
@pytest.mark.parametrize("select", ["head", "layer"])
def test_proxy_scores_are_the_papers_attention(aggregate, select):
    g = torch.Generator().manual_seed(0)
    queries, keys = torch.randn(6, 4, 8, generator=g), torch.randn(2, 30, 8, generator=g)
    got = proxy_scores(queries, keys, aggregate, select)
    torch.testing.assert_close(got, _paper_scores(queries, keys, aggregate, select), rtol=1e-5, atol=1e-7)


def test_kept_set_is_the_top_of_old_memory_and_new_clip():
    g = torch.Generator().manual_seed(1)
    scores = torch.rand(3, 40, generator=g)
    kept = keep_top(scores, 25)
    for h in range(3):
        order = sorted(range(40), key=lambda j: -float(scores[h, j]))
        assert kept[h].tolist() == sorted(order[:25])


def test_near_duplicate_frames_merge_by_averaging():
    g = torch.Generator().manual_seed(2)
    frames = torch.randn(7, 5, 4, generator=g)
    frames[2] = frames[1] + 0.01 * torch.randn(5, 4, generator=g)  # a near-duplicate of frame 1
    frames[3] = frames[2].clone()  # a duplicate of frame 2: one run 1..3
    frames[6] = frames[5]
    starts = merge_runs(frames, 0.95)
    runs, current = [], [0]
    for t in range(1, 7):  # the paper: frame t joins frame t-1 when cos(emb_t, emb_{t-1}) > delta
        a, b = frames[t].flatten(), frames[t - 1].flatten()
        if float(a @ b / (a.norm() * b.norm())) > 0.95:
            current.append(t)
        else:
            runs.append(current)
            current = [t]
    runs.append(current)
    assert starts.tolist() == [run[0] for run in runs] == [0, 1, 4, 5]
    merged = merge_frames(frames, starts)
    torch.testing.assert_close(merged, torch.stack([frames[run].mean(0) for run in runs]))


def test_prototypes_are_score_weighted_means_of_each_frame():
    g = torch.Generator().manual_seed(3)
    heads, p, n_frames, d = 2, 4, 3, 5
    keys, values = torch.randn(heads, p * n_frames, d, generator=g), torch.randn(heads, p * n_frames, d, generator=g)
    scores = torch.rand(heads, p * n_frames, generator=g)
    scores[1, :p] = 0  # a frame nobody attends: plain means
    frame = torch.arange(n_frames).repeat_interleave(p)
    k, v = frame_prototypes(keys, values, scores, frame, n_frames)
    for h in range(heads):
        for f in range(n_frames):
            s = scores[h, f * p : (f + 1) * p]
            alpha = s / s.sum() if s.sum() > 0 else torch.full((p,), 1 / p)
            torch.testing.assert_close(k[h, f], (alpha[:, None] * keys[h, f * p : (f + 1) * p]).sum(0))
            torch.testing.assert_close(v[h, f], (alpha[:, None] * values[h, f * p : (f + 1) * p]).sum(0))
