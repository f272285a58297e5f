"""Each video is decoded once and its stream encoded once per run, however many questions it has, streaming and
offline; a streaming question encodes only the frames since the last chunk boundary, once more, by design.

    python -m bench.encode_counts            # about a minute: the symbolic model through the real job
    python -m bench.encode_counts --smoke    # the tiny Qwen2-VL on tiny videos, for the tests

The job (:func:`infinipotv.job.run_job`) runs on the symbolic benchmark as released (questions asked at their time
stamps while the video plays, the rest after it) and on an offline variant of it (every question after the whole
video), then once more on each finished run directory (a resume with nothing left to do). Counters wrapped around the
frame source, the vision encoder and the session's questions record, per video, how often it was decoded, how many
encoder calls ran and how many raw frames they encoded for the stream and for questions. A video is "encoded once"
when it was decoded at most once and no raw frame went through the stream's encoder twice. A question asked between
chunk boundaries (:meth:`StreamingSession.ask` with ``frames``) encodes the frames since the boundary with it, and
they are encoded again with their chunk: the question leaves the memory as it found it, so the stream, and every
other answer, is the same wherever a question is asked. Those frames are counted apart, and checked to be exactly the
tails the questions were given, each encoded once.
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
from infinipotv.config import as_run_config, register_configs
from infinipotv.data import register
from infinipotv.data.symbolic import Symbolic
from infinipotv.factory import validate
from infinipotv.models import ADAPTERS
from infinipotv.stream.session import StreamingSession


@register
class SymbolicOffline(Symbolic):
    """The symbolic benchmark with every question asked after the whole video (an offline benchmark's protocol)."""

    name = "symbolic_offline"
    streaming = False


@contextmanager
def counted(
    owner: Any,
    name: str,
    record: Callable[..., None] | None = None,
    enter: Callable[..., None] | None = None,
    leave: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Wrap ``owner.name``: ``enter`` sees each call's arguments before it runs, ``record`` its result and arguments
    once it returned, ``leave`` runs after it whatever it raised; restored on exit."""
    original, own = getattr(owner, name), name in vars(owner)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if enter is not None:
            enter(*args, **kwargs)
        try:
            result = original(*args, **kwargs)
        finally:
            if leave is not None:
                leave()
        if record is not None:
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
    """One job; per video: decodes, decoded raw frames, encoder calls, raw frames encoded for the stream and for
    questions' tails, and the tails the questions were given. A video is encoded once when it was decoded at most
    once and no raw frame went through the stream's encoder twice (the stream's encoded frames are at most the
    decoded ones, completed to a whole model frame); its tails are encoded once when the frames encoded inside its
    questions are exactly the tails they were given."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = as_run_config(compose("config", overrides=overrides))
    validate(cfg)
    counts: dict[str, dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(
            ("decodes", "frames_decoded", "encode_calls", "frames_encoded", "tail_frames_encoded", "tail_frames"), 0
        )
    )
    current: list[str] = []
    asking: list[bool] = []  # inside StreamingSession.ask: an encoder call there encodes a question's tail

    sources: list[tuple[str, Any]] = []

    def decoded(source: Any, sample: Any, *args: Any) -> None:
        counts[sample.video_id]["decodes"] += 1
        sources.append((sample.video_id, source))

    def encoded(result: Any, adapter: Any, frames: Any, *args: Any) -> None:
        counts[current[-1]]["encode_calls"] += 1
        counts[current[-1]]["tail_frames_encoded" if asking else "frames_encoded"] += len(frames)

    def asked(session: Any, prompt: str, max_new_tokens: int, frames: Any = None, *args: Any, **kwargs: Any) -> None:
        if frames is not None and len(frames):  # the tail, completed to whole model frames as the session does
            counts[current[-1]]["tail_frames"] += len(session._whole_steps(frames))
        asking.append(True)

    with ExitStack() as stack:
        stack.enter_context(counted(job, "sample_frames", decoded))
        stack.enter_context(counted(ADAPTERS[cfg.model.family], "encode_frames", encoded))
        stack.enter_context(counted(StreamingSession, "start", lambda _r, _s, video_id: current.append(video_id)))
        stack.enter_context(counted(StreamingSession, "ask", enter=asked, leave=asking.pop))
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
            "tails_encoded_once": c["tail_frames_encoded"] == c["tail_frames"],
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
                *(["eval.chunk_frames=4"] if args.smoke else []),  # tiny Qwen2-VL's 2-frame chunks leave no tail
            ]
            run_dir = Path(tmp) / bench_name
            cases[bench_name] = run_counted(overrides, run_dir)
            cases[f"{bench_name} (resumed, complete)"] = run_counted(overrides, run_dir)
    data = {
        "model": model,
        "frames_per_video": frames,
        "cases": cases,
        "all_encoded_once": all(v["encoded_once"] for c in cases.values() for v in c["videos"].values()),
        "all_tails_encoded_once": all(v["tails_encoded_once"] for c in cases.values() for v in c["videos"].values()),
    }
    write_result(args.out, "encode_counts", data, args.smoke, torch.device("cpu"))
    return data


if __name__ == "__main__":
    main()
