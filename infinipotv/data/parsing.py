"""Answer parsers: from a model's raw output to the option letter it chose.

Each benchmark's published numbers come from one specific parser, quirks included; reproducing them means parsing
exactly the same way (``faithful``). Where that parser has a quirk that mis-reads clear answers, ``strict`` fixes it,
and every table says which parser produced it. The rules are in docs/spec ``benchmarks.md``:

- :func:`by_form` -- Video-MME and MLVU: candidates ranked by the form they appear in.
- :func:`egoschema` -- lmms-eval's EgoSchema parser: "(X)", "X ", "X.", then option text for long answers, earliest
  match wins, a seeded random letter when nothing matches (``strict``: None).
- :func:`first_capital` -- lmms-eval's LongVideoBench parser: the first capital A-E anywhere after dropping answer
  phrases, so "Answer: B" reads as A (``strict``: a standalone letter); a seeded random letter when nothing matches.
- :func:`first_char` -- StreamingBench's own scorer compares the output's first character with the gold letter.
"""

from __future__ import annotations

import random
import re

# Video-MME / MLVU form priority, highest first; ``{L}`` is the character class of the valid letters.
_FORMS = (
    r"^\s*\(?({L})(?![A-Za-z])",  # at the very start of the answer
    r"(?<![A-Za-z])\(?({L})\)?[.!]?\s*$",  # at the end
    r"(?i:the answer is)\s*:?\s*\(?({L})(?![A-Za-z])",  # "the answer is X"
    r"\(({L})\)",  # "(X)"
    r"(?<![A-Za-z])({L})\.",  # "X."
    r"(?<![A-Za-z])({L}):",  # "X:"
    r"(?<![A-Za-z(])({L})\)",  # "X)"
    r"(?<![A-Za-z])({L}) ",  # "X "
)

# Phrases lmms-eval's LongVideoBench parser deletes before looking for a capital letter (case-sensitive, in order).
_LVB_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option is",
    "The correct option is",
    "Best answer:",
    "Best option:",
)


def _letter_class(letters: str) -> str:
    if not letters or not letters.isalpha() or not letters.isupper():
        raise ValueError(f"letters={letters!r} must be capital option letters, e.g. 'ABCD'")
    return "[" + letters + "]"


def seeded_choice(letters: str, qid: str, seed: int) -> str:
    """The reference parsers' random fallback, made reproducible: the same letter for a question on every run."""
    return random.Random(f"{seed}:{qid}").choice(letters)


def by_form(output: str, letters: str = "ABCD") -> str | None:
    """Video-MME / MLVU: the chosen letter, candidates ranked by form; the last occurrence wins within a form."""
    cls = _letter_class(letters)
    for form in _FORMS:
        found = re.findall(form.replace("{L}", cls), output)
        if found:
            return found[-1]
    return None


def egoschema(output: str, options: dict[str, str], qid: str, seed: int, strict: bool = False) -> str | None:
    """lmms-eval's EgoSchema parser (MMMU-style); ``options`` maps letter -> option text without its "X. " prefix.

    lmms-eval matches long answers against the released option strings, prefix included ("A. text"), so the
    faithful parser does too; ``strict`` matches the bare option text and returns None instead of a random letter.
    """
    letters = "".join(options)
    response = output
    for char in ",.!?;:'":  # lmms-eval strips these one after the other
        response = response.strip(char)
    response = f" {response} "
    candidates = [form.format(x) for form in ("({})", "{} ", "{}.") for x in letters if form.format(x) in response]
    positions = [response.rfind(c) for c in candidates]
    if not candidates and len(response.split()) > 5:
        texts = {x: (t if strict else f"{x}. {t}").lower() for x, t in options.items()}
        candidates = [x for x, t in texts.items() if t and t in response.lower()]
        positions = [response.lower().rfind(texts[x]) for x in candidates]
    if not candidates:
        return None if strict else seeded_choice(letters, qid, seed)
    best = candidates[positions.index(min(positions))]
    return best.strip("(). ")


def first_capital(output: str, letters: str, qid: str, seed: int, strict: bool = False) -> str | None:
    """lmms-eval's LongVideoBench parser: drop answer phrases, then the first capital A-E anywhere.

    Faithful keeps its quirks: the capital may sit inside a word ("Answer: B" gives A), may be a letter the question
    does not have, and an unparseable answer gets a seeded random letter. ``strict`` takes the first standalone valid
    letter and returns None when there is none.
    """
    text = output.strip()
    for prefix in _LVB_PREFIXES:
        text = text.replace(prefix, "")
    if strict:
        found = re.search(rf"(?<![A-Za-z]){_letter_class(letters)}(?![A-Za-z])", text)
        return found.group(0) if found else None
    found = re.search(r"[ABCDE]", text)  # lmms-eval's long-answer check also ends in the random letter
    return found.group(0) if found else seeded_choice(letters, qid, seed)


def first_char(output: str, letters: str) -> str | None:
    """StreamingBench's scorer: the first character of the raw output, when it is an option letter."""
    return output[0] if output and output[0] in letters else None
