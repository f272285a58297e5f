"""RotaryStore (StreamingVLM's shrink, issue 47 item 5): a move adds to the tokens' shifts and never touches a stored
key; read() rotates each key once by its whole shift; with no shift it reads (and commits) the stored tensors
themselves; shifts follow keep() and are counted in the bytes."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.accounting import layout_bytes
from infinipotv.kv.rotary import RotaryStore

HEADS, DIM = 2, 8


def rope(keys: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """A 1-D RoPE move (half-split pairs, theta 10,000) in fp32, in the keys' dtype: the callable a model injects."""
    inv_freq = 1.0 / 10_000 ** (torch.arange(0, DIM, 2, dtype=torch.float32) / DIM)
    angle = (new - old)[0].float()[:, None] * inv_freq  # [N, D/2]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    work = keys.float()
    turned = torch.cat([-work[..., DIM // 2 :], work[..., : DIM // 2]], dim=-1)
    return (work * cos + turned * sin).to(keys.dtype)


def filled(n: int, dtype: torch.dtype = torch.float32) -> tuple[RotaryStore, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    inner = FullPrecisionStore(dtype)
    keys = torch.randn(HEADS, n, DIM, generator=g)
    inner.append(keys[:, :3], torch.randn(HEADS, 3, DIM, generator=g), torch.full((3,), -1))  # a prefix, then wrap
    store = RotaryStore(inner, rope, rows=1)
    store.append(keys[:, 3:], torch.randn(HEADS, n - 3, DIM, generator=g), torch.arange(n - 3))
    return store, keys.to(dtype)


def test_moves_add_up_and_the_stored_keys_are_never_touched() -> None:
    store, keys = filled(10, torch.bfloat16)
    a, b = torch.randint(-50, 0, (1, 10)), torch.randint(-50, 0, (1, 10))
    store.move(a)
    store.move(b)
    assert torch.equal(store.inner.read()[0], keys)  # as appended, bit for bit
    assert torch.equal(store.read()[0], rope(keys, torch.zeros_like(a), a + b))  # one rotation by the whole shift


def test_with_no_shift_it_reads_and_commits_the_stored_tensors_themselves() -> None:
    store, _ = filled(6)
    assert store.read()[0] is store.inner.read()[0]
    k, v = torch.randn(HEADS, 2, DIM), torch.randn(HEADS, 2, DIM)
    out = store.commit(k, v, torch.arange(6, 8))
    assert out[0] is store.inner.read()[0] and len(store) == 8
    store.move(torch.tensor([[0] * 8]))
    assert store.read()[0] is store.inner.read()[0]  # a move by nothing leaves nothing to rotate


def test_after_a_move_a_commit_reads_the_moved_keys_then_its_own() -> None:
    store, _ = filled(6)
    store.move(torch.tensor([[0, 0, 0, -2, -2, -2]]))
    k, v = torch.randn(HEADS, 2, DIM), torch.randn(HEADS, 2, DIM)
    moved = store.read()[0].clone()
    out_k, out_v = store.commit(k, v, torch.arange(6, 8))
    assert torch.equal(out_k, torch.cat([moved, k], 1)) and torch.equal(out_v, store.read()[1])
    assert torch.equal(store.read()[0][:, 6:], k)  # appended with a shift of 0: read as given


def test_keep_takes_the_shifts_along_and_refuses_per_head_sets() -> None:
    store, keys = filled(6)
    store.move(torch.tensor([[0, 0, 0, -1, -2, -3]]))
    store.keep(torch.tensor([0, 1, 2, 5]).expand(HEADS, -1))
    shift = torch.tensor([[0, 0, 0, -3]])
    assert torch.equal(store.read()[0], rope(keys[:, [0, 1, 2, 5]], torch.zeros_like(shift), shift))
    with pytest.raises(ValueError, match="one set of tokens in every head"):
        store.keep(torch.tensor([[0, 1], [0, 2]]))
    with pytest.raises(ValueError, match="move by"):
        store.move(torch.zeros(1, 3, dtype=torch.int32))


@pytest.mark.parametrize("rows", [1, 3])
def test_the_shifts_are_counted_in_the_bytes(rows: int) -> None:
    inner = FullPrecisionStore(torch.float16)
    inner.append(torch.randn(HEADS, 5, DIM), torch.randn(HEADS, 5, DIM), torch.arange(5))
    ids_bytes = inner.nbytes()["positions"]
    store = RotaryStore(inner, rope, rows=rows)
    store.append(torch.randn(HEADS, 2, DIM), torch.randn(HEADS, 2, DIM), torch.arange(5, 7))
    parts = store.nbytes()
    assert parts["positions"] == inner.nbytes()["positions"] + rows * 7 * 4 > ids_bytes
    assert parts == layout_bytes(store.layout(), DIM, store.storage())
