"""Each video is decoded and encoded once per run, however many questions it has, streaming and offline.

    python -m bench.encode_counts            # about a minute: the symbolic model through the real job
    python -m bench.encode_counts --smoke    # the tiny Qwen2-VL on tiny videos, for the tests

The job (:func:`infinipotv.job.run_job`) runs on the symbolic benchmark as released (questions asked at their time
stamps while the video plays, the rest after it) and on an offline variant of it (every question after the whole
video), then once more on each finished run directory (a resume with nothing left to do). Counters wrapped around the
frame source and the vision encoder record, per video, how often it was decoded, how many encoder calls ran and how many
raw frames they encoded; a video is "encoded once" when no raw frame went through the encoder twice.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir

from bench.common import CONF, parse, parser, write_result
from infinipotv import job
from infinipotv.config import register_configs
from infinipotv.data import register
from infinipotv.data.symbolic import Symbolic
from infinipotv.factory import as_run_config, validate
from infinipotv.models import ADAPTERS
from infinipotv.stream.session import StreamingSession


@register
class SymbolicOffline(Symbolic):
    """The symbolic benchmark with every question asked after the whole video (an offline benchmark's protocol)."""

    name = "symbolic_offline"
    streaming = False


@contextmanager
def counted(owner: Any, name: str, record: Callable[..., None]) -> Iterator[None]:
    """Wrap ``owner.name`` so that every call is first passed to ``record``; restored on exit."""
    original, own = getattr(owner, name), name in vars(owner)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        record(result, *args, **kwargs)
        return result

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def run_counted(overrides: list[str], run_dir: Path) -> dict[str, Any]:
    """One job; per video: decodes, decoded raw frames, encoder calls and encoded raw frames. A video is encoded
    once when it was decoded at most once and no raw frame went through the encoder twice (the encoded frames are at
    most the decoded ones, completed to a whole model frame)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = as_run_config(compose("config", overrides=overrides))
    validate(cfg)
    counts: dict[str, dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(("decodes", "frames_decoded", "encode_calls", "frames_encoded"), 0)
    )
    current: list[str] = []

    sources: list[tuple[str, Any]] = []

    def decoded(source: Any, sample: Any, *args: Any) -> None:
        counts[sample.video_id]["decodes"] += 1
        sources.append((sample.video_id, source))

    def encoded(result: Any, adapter: Any, frames: Any, *args: Any) -> None:
        counts[current[-1]]["encode_calls"] += 1
        counts[current[-1]]["frames_encoded"] += len(frames)

    with ExitStack() as stack:
        stack.enter_context(counted(job, "sample_frames", decoded))
        stack.enter_context(counted(ADAPTERS[cfg.model.family], "encode_frames", encoded))
        stack.enter_context(counted(StreamingSession, "start", lambda _r, _s, video_id: current.append(video_id)))
        metrics = job.run_job(cfg, run_dir)
    for video, source in sources:  # what each source's background decoder produced, once the job is done
        counts[video]["frames_decoded"] += source.frames_decoded
    questions = defaultdict(int)
    for record in job.read_predictions(run_dir / job.PREDICTIONS):
        questions[record["video_id"]] += 1
    step = ADAPTERS[cfg.model.family].frames_per_step
    videos = {
        video: {
            **c,
            "questions": questions[video],
            "encoded_once": c["decodes"] <= 1 and c["frames_encoded"] <= -(-c["frames_decoded"] // step) * step,
        }
        for video, c in counts.items()
    }
    return {
        "videos": videos,
        "questions": metrics["n_questions"],
        "compress_passes": metrics["time"]["compress_passes"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    register_configs()
    model, frames = ("tiny_qwen2vl", 64) if args.smoke else ("symbolic", 128)
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for bench_name in ("symbolic", "symbolic_offline"):
            overrides = [
                f"model={model}",
                "benchmark=symbolic",
                f"benchmark.name={bench_name}",
                f"benchmark.root={tmp}/data",
                "benchmark.options.n_videos=2",
                f"benchmark.options.frames={frames}",
            ]
            run_dir = Path(tmp) / bench_name
            cases[bench_name] = run_counted(overrides, run_dir)
            cases[f"{bench_name} (resumed, complete)"] = run_counted(overrides, run_dir)
    data = {
        "model": model,
        "frames_per_video": frames,
        "cases": cases,
        "all_encoded_once": all(v["encoded_once"] for c in cases.values() for v in c["videos"].values()),
    }
    write_result(args.out, "encode_counts", data, args.smoke, torch.device("cpu"))
    return data


if __name__ == "__main__":
    main()
