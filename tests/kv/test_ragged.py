"""The ragged-row index helpers of the KV stores (:mod:`infinipotv.kv.ragged`), each against the plain per-head
loop it replaces, and the per-head lengths kept on the device and the host together."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.kv.ragged import (
    HeadLengths,
    flat_append_index,
    flat_head_rows,
    flat_rows,
    flat_runs,
    flat_starts,
    flat_take_index,
    gather_rows,
    padding_mask,
    ragged_cat,
    ragged_index,
    run_index,
    take_rows,
)


def test_flat_indices_equal_the_loops_they_replace() -> None:
    """flat_append_index / flat_take_index against the plain per-head loops over lists of rows."""
    la, lb, w = torch.tensor([3, 0, 5]), torch.tensor([2, 4, 0]), 4
    a_rows = [[f"a{h}{j}" for j in range(int(la[h]))] for h in range(3)]
    b_rows = [[f"b{h}{j}" for j in range(w)] for h in range(3)]
    flat_a, flat_b = sum(a_rows, []), sum(b_rows, [])
    index = flat_append_index(la, lb, len(flat_a), w, int((la + lb).sum()))
    want = sum((a_rows[h] + b_rows[h][: int(lb[h])] for h in range(3)), [])
    assert [(flat_a + flat_b)[i] for i in index.tolist()] == want
    rows, first, kept = torch.arange(12).view(3, 4) * 10, torch.tensor([1, 0, 2]), torch.tensor([2, 0, 2])
    got = flat_take_index(rows, kept, 4, first=first).tolist()
    assert got == [r for h in range(3) for r in rows[h, int(first[h]) : int(first[h] + kept[h])].tolist()]
    assert flat_take_index(rows, kept, 4).tolist() == [0, 10, 80, 90]


@pytest.mark.parametrize("shape", [(3, 50, 2), (3, 50, 4), (2, 40, 1), (3, 50, 16), (2, 30, 3, 2), (4, 0, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8], ids=str)
def test_take_rows_equals_advanced_indexing(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """gather_rows copies narrow rows as one integer word each: the same bits as x[heads, idx]."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=gen) * 50).to(dtype)
    h, length = shape[:2]
    idx = torch.randint(0, max(length, 1), (h, 7), generator=gen) if length else torch.zeros(h, 0, dtype=torch.long)
    want = x[torch.arange(h).unsqueeze(1), idx]
    for got in (gather_rows(x, idx), take_rows(x, flat_rows(idx, length))):
        assert got.dtype == dtype and got.shape == want.shape
        assert torch.equal(
            got.view(torch.uint8) if dtype != torch.uint8 else got,
            want.view(torch.uint8) if dtype != torch.uint8 else want,
        )


def test_ragged_cat_puts_each_heads_rows_of_b_after_its_rows_of_a() -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 5, 4, generator=gen), torch.randn(3, 6, 4, generator=gen)
    la, lb = torch.tensor([5, 2, 0]), torch.tensor([1, 6, 3])
    length = int((la + lb).max())
    got = ragged_cat(a, b, ragged_index(la, lb, 5, 6, length))
    assert got.shape == (3, length, 4)
    for h in range(3):
        want = torch.cat([a[h, : int(la[h])], b[h, : int(lb[h])]])
        assert torch.equal(got[h, : len(want)], want)
    assert ragged_cat(a, b, ragged_index(la * 0, lb * 0, 5, 6, 0)).shape == (3, 0, 4)


def test_flat_runs_and_head_rows_equal_the_loops() -> None:
    starts, lengths = torch.tensor([4, 0, 9]), torch.tensor([2, 3, 0])
    assert flat_runs(starts, lengths, 5).tolist() == [4, 5, 0, 1, 2]
    assert flat_starts(torch.tensor([2, 0, 3])).tolist() == [0, 2, 2]
    # heads of 2, 0 and 3 rows in a flat part of 5: each head's first 2 rows, clamped into the part
    assert flat_head_rows(torch.tensor([2, 0, 3]), 2, 5).tolist() == [0, 1, 2, 3, 2, 3]
    assert padding_mask(torch.tensor([1, 3]), 3).tolist() == [[False, True, True], [False, False, False]]


def test_run_index_names_each_rows_run() -> None:
    counts = torch.tensor([[2, 1, 3, 0], [1, 0, 0, 0]])
    got = run_index(counts, 6)
    assert got[0].tolist() == [0, 0, 1, 2, 2, 2]
    assert got[1, :1].tolist() == [0]  # rows past a head's own run into its last group: never read


def test_head_lengths_keep_the_device_and_the_host_together() -> None:
    lengths = HeadLengths.zeros(3)
    assert lengths.total() == 0 and lengths.most() == 0 and lengths.uniform()
    lengths.set(lengths.device + torch.tensor([2, 5, 1]), lengths.host + np.array([2, 5, 1]))
    assert lengths.device.tolist() == lengths.host.tolist() == [2, 5, 1]
    assert lengths.total() == 8 and lengths.most() == 5 and not lengths.uniform()
    device = torch.tensor([4, 4, 4], dtype=torch.int32)
    read = HeadLengths.from_device(device)
    device.add_(1)  # the host copy is a copy, not a view of the device tensor's memory
    assert read.host.tolist() == [4, 4, 4] and read.device.dtype == torch.long and read.uniform()
