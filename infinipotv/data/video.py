"""Video decoding with PyAV: uniform sampling for offline benchmarks, in-order frames at a fixed rate for streaming.

Both return uint8 RGB arrays ``[N, H, W, 3]`` plus the time stamp (seconds) of each frame, so a streaming benchmark
can feed exactly the frames before a question's time stamp.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np


class VideoError(RuntimeError):
    """A video that cannot be opened or decoded; the job records it per question and goes on."""


@dataclass
class VideoInfo:
    duration_s: float
    fps: float
    n_frames: int


def probe(path: str | Path) -> VideoInfo:
    """Duration, native frame rate and frame count, from the container (decoding only when the header lacks them)."""
    path = Path(path)
    if not path.exists():
        raise VideoError(f"video file not found: {path}")
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
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


def _decode_at(path: Path, wanted: np.ndarray) -> np.ndarray:
    """Decode the frames with the given indices (sorted, may repeat) in one sequential pass."""
    out: list[np.ndarray] = []
    want_iter = iter(wanted.tolist())
    target = next(want_iter, None)
    last = None
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for i, frame in enumerate(container.decode(stream)):
                if target is None:
                    break
                last = frame
                while target is not None and target == i:
                    out.append(frame.to_ndarray(format="rgb24"))
                    target = next(want_iter, None)
    except av.error.FFmpegError as err:
        raise VideoError(f"cannot decode video {path}: {err}") from err
    while target is not None and last is not None:  # header over-reported the frame count: repeat the last frame
        out.append(last.to_ndarray(format="rgb24"))
        target = next(want_iter, None)
    if not out:
        raise VideoError(f"video {path} has no decodable frames")
    return np.stack(out)


def sample_uniform(path: str | Path, n_frames: int) -> tuple[np.ndarray, np.ndarray, VideoInfo]:
    """``n_frames`` frames evenly spread over the whole video (offline benchmarks), with their time stamps."""
    info = probe(path)
    n = min(n_frames, info.n_frames)
    idx = np.linspace(0, info.n_frames - 1, n).round().astype(int)
    return _decode_at(Path(path), idx), idx / info.fps, info


def sample_rate(path: str | Path, fps: float, max_frames: int | None = None) -> tuple[np.ndarray, np.ndarray, VideoInfo]:
    """Frames at ``fps`` in time order (the streaming view), resampled uniformly if more than ``max_frames``."""
    info = probe(path)
    n = max(1, int(info.duration_s * fps))
    if max_frames is not None and n > max_frames:
        n = max_frames
    times = np.arange(n) * (info.duration_s / n)
    idx = np.minimum((times * info.fps).round().astype(int), info.n_frames - 1)
    return _decode_at(Path(path), idx), idx / info.fps, info


def write_video(path: str | Path, frames: np.ndarray | Iterator[np.ndarray], fps: float, lossless: bool = False) -> Path:
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
