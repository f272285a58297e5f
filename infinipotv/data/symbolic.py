"""The symbolic benchmark: seeded glyph videos of scenes, distractors and needle events, and questions about them.

Each frame is one short line of text drawn in the glyph code (:mod:`infinipotv.models.glyphs`): the symbolic model
reads it with a real language model, so memory compression changes real answers on a CPU. A video is a sequence of
*scenes* ("In the kitchen the kettle is red."), each held for many identical frames (the temporal redundancy TaR
exploits); *needle* events (a code, a name, a count...) last ``needle_frames`` frames (default 4, two seconds) at
controlled depths of the stream; *distractor* events, as long, look more or less like the needles. Questions ask
for a needle (short answer or multiple choice) or for what a scene showed (multiple choice), after the stream
(offline) or at a time stamp while it plays (streaming). Every prompt ends with an answer prefix ("Answer: The
secret code is"), so the model answers by reading its memory, and short answers are scored by normalized exact
match of the first word.

The generator writes real mp4 files (PyAV, lossless) and ``annotations.json`` (one row per question, the schema of the
released benchmarks) under ``benchmark.root``, in a folder named by its parameters: a knob changed gives a new
folder, a finished one is reused. Knobs (``benchmark.options``): stream length ``frames``, ``scene_frames``,
``n_needles``, ``needle_span`` (where in the stream the needles sit, as fractions), ``n_distractors`` and
``distractor_similarity`` (0 = unrelated events, 1 = near-copies of a needle's sentence), and the stream kind:
``background_rows`` > 0 gives every frame a *background* in its bottom rows, a short line held at the same place for
``background_frames`` frames (+-25%) whatever the scene or event above it, as a static background is in real video
(the premise of TaR). See docs/symbolic.md.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.base import Question, VideoSample, register
from infinipotv.data.loading import AnnotatedBenchmark, hms_seconds, options_from_list, text
from infinipotv.data.symbolic_content import COLOURS, KINDS, SCENE, NeedleKind, background_line, scene_cast
from infinipotv.data.symbolic_knobs import DEFAULTS, INERT, VERSION, Knobs
from infinipotv.data.video import write_video
from infinipotv.models import glyphs

LETTERS = "ABCD"
MAX_NEW_TOKENS = 8
# Every value is one word and both scores read the answer's first word (``normalize``; ``choose`` finds the option
# it names), so decoding stops once that word has ended: a word character followed by any other.
FIRST_WORD = r"[\w'][^\w']"


def _hms(seconds: float) -> str:
    minutes, s = divmod(seconds, 60)
    return f"{int(minutes // 60):02d}:{int(minutes % 60):02d}:{s:05.2f}"


def _depth_bin(fraction: float) -> str:
    return "early" if fraction < 1 / 3 else "middle" if fraction < 2 / 3 else "late"


class _Video:
    """One generated video: a timeline of frame texts, and its question rows."""

    def __init__(self, knobs: Knobs, rng: np.random.Generator, video_id: str, lengths: np.random.Generator) -> None:
        self.k, self.rng, self.video_id, self.length_rng = knobs, rng, video_id, lengths
        self.lines = self._scenes()
        self.rows: list[dict[str, Any]] = []
        order = rng.permutation(len(KINDS))
        needles = [
            (KINDS[order[i % len(KINDS)]], KINDS[order[i % len(KINDS)]].subjects[i // len(KINDS)])
            for i in range(knobs.n_needles)
        ]  # the kinds in a random order, then again with their next subject
        starts = knobs.needle_starts()
        free = self._free_starts(starts)
        for (kind, subject), start in zip(needles, starts):
            value = {**kind.draw(rng), "subject": subject}
            end = self._place(start, kind.statement(value))
            self._ask_needle(kind, value, start, end)
        lured = needles or [(kind, kind.subjects[0]) for kind in KINDS]  # no needles: lures of every kind
        for j, start in enumerate(free):
            kind, subject = lured[j % len(lured)]
            self._place(start, kind.lure(self.k.distractor_similarity, subject, rng))
        for j in range(knobs.scene_questions):
            self._ask_scene(j)

    # -- the timeline ---------------------------------------------------------------------------------------------
    def _scenes(self) -> list[str]:
        """Scenes held for ``scene_frames`` (+-25%) frames each; a place keeps its look when the camera returns."""
        self.cast = scene_cast(self.rng)
        self.scene_spans: list[tuple[int, int, int]] = []  # (cast index, first frame, end frame)
        lines: list[str] = []
        previous = -1
        while len(lines) < self.k.frames:
            index = int(self.rng.integers(len(self.cast) - 1))
            index += index >= previous >= 0  # never the same place twice in a row
            hold = max(1, round(self.k.scene_frames * self.rng.uniform(0.75, 1.25)))
            self.scene_spans.append((index, len(lines), min(len(lines) + hold, self.k.frames)))
            lines += [SCENE.statement(self.cast[index])] * hold
            previous = index
        return lines[: self.k.frames]

    def _free_starts(self, taken: list[int]) -> list[int]:
        """Distractor positions: random frames whose events do not overlap a needle's (at the longest length)."""
        width = max(self.k.lengths)
        free = [s for s in range(self.k.frames - width + 1) if all(abs(s - t) >= width for t in taken)]
        chosen: list[int] = []
        for s in self.rng.permutation(free):
            if len(chosen) == self.k.n_distractors:
                break
            if all(abs(int(s) - c) >= width for c in chosen):
                chosen.append(int(s))
        return sorted(chosen)

    def _place(self, start: int, line: str) -> int:
        """An event from ``start`` for its length (drawn from ``needle_frames``' lengths when there are several, from
        a stream of its own: the rest of the video is drawn as with one length); its end frame."""
        lengths = self.k.lengths
        end = start + (lengths[0] if len(lengths) == 1 else int(self.length_rng.choice(lengths)))
        for f in range(start, end):
            self.lines[f] = line
        return end

    # -- questions ------------------------------------------------------------------------------------------------
    def _asked_at(self, end: int) -> float | None:
        """A streaming time stamp some way after frame ``end`` (None: asked after the stream)."""
        if self.rng.random() >= self.k.streaming_fraction:
            return None
        delay = self.rng.uniform(*self.k.question_delay) * self.k.frames
        frame = end + round(delay)
        return frame / self.k.fps if frame < self.k.frames else None

    def _add(
        self, task: str, question: str, prefix: str, answer: str, choices: list[str] | None, first: int, end: int
    ) -> None:
        asked = self._asked_at(end)
        options, gold = [], answer
        if choices is not None:
            order = self.rng.permutation(len(choices))
            options = [f"{LETTERS[i]}. {choices[j]}" for i, j in enumerate(order)]
            gold = LETTERS[int(np.argmax(order == 0))]
        self.rows.append(
            {
                "video_id": self.video_id,
                "video_path": f"videos/{self.video_id}.mp4",
                "question_id": f"{self.video_id}_q{len(self.rows)}",
                "task_type": task,
                "format": "multiple_choice" if options else "short_answer",
                "mode": "offline" if asked is None else "streaming",
                "question": question,
                "answer_prefix": prefix,
                "options": options,
                "answer": gold,
                "show_options": self.k.show_options,
                "time_stamp": None if asked is None else _hms(asked),
                "duration": self.k.frames / self.k.fps,
                "evidence": [_hms(first / self.k.fps), _hms(end / self.k.fps)],
                "depth": _depth_bin(first / self.k.frames),
            }
        )

    def _ask_needle(self, kind: NeedleKind, value: dict[str, str], start: int, end: int) -> None:
        choices = None
        if self.rng.random() < self.k.mc_fraction:
            choices = [value["value"], *kind.other_values(value["value"], 3, self.rng)]
        self._add(
            kind.name,
            kind.question.format(**value),
            kind.cue(self.k.answer_cue).format(**value),
            value["value"],
            choices,
            start,
            end,
        )

    def _ask_scene(self, j: int) -> None:
        """The colour of a scene's object, asked about a place seen exactly once (so the evidence is one span)."""
        counts = np.bincount([c for c, _, _ in self.scene_spans], minlength=len(self.cast))
        once = [s for s in self.scene_spans if counts[s[0]] == 1]
        index, first, end = once[int(self.rng.integers(len(once)))] if once else self.scene_spans[0]
        place = self.cast[index]
        choices = None
        if self.rng.random() < self.k.mc_fraction:
            others = [c for c in COLOURS if c != place["colour"]]
            choices = [place["colour"], *self.rng.choice(others, 3, replace=False).tolist()]
        self._add(
            "scene",
            SCENE.question.format(**place),
            SCENE.answer_prefix.format(**place),
            place["colour"],
            choices,
            first,
            end,
        )


