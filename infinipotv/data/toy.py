"""``python -m infinipotv.data.toy ROOT [--with-errors]``: small local data in every benchmark's released layout.

Writes ``ROOT/<benchmark>/`` for videomme, mlvu, egoschema, longvideobench and streamingbench (tiny real mp4
videos, annotation files where ``conf/benchmark/<name>.yaml`` looks by default, so ``benchmark.root=ROOT/<name>``
is the only override), the official releases beside them (``ROOT/mlvu_official``, ``ROOT/egoschema_official``,
the other StreamingBench parts under ``ROOT/streamingbench_<part>``) and ``ROOT/hf_home``, the $HF_HOME that
lmms-eval's local tasks read (:mod:`infinipotv.data.toy_lmms`). ``--with-errors`` adds what real downloads hold:
a question whose video is missing and malformed rows (the test fixtures), for the dataset doctor to report.
The tests build the same sets from :data:`BUILDERS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from infinipotv.config import BenchmarkConfig
from infinipotv.data.loading import benchmark_class
from infinipotv.data.toy_lmms import build_hf_home
from infinipotv.data.toy_sets import build_egoschema, build_longvideobench, build_mlvu, build_videomme
from infinipotv.data.toy_streaming import build_streamingbench

#: benchmark name -> builder(root, fmt=..., errors=...) writing the benchmark's default layout
BUILDERS: dict[str, Callable[..., BenchmarkConfig]] = {
    "videomme": build_videomme,
    "mlvu": build_mlvu,
    "egoschema": build_egoschema,
    "longvideobench": build_longvideobench,
    "streamingbench": build_streamingbench,
}
#: folder under ROOT -> builder of a second released format
VARIANTS: dict[str, Callable[..., BenchmarkConfig]] = {
    "mlvu_official": partial(build_mlvu, fmt="official"),
    "egoschema_official": partial(build_egoschema, fmt="official"),
    "streamingbench_omni": partial(build_streamingbench, part="omni"),
    "streamingbench_contextual": partial(build_streamingbench, part="contextual"),
    "streamingbench_csv": partial(build_streamingbench, fmt="csv"),
}


#: Video-MME's toy video for the documented toy run (``stream=toy``): 32 s of 112 x 112 frames, which the tiny
#: Qwen2-VL streams as 32 model frames of 16 vision tokens (512), seven times its |M| of 72. The fixtures keep 3 s.
TOY_VIDEOMME = {"n_frames": 128, "size": 112}


def write_toy(root: Path, errors: bool = False) -> dict[str, BenchmarkConfig]:
    """Every toy set under ``root``; returns folder name -> the config that loads it."""
    builders = {**BUILDERS, "videomme": partial(build_videomme, **TOY_VIDEOMME), **VARIANTS}
    configs = {name: build(root / name, errors=errors) for name, build in builders.items()}
    build_hf_home(root / "hf_home")
    return configs


def overrides(cfg: BenchmarkConfig) -> list[str]:
    """The run.py overrides that load ``cfg``: annotations only where they are not the benchmark's default file."""
    out = [f"benchmark={cfg.name}", f"benchmark.root={cfg.root}"]
    if cfg.part and cfg.part != "real_time":
        out.append(f"benchmark.part={cfg.part}")
    default = benchmark_class(cfg.name)(replace(cfg, annotations=None)).annotations
    if cfg.annotations and Path(cfg.annotations) != default:
        out.append(f"benchmark.annotations={cfg.annotations}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infinipotv.data.toy", description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, help="folder to write into (created)")
    parser.add_argument("--with-errors", action="store_true", help="add missing videos and malformed rows")
    args = parser.parse_args(argv)
    configs = write_toy(args.root, errors=args.with_errors)
    for folder, cfg in configs.items():
        print(f"{folder:26s} {' '.join(overrides(cfg))}")
    print(f"{'hf_home':26s} HF_HOME={args.root / 'hf_home'} (lmms-eval local tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
