"""The symbolic benchmark's knobs (``benchmark.options``): their defaults, checks and the folder hash they name.

A generated folder is named by its knobs' hash (:attr:`Knobs.tag`), so a changed knob gives a new folder and a
finished one is reused. A knob added after folders were made stays out of the hash while it has the value those
folders were made with (:data:`INERT`), so they are reused as they are: the default stream stays reproducible.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from infinipotv.config import ConfigError
from infinipotv.data.symbolic_content import KINDS, MAX_NEEDLES
from infinipotv.models import glyphs

VERSION = 1  # bump when the generator's output changes for the same parameters
CUES = ("line", "kind")  # answer_cue: the needle line's own opening words, or the kind of value only
DEFAULTS: dict[str, Any] = {
    "n_videos": 4,
    "frames": 96,
    "fps": 2,
    "grid": [3, 4],
    "patch": glyphs.DEFAULT_PATCH,
    "scene_frames": 12,
    "n_needles": 5,
    "needle_span": [0.1, 0.6],
    "needle_frames": 4,
    "n_distractors": 3,
    "distractor_similarity": 0.25,
    "mc_fraction": 0.5,
    "streaming_fraction": 0.5,
    "question_delay": [0.2, 0.4],
    "scene_questions": 0,
    "show_options": False,
    "background_rows": 0,
    "background_frames": 48,
    "answer_cue": "line",
}
#: Knobs out of the folder hash while they have these values (the folders made before the knob existed).
INERT: dict[str, Any] = {"answer_cue": "line"}
BACKGROUND_KNOBS = ("background_rows", "background_frames")  # out of the folder hash while off: old folders reused


def _fraction(name: str, value: float) -> float:
    if not 0 <= value <= 1:
        raise ConfigError(f"benchmark.options.{name}={value} must lie in [0, 1]")
    return float(value)


def _span(name: str, value: list[float]) -> tuple[float, float]:
    lo, hi = (float(v) for v in value)
    if not 0 <= lo <= hi <= 1:
        raise ConfigError(f"benchmark.options.{name}={list(value)} must be [lo, hi] with 0 <= lo <= hi <= 1")
    return lo, hi


def _lengths(value: Any) -> int | tuple[int, ...]:
    """``needle_frames``: one length (an int, as every folder made before lists were allowed names it), or the
    lengths an event draws from (a list; one distinct value is that int)."""
    if isinstance(value, (int, float, str)):
        return int(value)
    lengths = tuple(int(v) for v in value)
    if not lengths:
        raise ConfigError("benchmark.options.needle_frames=[] holds no length: give frames per event, e.g. 4 or [3, 6]")
    return lengths[0] if len(set(lengths)) == 1 else lengths


@dataclass(frozen=True)
class Knobs:
    """The generator's parameters, checked (``benchmark.options`` over :data:`DEFAULTS`). ``needle_frames`` is an
    event's length in frames, or the lengths each needle and distractor event draws its own from (uniformly)."""

    n_videos: int
    frames: int
    fps: int
    grid: tuple[int, int]
    patch: int
    scene_frames: int
    n_needles: int
    needle_span: tuple[float, float]
    needle_frames: int | tuple[int, ...]
    n_distractors: int
    distractor_similarity: float
    mc_fraction: float
    streaming_fraction: float
    question_delay: tuple[float, float]
    scene_questions: int
    show_options: bool
    background_rows: int
    background_frames: int
    answer_cue: str

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "Knobs":
        unknown = sorted(set(options) - set(DEFAULTS))
        if unknown:
            raise ConfigError(
                f"benchmark.options has unknown keys {unknown} for benchmark=symbolic; known: {', '.join(DEFAULTS)}"
            )
        o = {**DEFAULTS, **options}
        knobs = cls(
            n_videos=int(o["n_videos"]),
            frames=int(o["frames"]),
            fps=int(o["fps"]),
            grid=(int(o["grid"][0]), int(o["grid"][1])),
            patch=int(o["patch"]),
            scene_frames=int(o["scene_frames"]),
            n_needles=int(o["n_needles"]),
            needle_span=_span("needle_span", o["needle_span"]),
            needle_frames=_lengths(o["needle_frames"]),
            n_distractors=int(o["n_distractors"]),
            distractor_similarity=_fraction("distractor_similarity", o["distractor_similarity"]),
            mc_fraction=_fraction("mc_fraction", o["mc_fraction"]),
            streaming_fraction=_fraction("streaming_fraction", o["streaming_fraction"]),
            question_delay=_span("question_delay", o["question_delay"]),
            scene_questions=int(o["scene_questions"]),
            show_options=bool(o["show_options"]),
            background_rows=int(o["background_rows"]),
            background_frames=int(o["background_frames"]),
            answer_cue=str(o["answer_cue"]),
        )
        knobs.check()
        return knobs

    @property
    def lengths(self) -> tuple[int, ...]:
        """The lengths an event may have, in frames."""
        return self.needle_frames if isinstance(self.needle_frames, tuple) else (self.needle_frames,)

    def check(self) -> None:
        if not 0 <= self.n_needles <= MAX_NEEDLES:
            raise ConfigError(
                f"benchmark.options.n_needles={self.n_needles} must lie in [0, {MAX_NEEDLES}] "
                f"({len(KINDS)} kinds: {', '.join(k.name for k in KINDS)}; each with "
                f"{MAX_NEEDLES // len(KINDS)} subjects)"
            )
        longest = max(self.lengths)
        events = (self.n_needles + self.n_distractors) * longest
        if min(self.n_videos, self.fps, self.scene_frames, *self.lengths, *self.grid) < 1 or events >= self.frames:
            raise ConfigError(
                f"benchmark.options: n_videos, fps, scene_frames, needle_frames and grid must be >= 1 and "
                f"the events ({events} frames at their longest) fewer than frames={self.frames}"
            )
        starts = self.needle_starts()
        if any(b - a < longest for a, b in zip(starts, starts[1:])):
            raise ConfigError(
                f"benchmark.options.needle_span={list(self.needle_span)} is too narrow for "
                f"{self.n_needles} needles of needle_frames={self.needle_frames} in {self.frames} frames "
                f"(they would overlap at frames {starts}): widen needle_span, or lower n_needles or "
                f"needle_frames"
            )
        if not 0 <= self.background_rows < self.grid[0] or self.background_frames < 1:
            raise ConfigError(
                f"benchmark.options.background_rows={self.background_rows} must lie in [0, {self.grid[0] - 1}] "
                f"(the grid's rows less one, for the events) and background_frames={self.background_frames} be >= 1"
            )
        if self.answer_cue not in CUES:
            raise ConfigError(
                f"benchmark.options.answer_cue={self.answer_cue!r} is unknown: use line (the needle line's opening "
                f"words, 'The secret code is') or kind (the kind of value only, 'The number is')"
            )
        glyphs.frame_size(self.grid, self.patch)  # checks the patch size

    def needle_starts(self) -> list[int]:
        """First frames of the needles, evenly spread over ``needle_span``: the centres of n equal slices of it (an
        event of the longest length fits after each)."""
        lo, hi = self.needle_span
        n, last = self.n_needles, self.frames - max(self.lengths)
        return [min(last, round((lo + (hi - lo) * (i + 0.5) / n) * self.frames)) for i in range(n)]

    @property
    def tag(self) -> str:
        """Folder name: the parameters' hash (with the seed added by the caller)."""
        knobs = {k: v for k, v in self.__dict__.items() if k not in INERT or v != INERT[k]}
        if not self.background_rows:
            for key in BACKGROUND_KNOBS:
                del knobs[key]
        blob = json.dumps({"version": VERSION, **knobs}, sort_keys=True, default=list)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]
