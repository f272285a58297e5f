"""The frame source: the same frames and time stamps as decoding the whole file, read chunk by chunk in the
background with bounded look-ahead, re-readable tails, and decoding errors raised by the read that needs them."""

from __future__ import annotations

import time

import av
import numpy as np
import pytest

from infinipotv.data.frames import FrameSource, SourcesAhead
from infinipotv.data.video import FramePlan, VideoError, write_video

FPS, N = 10, 45  # a 4.5 s video


@pytest.fixture(scope="session")
def counting_video(tmp_path_factory):
    """Lossless frames whose pixels carry their own index (frame i is filled with i * 5)."""
    frames = (np.arange(N, dtype=np.uint8) * 5)[:, None, None, None] * np.ones((1, 32, 48, 3), np.uint8)
    return write_video(tmp_path_factory.mktemp("frames") / "count.mp4", frames, FPS, lossless=True)


def every_frame(path) -> np.ndarray:
    """The whole file decoded at once, the obvious way."""
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])])


@pytest.mark.parametrize(
    "plan_of",
    [
        lambda p: FramePlan.rate(p, fps=2.0),  # the streaming view: every 5th frame
        lambda p: FramePlan.rate(p, fps=4.0, max_frames=7),  # a rate capped: resampled uniformly
        lambda p: FramePlan.uniform(p, 8),  # a fixed count over the whole video
        lambda p: FramePlan.uniform(p, 100),  # more than the video has: every frame once
    ],
)
@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_chunked_background_reads_give_the_frames_of_a_whole_decode(counting_video, plan_of, chunk):
    plan = plan_of(counting_video)
    assert np.array_equal(plan.times, plan.indices / FPS)
    expected = every_frame(counting_video)[plan.indices]
    with FrameSource(plan, 2.0, chunk) as source:
        got = [source.read(start, start + chunk) for start in range(0, len(source), chunk)]
    assert np.array_equal(np.concatenate(got), expected)


def test_the_plans_pick_the_frames_of_their_rule(counting_video):
    assert np.array_equal(FramePlan.rate(counting_video, fps=2.0).indices, np.arange(0, N - 1, FPS // 2))
    capped = FramePlan.rate(counting_video, fps=4.0, max_frames=7).indices
    assert len(capped) == 7 and capped[0] == 0 and np.all(np.diff(capped) > 0)
    uniform = FramePlan.uniform(counting_video, 8).indices
    assert len(uniform) == 8 and uniform[0] == 0 and uniform[-1] == N - 1


def test_a_tail_read_for_a_question_is_read_again_as_part_of_the_next_chunk(counting_video):
    plan = FramePlan.uniform(counting_video, N)
    expected = every_frame(counting_video)
    with FrameSource(plan, FPS, chunk=4) as source:
        assert np.array_equal(source.read(0, 4), expected[0:4])
        assert np.array_equal(source.read(4, 6), expected[4:6])  # a question at frame 6: the transient tail
        assert np.array_equal(source.read(4, 8), expected[4:8])  # then the whole chunk it belongs to
        assert np.array_equal(source.read(8, 30), expected[8:30])  # a range over several chunks
        with pytest.raises(ValueError, match="increasing order"):
            source.read(7, 12)
        assert np.array_equal(source.read(40, 99), expected[40:])  # clipped to the plan


def test_the_decoder_runs_at_most_a_few_chunks_ahead_of_the_reads(counting_video):
    plan = FramePlan.uniform(counting_video, N)
    with FrameSource(plan, FPS, chunk=2, depth=2) as source:
        time.sleep(0.5)
        assert source.frames_decoded <= (2 + 1) * 2  # the queue's chunks and the one waiting to enter it
        source.read(0, 2)
        assert source.read(2, 4).shape[0] == 2


def test_frames_are_resized_as_they_are_decoded(counting_video):
    plan = FramePlan.rate(counting_video, fps=2.0)
    with FrameSource(plan, 2.0, chunk=3, resize=lambda f: f[:, ::2, ::2]) as source:
        assert source.read(0, 3).shape == (3, 16, 24, 3)


def test_a_background_decoding_error_is_raised_by_the_read_that_needs_it(counting_video, tmp_path):
    gone = tmp_path / "gone.mp4"
    gone.write_bytes(counting_video.read_bytes())
    plan = FramePlan.rate(gone, fps=2.0)  # planned from the metadata, then the file disappears
    gone.unlink()
    with FrameSource(plan, 2.0, chunk=2) as source, pytest.raises(VideoError, match="gone.mp4"):
        source.read(0, 2)

    def broken(frames: np.ndarray) -> np.ndarray:
        if frames[0, 0, 0, 0] > 0:
            raise VideoError("second chunk is bad")
        return frames

    with FrameSource(FramePlan.uniform(counting_video, N), FPS, chunk=1, resize=broken) as source:
        source.read(0, 1)
        with pytest.raises(VideoError, match="second chunk"):
            source.read(1, 2)
        with pytest.raises(VideoError, match="second chunk"):  # and on every read after it
            source.read(1, 2)


def test_the_next_video_is_opened_ahead_and_its_error_is_its_own(counting_video, tmp_path):
    opened: list[str] = []

    def opener(name: str) -> FrameSource:
        opened.append(name)
        if name == "missing":
            raise VideoError("video file not found: missing.mp4")
        return FrameSource(FramePlan.rate(counting_video, fps=2.0), 2.0, chunk=2)

    with SourcesAhead(opener) as ahead:
        with ahead.open("a", "missing") as first:
            assert opened == ["a", "missing"] and len(first.read(0, 2)) == 2
        with pytest.raises(VideoError, match="missing.mp4"):
            ahead.open("missing", "b")
        assert opened == ["a", "missing", "b"]  # the one after a failed video is still opened ahead
        with ahead.open("b", None) as third:
            assert len(third.read(0, 9)) == 9 and opened == ["a", "missing", "b"]