def _backgrounds(knobs: Knobs, rng: np.random.Generator) -> list[str]:
    """A background line per frame, each held ``background_frames`` (+-25%) frames, never the same twice in a row."""
    lines: list[str] = []
    while len(lines) < knobs.frames:
        line = background_line(rng)
        if lines and line == lines[-1]:
            continue
        lines += [line] * max(1, round(knobs.background_frames * rng.uniform(0.75, 1.25)))
    return lines[: knobs.frames]


def _padded(tokenizer: Any, lines: list[str], width: int, what: str, knobs: Knobs) -> list[list[int]]:
    """Each line's token ids padded with newlines to ``width`` tokens (one frame's share of the grid)."""
    newline = tokenizer("\n", add_special_tokens=False).input_ids
    ids = {line: tokenizer(f" {line}", add_special_tokens=False).input_ids for line in set(lines)}
    too_long = [line for line, x in ids.items() if len(x) + len(newline) > width]
    if too_long:
        raise ConfigError(
            f"benchmark.options.grid={list(knobs.grid)} with background_rows={knobs.background_rows} leaves "
            f"{width} tokens per frame for the {what}, too few for {too_long[0]!r} and a newline: use at least "
            f"[3, 4], one row more for each background row"
        )
    padded = {line: x + newline * ((width - len(x)) // len(newline)) for line, x in ids.items()}
    return [padded[line] for line in lines]


def generate(folder: Path, knobs: Knobs, seed: int) -> Path:
    """Write every video and ``annotations.json`` into ``folder`` (files replaced atomically); the annotations path."""
    from infinipotv.models.symbolic import smollm2_tokenizer

    tokenizer = smollm2_tokenizer()
    grid_rows, cols = knobs.grid
    events = (grid_rows - knobs.background_rows) * cols
    rows: list[dict[str, Any]] = []
    for v in range(knobs.n_videos):
        video = _Video(
            knobs, np.random.default_rng([seed, v]), f"symbolic_{v:03d}", np.random.default_rng([seed, v, 2])
        )
        frames = _padded(tokenizer, video.lines, events, "scenes and events", knobs)
        for row in range(knobs.background_rows):  # each row its own line, held on its own random stream: the
            # events and questions are those of the plain kind (row 0's stream is the one background row's)
            background = _backgrounds(knobs, np.random.default_rng([seed, v, 1, row] if row else [seed, v, 1]))
            below = _padded(tokenizer, background, cols, "background", knobs)
            frames = [top + bottom for top, bottom in zip(frames, below)]
        tokens = np.array(frames).reshape(knobs.frames, *knobs.grid)
        path = folder / "videos" / f"{video.video_id}.mp4"
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.mp4")
        write_video(tmp, glyphs.encode(tokens, knobs.patch), knobs.fps, lossless=True)
        tmp.replace(path)
        rows += video.rows
    annotations = folder / "annotations.json"
    tmp = annotations.with_name(f".annotations.{os.getpid()}.json")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(annotations)
    recorded = {k: v for k, v in knobs.__dict__.items() if k not in INERT or v != INERT[k]}
    (folder / "generator.json").write_text(
        json.dumps({"version": VERSION, "seed": seed, **recorded}, indent=1, default=list)
    )
    return annotations


@register
class Symbolic(AnnotatedBenchmark):
    """Generated on first use under ``{root}/s{seed}-{hash of the knobs}/``; ``benchmark.annotations`` may point
    at an existing ``annotations.json`` instead (its videos next to it)."""

    name = "symbolic"
    streaming = True
    option_keys = tuple(DEFAULTS)
    option_defaults = DEFAULTS
    id_field = "question_id"
    video_field = "video_id"
    category_fields = {"task_type": "task_type", "format": "format", "mode": "mode", "depth": "depth"}

    def __init__(self, cfg: BenchmarkConfig) -> None:
        super().__init__(cfg)
        self.knobs = Knobs.from_options(dict(cfg.options))

    def frame_size(self) -> tuple[int, int] | None:
        """The generator's frames (grid x patch); an existing annotations.json brings its own videos."""
        return None if self.cfg.annotations else glyphs.frame_size(self.knobs.grid, self.knobs.patch)

    @property
    def folder(self) -> Path:
        """Where this seed and these knobs are generated."""
        return self.root / f"s{self.cfg.seed}-{self.knobs.tag}"

    @property
    def annotations(self) -> Path:
        return Path(self.cfg.annotations) if self.cfg.annotations else self.folder / "annotations.json"

    @property
    def video_root(self) -> Path:
        """The videos are next to the annotations (generated, or given with ``benchmark.annotations``)."""
        return self.annotations.parent

    def load(self) -> list[VideoSample]:
        if not self.cfg.annotations and not self.annotations.is_file():
            generate(self.folder, self.knobs, self.cfg.seed)
        return super().load()

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        options = options_from_list(row["options"]) if row["options"] else {}
        gold = text(row, "answer").strip()
        if options and gold not in options:
            raise ValueError(f"answer {gold!r} is not one of the options {''.join(options)}")
        shown = options and row.get("show_options", False)
        listed = f"Options: {' '.join(f'{k}. {v}' for k, v in options.items())}\n" if shown else ""
        prompt = f"Question: {text(row, 'question')}\n{listed}Answer: {row['answer_prefix']}"
        asked = hms_seconds(row["time_stamp"]) if row["time_stamp"] else float(row["duration"])
        question = Question(
            qid=text(row, "question_id"),
            prompt=prompt,
            gold=gold if options else normalize(gold),
            text=text(row, "question"),
            options=options,
            categories=self.categories(row),
            time_s=asked,
            max_new_tokens=MAX_NEW_TOKENS,
            stop=FIRST_WORD,
            evidence_s=(hms_seconds(row["evidence"][0]), hms_seconds(row["evidence"][1]))
            if row.get("evidence")
            else None,
        )
        return text(row, "video_id"), self.annotations.parent / row["video_path"], question

    def parse(self, output: str, question: Question) -> str | None:
        if question.options:
            return choose(output, question.options)
        return normalize(output) or None


def normalize(text: str) -> str:
    """A short answer's normal form: its first word, lower case, without punctuation ("  4817." -> "4817")."""
    found = re.match(r"\s*([\w']+)", text)
    return found.group(1).lower().strip("'") if found else ""


def choose(output: str, options: dict[str, str]) -> str | None:
    """The option the completion names: the earliest option text on its first line (the model continues the answer
    prefix, e.g. " red kettle."), else a bare letter answer ("B", "(B)", "B. ...")."""
    line = output.strip().splitlines()[0].lower() if output.strip() else ""
    hits = [
        (m.start(), letter)
        for letter, text in options.items()
        if (m := re.search(rf"(?<!\w){re.escape(text.lower())}(?!\w)", line))
    ]
    if hits:
        return min(hits)[1]
    letter = re.match(rf"\s*\(?([{''.join(options)}])(?:[.):]|\s*$)", output)
    return letter.group(1) if letter else None
