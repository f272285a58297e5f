"""What the symbolic videos say: scene lines, needle kinds with their questions, and their distractor lures.

Every line is short enough for one frame of 12 tokens (the default 3 x 4 glyph grid) with its newline. A needle's
question ends with an answer prefix that repeats the start of its line ("The secret code is"), so answering is
reading the memory, not reasoning. A kind's lures go from unrelated (similarity 0) through the same kind of value
in another sentence (0.5) to a near-copy of the needle's sentence (1), which shares the answer prefix's last words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

PLACES = (
    "kitchen",
    "garden",
    "garage",
    "office",
    "beach",
    "library",
    "station",
    "forest",
    "bakery",
    "harbor",
    "museum",
    "stadium",
    "market",
    "hospital",
    "theater",
    "airport",
)
OBJECTS = (
    "kettle",
    "bench",
    "truck",
    "lamp",
    "boat",
    "sofa",
    "piano",
    "tent",
    "clock",
    "ladder",
    "bicycle",
    "guitar",
    "mirror",
    "basket",
    "statue",
    "carpet",
)
COLOURS = ("red", "blue", "green", "yellow", "white", "black", "brown", "orange")
NAMES = ("Clara", "Oliver", "Maya", "Lucas", "Sofia", "Daniel", "Emma", "Noah", "Alice", "Henry", "Julia", "Oscar")
ITEMS = ("apples", "books", "cups", "candles", "boxes", "plates", "keys", "coins")

Value = dict[str, str]


def background_line(rng: np.random.Generator) -> str:
    """A static background ("grey clock"): two words, so that one row of four glyphs holds it with its newline."""
    return f"{COLOURS[int(rng.integers(len(COLOURS)))]} {OBJECTS[int(rng.integers(len(OBJECTS)))]}"


def _code(rng: np.random.Generator) -> Value:
    return {"value": str(int(rng.integers(1000, 10000)))}


def _pick(pool: tuple[str, ...]) -> Callable[[np.random.Generator], Value]:
    return lambda rng: {"value": str(rng.choice(pool))}


def _count(rng: np.random.Generator) -> Value:
    return {"value": str(int(rng.integers(2, 10))), "item": str(rng.choice(ITEMS))}


def _age(rng: np.random.Generator) -> Value:
    return {"value": str(int(rng.integers(21, 100)))}


def _hour(rng: np.random.Generator) -> Value:
    return {"value": str(int(rng.integers(1, 13)))}


@dataclass(frozen=True)
class NeedleKind:
    """One kind of needle event: its line, question and answer prefix, its subjects, values and lures.

    ``{subject}`` in the templates names what the value belongs to ("The {subject} code is {value}."): a video may
    hold a kind more than once, each time about another subject (needle i of a video takes subject i // len(KINDS)
    of its kind), so the question names which one it asks. The first subject is the one a single needle of the kind
    always had. No subject appears in a lure's fixed words, so a lure never states another needle's fact.
    """

    name: str
    template: str
    question: str
    answer_prefix: str
    subjects: tuple[str, ...]
    draw: Callable[[np.random.Generator], Value]
    lures: tuple[str, str, str]  # least to most similar to the needle's line; may use {subject} and {value}
    kind_cue: str  # an answer cue naming the kind of value only: none of the line's own words but common ones

    def cue(self, answer_cue: str) -> str:
        """The answer cue a question ends with: the line's opening words (``line``, "The {subject} code is") or the
        kind of value alone (``kind``, "The number is")."""
        return self.answer_prefix if answer_cue == "line" else self.kind_cue

    def statement(self, value: Value) -> str:
        return self.template.format(**value)

    def other_values(self, value: str, n: int, rng: np.random.Generator) -> list[str]:
        """``n`` distinct values of this kind, none equal to ``value`` (wrong options, lure values)."""
        found: list[str] = []
        while len(found) < n:
            candidate = self.draw(rng)["value"]
            if candidate != value and candidate not in found:
                found.append(candidate)
        return found

    def lure(self, similarity: float, subject: str, rng: np.random.Generator) -> str:
        """A distractor line at ``similarity`` in [0, 1] about ``subject``: between two of the three levels, the
        upper one with the probability of the fractional part (0.25 = unrelated or same kind of value, half and
        half)."""
        position = similarity * (len(self.lures) - 1)
        level = int(position) + int(rng.random() < position - int(position))
        return self.lures[level].format(subject=subject, **self.draw(rng))


KINDS = (
    NeedleKind(
        "code",
        "The {subject} code is {value}.",
        "What is the {subject} code?",
        "The {subject} code is",
        ("secret", "door", "safe", "alarm", "locker"),
        _code,
        ("A bird flies past the window.", "The room number is {value}.", "The old code is {value}."),
        "The code number is",
    ),
    NeedleKind(
        "name",
        "The {subject}'s name is {value}.",
        "What is the {subject}'s name?",
        "The {subject}'s name is",
        ("visitor", "pilot", "doctor", "driver", "teacher"),
        _pick(NAMES),
        ("A phone rings in the hall.", "The cook's name is {value}.", "The {subject}'s dog is {value}."),
        "The name is",
    ),
    NeedleKind(
        "count",
        "The {subject} holds {value} {item}.",
        "How many {item} does the {subject} hold?",
        "The {subject} holds",
        ("table", "drawer", "bowl", "crate", "tray"),
        _count,
        ("Rain taps on the glass.", "The shelf holds {value} {item}.", "The {subject} held {value} {item}."),
        "The number is",
    ),
    NeedleKind(
        "hour",
        "The {subject} leaves at {value} o'clock.",
        "When does the {subject} leave?",
        "The {subject} leaves at",
        ("train", "ferry", "plane", "coach", "tram"),
        _hour,
        ("A dog barks outside.", "The bus leaves at {value} o'clock.", "The {subject} left at {value} o'clock."),
        "It departs at",
    ),
    NeedleKind(
        "age",
        "The {subject} is {value} years old.",
        "How old is the {subject}?",
        "The {subject} is",
        ("old sailor", "farmer", "painter", "baker", "tailor"),
        _age,
        ("The lights flicker.", "The young cook is {value} years old.", "The {subject} was {value} years old."),
        "The age is",
    ),
)
MAX_NEEDLES = len(KINDS) * min(len(kind.subjects) for kind in KINDS)


@dataclass(frozen=True)
class SceneLine:
    """A held scene: a place with one coloured object; the question asks the object's colour."""

    template: str = "In the {place} the {object} is {colour}."
    question: str = "What colour is the {object} in the {place}?"
    answer_prefix: str = "In the {place} the {object} is"

    def statement(self, cast: dict[str, str]) -> str:
        return self.template.format(**cast)


SCENE = SceneLine()


def scene_cast(rng: np.random.Generator) -> list[dict[str, str]]:
    """Every place with its own object (distinct across places) and a colour: how each place looks in one video."""
    objects = rng.permutation(OBJECTS)
    return [
        {"place": place, "object": str(obj), "colour": str(rng.choice(COLOURS))}
        for place, obj in zip(rng.permutation(PLACES), objects)
    ]
