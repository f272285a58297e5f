"""OQM's codes, group keys, retrieved groups and bytes against a transcription of upstream
(YIGE24/StreamingTOM@6c66b05: ``oqm.py`` ``_quantize_tensor``/``_dequantize_tensor``/``get_selective_kv``,
``attention_processor.py`` ``_encode_mode``/``_retrieve_mode``/``_select_top_k_groups``), on random tensors."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.oqm import OQMStore, group_bytes, query_repr, top_groups


def _upstream_quantize(tensor, group_size, bits):
    """``_quantize_tensor`` on [B, H, S, D] (unpacked codes; scale clamp as upstream, float32)."""
    b, h, s, d = tensor.shape
    levels = 2**bits - 1
    x = tensor.permute(0, 1, 3, 2).reshape(b * h * d, s // group_size, group_size)
    mins, maxs = x.min(-1)[0], x.max(-1)[0]
    scales = torch.clamp((maxs - mins) / levels, min=1e-8)
    q = ((x - mins[..., None]) / scales[..., None]).clamp(0, levels).round_().to(torch.uint8)
    deq = (q.float() * scales[..., None] + mins[..., None]).reshape(b, h, d, s).permute(0, 1, 3, 2)
    return q.reshape(b, h, d, s).permute(0, 1, 3, 2), deq


def _upstream_top_groups(query_repr_, group_keys, budget, group_size):
    n = group_keys.shape[0]
    wanted = (budget + group_size - 1) // group_size
    if wanted >= n:
        return torch.arange(n)
    sims = torch.nn.functional.normalize(group_keys, p=2, dim=1) @ torch.nn.functional.normalize(query_repr_, dim=0)
    return torch.sort(torch.topk(sims, k=min(wanted, n), sorted=False)[1])[0]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_codes_and_reads_equal_upstreams(bits):
    g = torch.Generator().manual_seed(bits)
    h, d, size, prefix, chunks = 2, 8, 5, 3, 3
    store = OQMStore(bits=bits, group_size=size, dtype=torch.float32)
    k0, v0 = torch.randn(h, prefix, d, generator=g), torch.randn(h, prefix, d, generator=g)
    store.append(k0, v0, torch.full((prefix,), -1), None)
    keys, values, pre = [], [], []
    for c in range(chunks):
        n = size * (c + 1)
        k, v, kp = (torch.randn(h, n, d, generator=g) for _ in range(3))
        k[:, :size, 0] = 0.25  # a constant channel in a group: code 0, read back exactly
        store.append(k, v, torch.arange(100 * c, 100 * c + n), kp)
        keys.append(k), values.append(v), pre.append(kp)
    keys, values, pre = torch.cat(keys, 1), torch.cat(values, 1), torch.cat(pre, 1)
    codes, deq_k = _upstream_quantize(keys[None], size, bits)
    _, deq_v = _upstream_quantize(values[None], size, bits)
    read_k, read_v = store.read_groups()
    torch.testing.assert_close(read_k, torch.cat([k0, deq_k[0]], 1))
    torch.testing.assert_close(read_v, torch.cat([v0, deq_v[0]], 1))
    # group keys: the mean of each group's pre-RoPE keys, heads concatenated ([S, H * D] as _encode_mode makes it)
    token_keys = pre.transpose(0, 1).reshape(-1, h * d)
    torch.testing.assert_close(store.group_keys(), token_keys.reshape(-1, size, h * d).mean(1))
    # retrieval: a question's queries, GQA-averaged, token-averaged; the top groups by cosine, sorted
    queries = torch.randn(2 * h, 4, d, generator=g)
    q = queries[None].reshape(1, h, 2, 4, d).mean(2)[0].mean(1).reshape(-1)
    torch.testing.assert_close(query_repr(queries, h), q)
    for budget in (1, size * 2, size * 2 + 1, 10**6):
        chosen = top_groups(q, store.group_keys(), budget, size)
        assert chosen.tolist() == _upstream_top_groups(q, store.group_keys(), budget, size).tolist()
        k_sel, _ = store.read_groups(chosen)
        idx = torch.cat([torch.arange(prefix), (prefix + chosen[:, None] * size + torch.arange(size)).flatten()])
        torch.testing.assert_close(k_sel, read_k[:, idx])
        assert store.group_ids(chosen).tolist() == store.token_ids()[idx].tolist()
    for last in (1, 2, 4, 6):  # a window at the end, starting inside an append or at its edge
        tail = torch.arange(store.n_groups - last, store.n_groups)
        idx = torch.cat(
            [torch.arange(prefix), prefix + torch.arange((store.n_groups - last) * size, store.n_groups * size)]
        )
        torch.testing.assert_close(store.read_groups(tail)[1], read_v[:, idx])


def test_bytes_are_counted_part_by_part_and_follow_the_formula():
    h, d, size = 3, 16, 10
    store = OQMStore(bits=4, group_size=size, dtype=torch.float16)
    store.append(torch.randn(h, 4, d), torch.randn(h, 4, d), torch.full((4,), -1), None)
    before = sum(store.nbytes().values())
    assert store.nbytes()["prefix"] == 2 * h * 4 * d * 2
    for n_groups in (1, 3):
        x = torch.randn(h, n_groups * size, d)
        store.append(x, x, torch.arange(n_groups * size), x)
    grown = sum(store.nbytes().values()) - before
    assert grown == 4 * group_bytes(h, d, size, 4, 2)
    assert store.nbytes()["codes"] == 4 * size * h * d  # 2 x (G x H x D x 4 bits) per group


def test_bad_appends_are_refused():
    store = OQMStore(bits=4, group_size=4, dtype=torch.float32)
    store.append(torch.randn(1, 2, 8), torch.randn(1, 2, 8), torch.full((2,), -1), None)
    with pytest.raises(ValueError, match="whole groups of 4"):
        store.append(torch.randn(1, 6, 8), torch.randn(1, 6, 8), torch.arange(6), torch.randn(1, 6, 8))
    with pytest.raises(ValueError, match="before RoPE"):
        store.append(torch.randn(1, 4, 8), torch.randn(1, 4, 8), torch.arange(4), None)
