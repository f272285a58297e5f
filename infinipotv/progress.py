"""A job's progress on the terminal: questions answered (the bar), videos, frames streamed and compression passes.

A first run otherwise shows nothing for minutes after the weights load. The bar goes to stderr, so the summary on
stdout is unchanged, and it stays quiet where nobody watches: when stderr is not a terminal (a log file, a pipe, CI)
and under Slurm (whose job output is a file even when a terminal launched it). There, each video that starts
streaming gets one plain line instead, and the end one more, so a job's log shows how far it got.
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm

from infinipotv.stream.session import StreamingSession


def interactive() -> bool:
    """Whether someone watches stderr: a terminal, and not a Slurm job."""
    return sys.stderr.isatty() and "SLURM_JOB_ID" not in os.environ


class Progress:
    """``questions`` answered out of those to do, with the videos started, frames streamed and passes made."""

    def __init__(self, videos: int, questions: int, enabled: bool | None = None) -> None:
        self.videos, self.video = videos, 0
        self.frames = self.passes = 0
        self._frames_before = self._steps = 0
        self.questions, self.done = questions, 0
        self.bar = tqdm(
            total=questions,
            desc="questions",
            unit="q",
            dynamic_ncols=True,
            disable=not (interactive() if enabled is None else enabled),
        )

    def start_video(self) -> None:
        """A video starts streaming (its session's trace starts anew)."""
        self.video += 1
        self._frames_before, self._steps = self.frames, 0
        self._show()
        self._log(f"video {self.video}/{self.videos}")

    def streamed(self, session: StreamingSession) -> None:
        """Frames fed and passes made since the last call, read from the session's count and trace."""
        steps = session.trace[self._steps :]
        self._steps = len(session.trace)
        self.passes += sum(s.compress.passes for s in steps if s.compress)
        self.frames = self._frames_before + session.video.frames_seen
        self._show()

    def answered(self, n: int = 1) -> None:
        self.done += n
        self.bar.update(n)

    def _show(self) -> None:
        self.bar.set_postfix_str(
            f"video {self.video}/{self.videos}, {self.frames} frames, {self.passes} passes", refresh=True
        )

    def _log(self, what: str) -> None:
        """One line in a log where the bar is off."""
        if self.bar.disable:
            print(
                f"progress: {what}: {self.done}/{self.questions} questions answered, {self.frames} frames streamed, "
                f"{self.passes} passes",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        self.bar.close()
        if self.video:
            self._log("done")
