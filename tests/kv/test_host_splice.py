"""HostStore.splice: a run of offloaded tokens replaced (StreamKV's merged frames) or tokens inserted (its segment
summaries), across segments, every per-token field moved together."""

from __future__ import annotations

import torch

from infinipotv.kv.host import HostStore, Offloaded


def tokens(first: int, n: int) -> Offloaded:
    ids = torch.arange(first, first + n)
    keys = ids.float().view(1, n, 1).expand(2, n, 3).clone()
    return Offloaded(keys, -keys, ids, ids.view(1, n).expand(3, n).clone())


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
    assert everything.ids.dtype == host.stored("positions").dtype  # ids stored as the store's position dtype
