"""HostStore.splice and read: a run of offloaded tokens replaced (StreamKV's merged frames, compressed segments) or
tokens inserted (its summaries), across segments, every per-token field and the block rows moved together, and only
the segments from the splice on rewritten."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.host import HostStore, Offloaded


def tokens(first: int, n: int, block: int = 1) -> Offloaded:
    ids = torch.arange(first, first + n)
    keys = ids.float().view(1, n, 1).expand(2, n, 3).clone()
    rows = ids.float().view(-1, block).mean(dim=1, keepdim=True)
    return Offloaded(keys, -keys, ids, ids.view(1, n).expand(3, n).clone(), rows)


def test_splice_replaces_and_inserts_across_segments():
    host = HostStore(torch.device("cpu"))
    host.append(tokens(0, 4))
    host.append(tokens(4, 4))
    host.splice(3, 5, tokens(100, 1))  # tokens 3 and 4 (one in each segment) become one
    assert host.stored("ids").tolist() == [0, 1, 2, 100, 5, 6, 7]
    host.splice(7, 7, tokens(200, 2))  # an insertion at the end
    host.splice(0, 0, tokens(300, 1))  # and at the start
    everything = host.all()
    assert everything.ids.tolist() == [300, 0, 1, 2, 100, 5, 6, 7, 200, 201]
    assert torch.equal(everything.keys[0, :, 0], everything.ids.float())
    assert torch.equal(everything.values, -everything.keys)
    assert torch.equal(everything.positions, everything.ids.view(1, -1).expand(3, -1).to(everything.positions.dtype))
    assert torch.equal(host.block_keys().view(-1), everything.ids.float())  # one row per token (block 1), in step


def test_only_the_segments_from_the_splice_on_are_rewritten_and_block_rows_follow():
    host = HostStore(torch.device("cpu"))
    for first in range(0, 12, 4):
        host.append(tokens(first, 4, block=2))
    untouched = host._segments[0].keys
    host.splice(6, 8, tokens(50, 4, block=2))  # a block of the last segment replaced by two
    assert host._segments[0].keys is untouched
    assert host.stored("ids").tolist() == [0, 1, 2, 3, 4, 5, 50, 51, 52, 53, 8, 9, 10, 11]
    assert host.block_keys().view(-1).tolist() == [0.5, 2.5, 4.5, 50.5, 52.5, 8.5, 10.5]
    assert host.read("ids", 3, 9).tolist() == [3, 4, 5, 50, 51, 52]
    assert sum(host.nbytes().values()) == sum(t.nbytes for s in host._segments for t in s.tensors())
    host.splice(1, 3, tokens(70, 2, block=2))  # off the block grid: the rewritten segments lose their rows
    with pytest.raises(RuntimeError, match="without block keys"):
        host.block_keys()
    with pytest.raises(IndexError, match="past the"):
        host.read("ids", 10, 40)
