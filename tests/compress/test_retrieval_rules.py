"""ReKV's block selection and LiveVLM's page selection and vision-sink buckets, held against direct transcriptions
of the upstream formulas (spec/peers.md sections 1 and 4) on random tensors."""

from __future__ import annotations

import math

import pytest
import torch

from infinipotv.compress import POLICIES, build
from infinipotv.compress.livevlm import vsb_keep
from infinipotv.compress.params.retrieval import RetrievalParams

H_Q, H_KV, D = 6, 2, 8


def rekv_transcription(queries: torch.Tensor, pre_rope_keys: torch.Tensor, block: int, topk: int) -> list[int]:
    """ReKV (llava_onevision_rekv.py L44-70, kv_cache_manager.py L600-608, L172-180, L448, L459): the block's
    representative is the mean of its pre-RoPE keys expanded to the query heads (GQA), heads concatenated; the
    question's query is the mean over its tokens of each query head, heads concatenated; score = plain dot product;
    the top-k blocks, sorted by time."""
    group = H_Q // H_KV
    expanded = pre_rope_keys.repeat_interleave(group, dim=0)  # [H_q, T, D]: query head h meets KV head h // group
    n_blocks = pre_rope_keys.shape[1] // block
    reps = [expanded[:, b * block : (b + 1) * block].mean(dim=1).reshape(-1) for b in range(n_blocks)]
    q_bar = queries.mean(dim=1).reshape(-1)
    scores = [float(q_bar @ rep) for rep in reps]
    return sorted(sorted(range(n_blocks), key=lambda b: -scores[b])[:topk])


def test_rekv_selects_the_upstream_blocks():
    g = torch.Generator().manual_seed(0)
    rekv = build("rekv")
    for trial in range(5):
        block = 12
        keys = torch.randn(H_KV, block * 20, D, generator=g)
        queries = torch.randn(H_Q, 7, D, generator=g)
        rows = rekv.block_keys(keys, block)
        picked = rekv.select(queries, rows, 6).tolist()
        assert picked == rekv_transcription(queries, keys, block, 6), trial


def livevlm_pages_transcription(queries: torch.Tensor, pre_rope_keys: torch.Tensor, page: int, ratio: float):
    """LiveVLM PaR (arXiv 2505.15269 v2, Sec. 3.3): pages of C tokens of the RoPE-stripped long-term keys, page key
    = mean; pooled attention of the question's query with each page key; the top ``ratio`` of the pages, in order."""
    group = H_Q // H_KV
    expanded = pre_rope_keys.repeat_interleave(group, dim=0)
    n_pages = pre_rope_keys.shape[1] // page
    q_bar = queries.mean(dim=1)  # [H_q, D]
    pages = [expanded[:, i * page : (i + 1) * page].mean(dim=1) for i in range(n_pages)]  # [H_q, D] each
    scores = [float(sum(q_bar[h] @ key[h] for h in range(H_Q))) for key in pages]
    n = math.ceil(ratio * n_pages)
    return sorted(sorted(range(n_pages), key=lambda i: -scores[i])[:n])


def test_livevlm_selects_the_paper_pages():
    g = torch.Generator().manual_seed(1)
    live = build("livevlm")
    for trial in range(5):
        keys = torch.randn(H_KV, 16 * 25, D, generator=g)
        queries = torch.randn(H_Q, 5, D, generator=g)
        rows = live.block_keys(keys, live.page_tokens)
        n = live.blocks_to_retrieve(rows.shape[0], 10**6, live.page_tokens)
        assert live.select(queries, rows, n).tolist() == livevlm_pages_transcription(queries, keys, 16, 0.4), trial


def vsb_transcription(scores: list[float], n_keep: int, n_sinks: int, bucket_size: int) -> list[int]:
    """VSB as the paper describes it, token by token: N = M / B position-ordered buckets; phase 1 puts the top-R
    tokens by S into their buckets; phase 2 scans the rest by descending S, keeping a token iff its bucket has room
    (until M tokens are kept)."""
    n = len(scores)
    n_buckets = n_keep // bucket_size
    bucket = [t * n_buckets // n for t in range(n)]
    order = sorted(range(n), key=lambda t: (-scores[t], t))
    kept, load = [], [0] * n_buckets
    for t in order[:n_sinks]:
        kept.append(t)
        load[bucket[t]] += 1
    for t in order[n_sinks:]:
        if len(kept) == n_keep:
            break
        if load[bucket[t]] < bucket_size:
            kept.append(t)
            load[bucket[t]] += 1
    return sorted(kept)


@pytest.mark.parametrize("bucket_size", [1, 3])
def test_vision_sink_buckets_follow_the_paper(bucket_size):
    g = torch.Generator().manual_seed(2)
    for trial in range(20):
        n, n_keep = 50 + trial, 24
        scores = torch.rand(n, generator=g)
        n_sinks = [0, 5, 12, 24][trial % 4]
        got = vsb_keep(scores, n_keep, n_sinks, bucket_size).tolist()
        assert got == vsb_transcription(scores.tolist(), n_keep, n_sinks, bucket_size), trial
        assert len(got) == n_keep


def test_livevlm_scores_with_the_newest_frame_attention():
    """S = MeanPool_r softmax(Q K^T / sqrt D) over the last r vision tokens, each query head on its KV head."""
    g = torch.Generator().manual_seed(3)
    live = build("livevlm", r_frames=1, sink_ratio=1.0)  # all sinks: the top-M tokens by S
    keys, queries = torch.randn(H_KV, 40, D, generator=g), torch.randn(H_Q, 9, D, generator=g)
    group = H_Q // H_KV
    q = queries[:, -4:]  # r = 1 frame of 4 tokens
    attention = torch.softmax(q @ keys.repeat_interleave(group, 0).transpose(1, 2) / math.sqrt(D), dim=-1)
    s = attention.mean(dim=(0, 1))
    expected = sorted(torch.topk(s, 10).indices.tolist())
    assert live.compact(keys, queries, 10, tokens_per_frame=4).tolist() == expected


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("rekv", {"block_frames": 0}, "block_frames=0 must be >= 1"),
        ("rekv", {"positions": "shifted"}, "positions='shifted' is unknown"),
        ("livevlm", {"page_ratio": 0.0}, r"page_ratio=0.0 must be in \(0.0, 1.0\]"),
        ("livevlm", {"page_tokens": 0}, "page_tokens=0 must be >= 1"),
        ("livevlm", {"sink_ratio": 1.5}, r"sink_ratio=1.5 must be in \[0.0, 1.0\]"),
    ],
)
def test_bad_knobs_are_refused_in_one_line(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(name, **kwargs)


RETRIEVAL = sorted(name for name, cls in POLICIES.items() if issubclass(cls, RetrievalParams))


@pytest.mark.parametrize("name", RETRIEVAL)
def test_a_block_the_buffer_cannot_hold_is_refused(name):
    """Every retrieval policy refuses a stream whose buffer |M| - |C| holds no whole block (a question would read
    the window alone: LiveVLM's pages of 16 tokens used to be cut silently), naming the knob that sizes it."""
    policy = build(name)
    block = policy.block_tokens(12)
    policy.check_stream(1, 12, 48 + block, 48)
    with pytest.raises(ValueError, match=rf"retrieval block of {block} tokens exceeds the retrieval buffer") as err:
        policy.check_stream(1, 12, 48 + block - 1, 48)
    knob = type(policy).block_knob
    assert (f"compress.{knob}" in str(err.value)) == (knob is not None)
