"""KIVI codes grouped to fit retrieval (infinipotv/kv/coded.py), on planted tensors: KIVI's own codes where blocks
are whole groups, KIVI's error bound where they are not, and a host offload's bytes within 5% of KIVI's formula."""

from __future__ import annotations

import pytest
import torch

from infinipotv.kv.accounting import Storage, full_groups, layout_bytes
from infinipotv.kv.coded import Coding, code_keys, code_values, full
from infinipotv.kv.host import HostStore, Offloaded
from infinipotv.kv.quant import dequantize, quantize

CODING = Coding(bits=4, group_size=32, dtype=torch.float16)


def planted(heads: int, tokens: int, dim: int, seed: int = 0) -> torch.Tensor:
    """Keys with a planted outlier channel (KIVI's reason to group keys per channel) and a drift over tokens."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(heads, tokens, dim, generator=g)
    x[:, :, 3] *= 20  # an outlier channel
    x += torch.linspace(0, 4, tokens).view(1, -1, 1)  # slow drift: groups over fewer tokens span less
    return x.half()


def test_blocks_of_whole_groups_give_kivis_own_codes_bit_for_bit() -> None:
    keys, values = planted(2, 128, 64), planted(2, 128, 64, seed=1)
    coded_k, coded_v = code_keys(keys, 64, CODING), code_values(values, CODING)
    kivi_k, kivi_v = quantize(keys, 4, 32, "key"), quantize(values, 4, 32, "value")
    assert torch.equal(coded_k.codes, kivi_k.codes) and torch.equal(coded_k.scale, kivi_k.scale)
    assert torch.equal(full(coded_k), dequantize(kivi_k)) and torch.equal(full(coded_v), dequantize(kivi_v))


@pytest.mark.parametrize("block", [12, 50, 200])
def test_block_groups_hold_kivis_error_bound_and_never_straddle_a_block(block: int) -> None:
    """Each element within half its group's scale (KIVI's bound, groups of at most G tokens); a block taken alone
    dequantizes to what it was in the whole run (its rows are its own); the error beside KIVI's stream grouping."""
    n = 4 * block + block // 2  # four whole blocks and a partial last one
    keys = planted(2, n, 64)
    coded = code_keys(keys, block, CODING)
    got = full(coded).float()
    scale = coded.scale.index_select(1, coded.group.long()).float()
    assert ((got - keys.float()).abs() <= scale / 2 + 1e-2 * keys.float().abs().amax()).all()
    second = torch.arange(block, 2 * block)
    assert torch.equal(full(coded.index_select(1, second)), full(coded)[:, second])
    assert coded.index_select(1, second).scale.shape[1] == -(-block // 32)  # exactly its own rows
    whole = n // 32 * 32
    kivi = dequantize(quantize(keys[:, :whole], 4, 32, "key")).float()
    ours = (got[:, :whole] - keys[:, :whole].float()).abs().mean()
    theirs = (kivi - keys[:, :whole].float()).abs().mean()
    assert ours <= 1.1 * theirs  # groups of at most G tokens: no worse than KIVI's, on average


def test_host_offload_bytes_in_int4_are_within_five_percent_of_kivis_formula() -> None:
    """Qwen2-VL-7B's layer shape (4 KV heads of 128) and ~200-token frames, offloaded a frame at a time: keys and
    values (codes, scales, zeros, the key rows' index) against KIVI's formula for the same tokens (full key groups,
    no residual: the host holds no full-precision window), positions counted apart as both count them."""
    heads, dim, frame, frames = 4, 128, 200, 30
    host = HostStore(torch.device("cpu"), coding=CODING)
    for f in range(frames):
        keys, values = planted(heads, frame, dim, seed=f), planted(heads, frame, dim, seed=100 + f)
        host.append(Offloaded(keys, values, torch.arange(frame), torch.zeros(1, frame, dtype=torch.long)), frame)
    parts = host.nbytes()
    measured = sum(v for k, v in parts.items() if k not in ("positions", "block_keys"))
    storage = Storage(4, 32, 0, 2, 0)
    formula = sum(layout_bytes(full_groups(frames * frame, heads, storage), dim, storage).values())
    assert abs(measured / formula - 1) < 0.05, (measured, formula)
    assert torch.equal(host.read("keys", 200, 400), full(code_keys(planted(heads, frame, dim, seed=1), frame, CODING)))
