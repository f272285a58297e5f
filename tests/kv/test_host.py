"""The host store (offloaded memory): segments appended in stream order read back as one, a question's take copies
only the picked tokens, keep compacts to one segment; ids read without touching keys and values."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv import host as host_module
from infinipotv.kv.host import HostStore, Offloaded


def _tokens(start: int, n: int, heads: int = 2, dim: int = 4) -> Offloaded:
    ids = torch.arange(start, start + n)
    keys = ids.float().view(1, n, 1).expand(heads, n, dim) + 0.5
    return Offloaded(keys.clone(), -keys.clone(), ids, torch.stack([ids, ids + 100, ids + 200]))


@pytest.fixture
def store() -> HostStore:
    host = HostStore(torch.device("cpu"))
    for start, n in ((0, 3), (3, 5), (8, 2)):  # three chunks offloaded one after the other
        host.append(_tokens(start, n))
    return host


def test_segments_read_back_in_stream_order(store):
    everything = store.all()
    assert len(store) == 10 and everything.ids.tolist() == list(range(10))
    assert torch.equal(store.stored("ids"), everything.ids)
    assert torch.equal(everything.keys[0, :, 0], torch.arange(10).float() + 0.5)
    assert torch.equal(everything.positions[1], torch.arange(10) + 100)


def test_reading_the_ids_concatenates_no_keys_or_values(store, monkeypatch):
    """A question reads the ids of a long stream's store; concatenating its keys and values too cost ReKV time."""
    joined: list[int] = []
    cat = host_module._cat
    monkeypatch.setattr(
        host_module, "_cat", lambda parts, dim: joined.extend(p.dim() for p in parts) or cat(parts, dim)
    )
    assert store.stored("ids").tolist() == list(range(10))
    assert joined == [1, 1, 1]  # the three segments' ids, nothing else


def test_take_and_keep_select_the_same_tokens_across_segments(store):
    index = torch.tensor([1, 2, 3, 7, 9])
    got = store.take(index)
    assert got.ids.tolist() == index.tolist() and torch.equal(got.values[0, :, 0], -(index.float() + 0.5))
    store.keep(index)
    assert store.stored("ids").tolist() == index.tolist() and len(store._segments) == 1
    assert torch.equal(store.all().keys, got.keys)


def test_an_empty_store_says_so():
    with pytest.raises(RuntimeError, match="empty store"):
        HostStore(torch.device("cpu")).stored("ids")
