"""The compression schedule on its own: when a pass is due, and the byte cap's further passes."""

from __future__ import annotations

import pytest
import torch

from infinipotv.compress import build
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.accounting import Storage, cache_bytes
from infinipotv.stream.schedule import ByteCap, Schedule
from infinipotv.stream.session import StreamingSession

SHAPE = (2, 2, 32)  # layers, KV heads, head_dim


def test_a_pass_is_due_from_budget_tokens_down_to_c():
    s = Schedule.of(48, 0.75)
    assert s.n_keep == 36
    assert s.due(47) is None
    assert s.due(48) == 36
    assert s.due(60) == 36


def test_a_pass_always_evicts_one_token_at_least():
    """|C| is below |M|, but a pass is never asked to keep all the tokens it sees."""
    s = Schedule(budget=3, n_keep=3)
    assert s.due(3) == 2


def test_a_chunk_must_hold_fewer_than_m_minus_c_tokens():
    s = Schedule.of(48, 0.75)
    s.check_chunk(tokens=11, frames=2)
    expected = r"a chunk of 4 frames holds 12 vision tokens, not fewer than \|M\| - \|C\| = 12: lower eval.chunk_frames"
    with pytest.raises(ValueError, match=expected):
        s.check_chunk(tokens=12, frames=4)


def test_byte_cap_is_the_formula_at_m_and_at_c():
    storage = Storage(bits=4, group_size=32, residual_length=8)
    cap = ByteCap.of(48, 0.75, prefix=5, shape=SHAPE, storage=storage)
    assert cap.cap == int(cache_bytes(53, *SHAPE, storage))
    assert cap.after_pass == int(cache_bytes(41, *SHAPE, storage)) < cap.cap


def test_without_a_byte_cap_there_is_no_further_pass():
    assert Schedule.of(48, 0.75).byte_pass(passes=0, held=10**9, video_tokens=47) is None


def test_over_the_cap_with_no_pass_yet_one_pass_to_c():
    s = Schedule.of(48, 0.75, ByteCap(cap=1000, after_pass=750))
    assert s.byte_pass(passes=0, held=1000, video_tokens=40) is None
    assert s.byte_pass(passes=0, held=1001, video_tokens=40) == 36
    assert s.byte_pass(passes=0, held=1001, video_tokens=30) == 29  # never all the tokens held


def test_a_pass_that_left_too_many_bytes_is_followed_by_a_smaller_one():
    """Each further pass keeps fewer tokens in the proportion of the bytes over ``after_pass``, until they fit."""
    s = Schedule.of(48, 0.75, ByteCap(cap=1000, after_pass=750))
    assert s.byte_pass(passes=1, held=750, video_tokens=36) is None
    assert s.byte_pass(passes=1, held=900, video_tokens=36) == 36 * 750 // 900
    assert s.byte_pass(passes=2, held=10**6, video_tokens=36) is None  # no token left to keep: the step ends


def test_the_byte_cap_loop_ends_under_after_pass():
    """The session's loop, driven by a fake cache whose bytes are a fixed overhead plus a cost per token: the passes
    it asks for bring the bytes under ``after_pass`` and stop there."""
    s = Schedule.of(48, 0.75, ByteCap(cap=48 * 10, after_pass=36 * 10))
    tokens, passes, kept = 47, 0, []

    def held() -> int:
        return 100 + 10 * tokens  # a thinned group's overhead the formula does not count

    while (n_keep := s.byte_pass(passes, held(), tokens)) is not None:
        tokens, passes = n_keep, passes + 1
        kept.append(n_keep)
    assert kept[0] == 36 and len(kept) > 1 and kept == sorted(kept, reverse=True)
    assert held() <= s.byte_cap.after_pass


def test_feed_before_start_says_what_to_do(tiny_qwen2vl):
    session = StreamingSession(tiny_qwen2vl, build("tar_van_pool"), 48, 0.75, FullPrecisionStore)
    assert session.trace == []
    with pytest.raises(RuntimeError, match=r"call session.start\(video_id\) before feed\(\)"):
        session.feed(torch.zeros(2, 56, 84, 3, dtype=torch.uint8).numpy(), fps=2.0)


def test_a_policy_that_never_evicts_gets_no_schedule(tiny_qwen2vl):
    assert StreamingSession(tiny_qwen2vl, build("full"), 48, 0.75, FullPrecisionStore).schedule is None
    assert StreamingSession(tiny_qwen2vl, build("tar_van_pool"), None, 0.75, FullPrecisionStore).schedule is None
    assert StreamingSession(tiny_qwen2vl, build("tar_van_pool"), 48, 0.75, FullPrecisionStore).schedule.n_keep == 36


def test_a_per_chunk_schedule_brings_every_chunk_back_to_budget():
    """H7 (StreamMem, StreamingVLM): |M| + chunk -> |M| at every chunk past |M|; a chunk of up to |M| tokens."""
    s = Schedule.per_chunk(48)
    assert s.due(48) is None
    assert s.due(49) == 48
    assert s.due(60) == 48
    s.check_chunk(48, 4)
    with pytest.raises(ValueError, match=r"more than \|M\| = 48: lower eval.chunk_frames"):
        s.check_chunk(49, 4)
    with pytest.raises(ValueError, match="budget=0"):
        Schedule.per_chunk(0)
    capped = Schedule.per_chunk(48, ByteCap(cap=480, after_pass=480))
    assert capped.byte_pass(passes=1, held=600, video_tokens=60) == 48
