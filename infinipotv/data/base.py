"""The benchmark contract: videos with their questions, prompts, answer parsing and scoring.

A benchmark module is one file with a :class:`Benchmark` subclass registered by name; its YAML in
``conf/benchmark/`` sets the local paths. The job streams each :class:`VideoSample` through the session once and
answers all of its questions on that memory (streaming benchmarks: each question at its ``time_s``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from infinipotv.registry import Registry


@dataclass
class Question:
    """One question about one video.

    ``prompt`` is the whole user text that follows the video (the benchmark's protocol); the model adapter wraps it
    in its chat template. ``text`` is the question's own text as the benchmark gives it, without options,
    instruction or answer cue: what most retrieval methods' upstreams form their query from (ReKV, StreamKV, MuKV,
    StreamingTOM read ``input_text['question']``; each method's docstring cites the line), never the prompt, whose
    template and cue would act as a lookup key on a benchmark whose cue repeats its evidence. ``time_s`` is None
    for offline benchmarks (asked after the whole video) and the stream time at which a streaming question is asked
    otherwise. ``categories`` holds the benchmark's own breakdown fields
    (e.g. ``{"duration": "short", "domain": ..., "task_type": ...}``); they are copied into every prediction record.
    ``stop``: a regular expression; greedy decoding ends as soon as the answer so far matches it (a benchmark whose
    score reads only the answer's start need not pay for the rest: each decoded token is a forward of the model).
    ``evidence_s``: the seconds ``[start, end)`` of the video that show the answer, where the benchmark releases
    them; the run then records what the answer read of those frames (:mod:`infinipotv.stream.needles`).
    """

    qid: str
    prompt: str
    gold: str
    text: str
    options: dict[str, str] = field(default_factory=dict)
    categories: dict[str, str] = field(default_factory=dict)
    time_s: float | None = None
    max_new_tokens: int = 16
    stop: str | None = None
    evidence_s: tuple[float, float] | None = None  # where the answer is shown, [start, end) in stream seconds


@dataclass
class VideoSample:
    """A video file and its questions. ``error`` names a problem found while loading the annotations."""

    video_id: str
    path: Path
    questions: list[Question]
    error: str | None = None


class Benchmark(ABC):
    """Loading, prompts, parsing and scoring for one benchmark. Subclasses register with :func:`register`."""

    name: ClassVar[str]
    streaming: ClassVar[bool] = False
    option_keys: ClassVar[tuple[str, ...]] = ()  # the ``benchmark.options`` it reads; any other key is refused
    #: the options' defaults: a run directory recorded before an option existed ran with its default, so resuming it
    #: is not a change of configuration
    option_defaults: ClassVar[dict[str, Any]] = {}

    def frame_size(self) -> tuple[int, int] | None:
        """(height, width) of every frame when the config alone fixes it (a generated benchmark), checked against
        the model before anything streams; None: known once a video is read (released videos differ)."""
        return None

    @abstractmethod
    def samples(self) -> Iterator[VideoSample]:
        """Every video in a fixed order, each with its questions (the job applies the subset selection once, for
        every benchmark: :func:`infinipotv.data.subset.select`)."""

    @abstractmethod
    def parse(self, output: str, question: Question) -> str | None:
        """The option letter the model chose, or None when nothing can be parsed."""

    @abstractmethod
    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Scores (0-100) from prediction records alone, overall and per category."""


BENCHMARKS: Registry[type[Benchmark]] = Registry("benchmark")


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make a benchmark buildable by its ``name``."""
    return BENCHMARKS.add(cls.name, cls)
