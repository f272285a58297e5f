"""Video decoding with PyAV: uniform sampling for offline benchmarks, in-order frames at a fixed rate for streaming.

A :class:`FramePlan` says which frames a stream reads and their time stamps (seconds) from the container's metadata
alone, so a streaming benchmark can place its questions before anything is decoded; :func:`decode_planned` then
yields those frames one by one in a single sequential pass (never the whole video in memory).
:mod:`infinipotv.data.frames` reads them chunk by chunk in the background.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

_KINDS = {
    stat.S_IFIFO: "FIFO (named pipe)",
    stat.S_IFDIR: "folder",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFSOCK: "socket",
}


class VideoError(RuntimeError):
    """A video that cannot be opened or decoded; the job records it per question and goes on."""


@dataclass
class VideoInfo:
    duration_s: float
    fps: float
    n_frames: int


def _video_stream(container: av.container.InputContainer, path: Path) -> av.video.stream.VideoStream:
    """The container's first video stream; a file with none (audio only) is a :class:`VideoError` saying so."""
    if not container.streams.video:
        kinds = ", ".join(sorted({s.type for s in container.streams})) or "no streams"
        raise VideoError(f"video {path} has no video stream ({kinds})")
    return container.streams.video[0]


def check_video_file(path: Path) -> None:
    """A :class:`VideoError` unless ``path`` is a regular file (a symlink to one counts): a FIFO would block the
    decoder for ever waiting for a writer, and a device or a folder is no video. The dataset doctor asks here too,
    so it says what the run says."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise VideoError(f"video file not found: {path}") from None
    except OSError as err:
        raise VideoError(f"cannot read video {path}: {err.strerror or err}") from None
    if not stat.S_ISREG(mode):
        raise VideoError(
            f"video {path} is a {_KINDS.get(stat.S_IFMT(mode), 'special file')}, not a regular file: only regular "
            f"files are decoded; put the video file itself there"
        )


def probe(path: str | Path) -> VideoInfo:
    """Duration, native frame rate and frame count, from the container (decoding only when the header lacks them)."""
    path = Path(path)
    check_video_file(path)
    try:
        with av.open(str(path)) as container:
            stream = _video_stream(container, path)
            fps = float(stream.average_rate or stream.guessed_rate or 0) or 1.0
            n = stream.frames
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / 1_000_000
            else:
                duration = 0.0
            if not n:
                n = sum(1 for _ in container.decode(stream))
            if not duration:
                duration = n / fps
    except (av.error.FFmpegError, IndexError, ValueError) as err:
        raise VideoError(f"cannot read video {path}: {err}") from err
    return VideoInfo(duration_s=duration, fps=fps, n_frames=n)


@dataclass(frozen=True)
class FramePlan:
    """Which native frames a stream reads and when, known from the container's metadata before any decoding.

    ``indices`` are native frame indices (sorted, may repeat) and ``times`` their time stamps (seconds), so
    questions can be placed before decoding starts.
    """

    path: Path
    indices: np.ndarray
    times: np.ndarray
    info: VideoInfo

    def __len__(self) -> int:
        return len(self.indices)

    @classmethod
    def _of(cls, path: str | Path, info: VideoInfo, idx: np.ndarray) -> "FramePlan":
        return cls(path=Path(path), indices=idx, times=idx / info.fps, info=info)

    @classmethod
    def uniform(cls, path: str | Path, n_frames: int) -> "FramePlan":
        """``n_frames`` frames evenly spread over the whole video (offline benchmarks)."""
        info = probe(path)
        n = min(n_frames, info.n_frames)
        return cls._of(path, info, np.linspace(0, info.n_frames - 1, n).round().astype(int))

    @classmethod
    def rate(cls, path: str | Path, fps: float, max_frames: int | None = None) -> "FramePlan":
        """Frames at ``fps`` in time order (the streaming view), resampled uniformly if more than ``max_frames``."""
        info = probe(path)
        n = max(1, int(info.duration_s * fps))
        if max_frames is not None and n > max_frames:
            n = max_frames
        times = np.arange(n) * (info.duration_s / n)
        return cls._of(path, info, np.minimum((times * info.fps).round().astype(int), info.n_frames - 1))


def decode_planned(plan: FramePlan) -> Iterator[np.ndarray]:
    """The plan's frames as uint8 RGB ``[H, W, 3]``, one by one, in one sequential pass over the file.

    A header that over-reported the frame count gets its missing frames as repeats of the last decoded one.
    """
    check_video_file(plan.path)  # it may have been replaced since it was probed
    want = iter(plan.indices.tolist())
    target = next(want, None)
    last = None
    try:
        with av.open(str(plan.path)) as container:
            stream = _video_stream(container, plan.path)
            stream.thread_type = "AUTO"
            for i, frame in enumerate(container.decode(stream)):
                if target is None:
                    break
                last = frame
                if target == i:
                    rgb = frame.to_ndarray(format="rgb24")
                while target is not None and target == i:
                    yield rgb
                    target = next(want, None)
    except av.error.FFmpegError as err:
        raise VideoError(f"cannot decode video {plan.path}: {err}") from err
    if target is not None and last is None:
        raise VideoError(f"video {plan.path} has no decodable frames")
    if target is not None:
        rgb = last.to_ndarray(format="rgb24")
    while target is not None:
        yield rgb
        target = next(want, None)


def write_video(
    path: str | Path, frames: np.ndarray | Iterator[np.ndarray], fps: float, lossless: bool = False
) -> Path:
    """Write uint8 RGB frames to an mp4 (H.264; ``lossless`` uses qp=0 in 4:4:4 so synthetic pixels survive)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = iter(frames)
    first = next(frames)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=round(fps))
        stream.height, stream.width = first.shape[:2]
        if lossless:
            stream.pix_fmt = "yuv444p"
            stream.options = {"qp": "0", "preset": "ultrafast"}
        else:
            stream.pix_fmt = "yuv420p"
            stream.options = {"crf": "18", "preset": "ultrafast"}
        for frame in [first, *frames]:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
