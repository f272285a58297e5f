"""The progress bar: counts what the session did, and stays quiet where nobody watches (logs, pipes, Slurm)."""

from __future__ import annotations

import io
import sys

import numpy as np

from infinipotv import compress
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.progress import Progress, interactive
from infinipotv.stream.session import StreamingSession


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_quiet_unless_a_terminal_outside_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not interactive() and Progress(1, 1).bar.disable  # a log file or a pipe
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert interactive() and not Progress(1, 1).bar.disable
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert not interactive()


def test_the_bar_counts_videos_frames_questions_and_passes(tiny_qwen2vl, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    session = StreamingSession(tiny_qwen2vl, compress.build("tar_van_pool"), 24, 0.75, FullPrecisionStore)
    progress = Progress(videos=2, questions=3, enabled=True)
    frames = np.random.default_rng(0).integers(0, 255, size=(16, 56, 56, 3)).astype(np.uint8)
    for video in range(2):
        session.start(f"v{video}")
        progress.start_video()
        for start in range(0, len(frames), 2):
            session.feed(frames[start : start + 2], fps=2.0)
            progress.streamed(session)
        progress.answered()
    passes = sum(s.compress.passes for s in session.trace if s.compress)
    assert passes and progress.passes == 2 * passes and progress.frames == 2 * len(frames)
    assert progress.bar.n == 2 and f"video 2/2, 32 frames, {2 * passes} passes" in terminal.getvalue()
    progress.close()


def test_a_log_gets_one_line_per_video_and_one_at_the_end(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    progress = Progress(videos=2, questions=3, enabled=False)
    progress.start_video()
    progress.answered(2)
    progress.start_video()
    progress.answered()
    progress.close()
    assert log.getvalue().splitlines() == [
        "progress: video 1/2: 0/3 questions answered, 0 frames streamed, 0 passes",
        "progress: video 2/2: 2/3 questions answered, 0 frames streamed, 0 passes",
        "progress: done: 3/3 questions answered, 0 frames streamed, 0 passes",
    ]
