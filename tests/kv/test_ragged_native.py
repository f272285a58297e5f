"""The KIVI store's row bookkeeping in C (:mod:`infinipotv.kv.ragged_native`) leaves the store holding exactly what
the PyTorch path leaves, every tensor and its padding rows included, through streams whose evictions leave heads
ragged, free whole key groups, evict every quantized token or keep only quantized ones."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from infinipotv.kv import ragged_native
from infinipotv.kv.kivi import KiviStore
from infinipotv.kv.quant import BITS
from infinipotv.kv.ragged import select_rows

pytestmark = pytest.mark.skipif(ragged_native.library() is None, reason="no C compiler for the store's row kernels")


def _held(store: KiviStore) -> dict[str, object]:
    """Every tensor the store holds (padding rows included) and its host lengths."""
    return {
        name: value.clone() if isinstance(value, torch.Tensor) else value.copy()
        for name, value in vars(store).items()
        if name.startswith("_") and name != "_nq"
    } | {"nq": store._nq.device.clone(), "nq_host": store._nq.host.copy()}


def _keep(gen: torch.Generator, store: KiviStore, kind: int) -> torch.Tensor:
    """Sorted per-head indices of one of several eviction patterns."""
    h, t = store.token_ids().shape
    nq = store.n_quantized
    if kind == 0:  # a random two thirds per head: ragged heads, survivors scattered over groups
        return torch.rand(h, t, generator=gen).argsort(1)[:, : 2 * t // 3].sort(1).values
    if kind == 1:  # whole groups freed: every token of the first half of each head's quantized part goes
        n = t - int(nq.max()) // 2
        return torch.stack([torch.arange(t - n, t) for _ in range(h)])
    if kind == 2:  # every quantized token evicted where a head has fewer than the others
        return torch.arange(min(int(nq.min()), t - 1), t).expand(h, -1)
    return torch.arange(min(t, int(nq.min()) or t)).expand(h, -1)  # only quantized tokens kept


def _stream(bits: int, seed: int, rows_path: str) -> list[dict[str, object]]:
    gen = torch.Generator().manual_seed(seed)
    store = KiviStore(bits, group_size=8, residual_length=5, dtype=torch.float16)
    states = []
    with ragged_native.torch_path() if rows_path == "torch" else nullcontext():
        next_id = 0
        for step in range(14):
            n = int(torch.randint(1, 40, (1,), generator=gen))
            store.append(
                torch.randn(3, n, 16, generator=gen),
                torch.randn(3, n, 16, generator=gen),
                torch.arange(next_id, next_id + n),
            )
            next_id += n
            if step % 2:
                store.keep(_keep(gen, store, (step // 2) % 4))
            states.append(_held(store) | {"read": store.read(), "nbytes": store.nbytes()})
    return states


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return bool((a == b).all()) if hasattr(a, "all") else a == b


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("seed", range(3))
def test_the_store_holds_the_same_tensors_with_either_path(bits: int, seed: int) -> None:
    ours, ref = _stream(bits, seed, "native"), _stream(bits, seed, "torch")
    assert any(len(set(s["nq_host"].tolist())) > 1 for s in ours)  # heads really ragged at some step
    for step, (got, want) in enumerate(zip(ours, ref)):
        assert got.keys() == want.keys()
        for name in got:
            assert _same(got[name], want[name]), (step, name)


@pytest.mark.parametrize("rows_path", ["native", "torch"])
@pytest.mark.parametrize(
    ("indices", "match"),
    [
        ([[2, 1], [0, 1]], "strictly increasing"),
        ([[0, 9], [0, 1]], r"\[0, 4\)"),
        ([[-1, 1], [0, 1]], r"\[0, 4\)"),
        ([[1, 1], [0, 1]], "strictly increasing"),
    ],
)
def test_bad_indices_get_the_same_message_either_way(rows_path: str, indices: list[list[int]], match: str) -> None:
    store = KiviStore(4, group_size=8)
    store.append(torch.randn(2, 4, 16), torch.randn(2, 4, 16), torch.arange(4))
    before = _held(store)
    with ragged_native.torch_path() if rows_path == "torch" else nullcontext():
        with pytest.raises(ValueError, match=match):
            store.keep(torch.tensor(indices))
    assert all(_same(before[name], value) for name, value in _held(store).items())  # nothing changed


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ragged_native.ENV, "0")
    ragged_native.library.cache_clear()
    try:
        assert ragged_native.library() is None and not ragged_native.applies(torch.device("cpu"))
    finally:
        monkeypatch.undo()
        ragged_native.library.cache_clear()
    assert ragged_native.applies(torch.device("cpu")) and not ragged_native.applies(torch.device("meta"))


@pytest.mark.parametrize(
    ("dtype", "width"),
    [(torch.float16, 64), (torch.bfloat16, 128), (torch.float32, 32), (torch.uint8, 144), (torch.uint8, 128)],
    ids=str,
)
def test_select_rows_is_index_select(dtype: torch.dtype, width: int) -> None:
    """The row gather of every store's keep() gives index_select's bytes (NaN payloads and signed zeros included),
    for rows of 128 bytes or more, a multiple of 16; an index outside the rows gets index_select's own error."""
    gen = torch.Generator().manual_seed(width)
    rows = torch.randint(0, 256, (301, width * dtype.itemsize), dtype=torch.uint8, generator=gen).view(dtype)
    some = torch.tensor([0, 3])
    assert ragged_native.takes_rows(rows, some) and ragged_native.takes_rows(rows, some.int())
    for index in (
        torch.randperm(301, generator=gen)[:200].sort().values,
        torch.tensor([300, 0, 0, 7]),
        torch.zeros(0, dtype=torch.long),
    ):
        got = select_rows(rows, index)
        assert got.dtype == dtype and torch.equal(got.view(torch.uint8), rows.index_select(0, index).view(torch.uint8))
    with pytest.raises(IndexError):
        select_rows(rows, torch.tensor([0, 301]))
    with ragged_native.torch_path():
        assert not ragged_native.takes_rows(rows, some)
    assert not ragged_native.takes_rows(rows[:, :-1], some) and not ragged_native.takes_rows(rows[::2], some)
    assert not ragged_native.takes_rows(torch.zeros(5, 3, dtype=torch.float16), some)  # 6 bytes
    assert not ragged_native.takes_rows(torch.zeros(5, 32, dtype=torch.uint8), some)  # narrower than MIN_ROW_BYTES
    assert not ragged_native.takes_rows(rows, some.float()) and not ragged_native.takes_rows(rows, some[None])
    with pytest.raises(RuntimeError, match="int32 or int64"):  # index_select's own error, as without the kernel
        select_rows(rows, some.float())
