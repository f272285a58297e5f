"""Benchmarks (one module each, registered by name), video decoding and the symbolic benchmark."""

from infinipotv.data import (  # noqa: F401  (each import registers its benchmark)
    egoschema,
    longvideobench,
    mlvu,
    streamingbench,
    symbolic,
    videomme,
)
from infinipotv.data.base import BENCHMARKS, Benchmark, Question, VideoSample, register

__all__ = ["BENCHMARKS", "Benchmark", "Question", "VideoSample", "register"]
