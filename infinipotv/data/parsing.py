"""Answer parsers: from a model's raw output to the option letter it chose.

Each benchmark's published numbers come from one specific parser, quirks included; reproducing them means parsing
exactly the same way (``faithful``); for the four lmms-eval tasks that includes what lmms-eval 0.7.3 does to a reply
before its task parser sees it (:func:`lmms_view`). Where that parser has a quirk that mis-reads clear answers,
``strict`` fixes it, and every table says which parser produced it. The rules are in docs/spec ``benchmarks.md``:

- :func:`by_form` -- Video-MME and MLVU: candidates ranked by the form they appear in. ``faithful`` is lmms-eval
  0.7.3's ``extract_mcq_answer`` (its tasks' ``extract_characters_regex``): substring forms without word boundaries,
  a wide list of answer phrases, and a last-resort "any capital letter" fallback. ``strict`` is the spec's rule:
  the same form priority, but a letter must stand alone, and nothing found is None.
- :func:`egoschema` -- lmms-eval's EgoSchema parser: "(X)", "X ", "X.", then option text for long answers, earliest
  match wins, a seeded random letter when nothing matches (``strict``: None).
- :func:`first_capital` -- lmms-eval's LongVideoBench parser: the first capital A-E anywhere after dropping answer
  phrases, so "Answer: B" reads as A (``strict``: a standalone letter); a seeded random letter when nothing matches.
- :func:`first_char` -- StreamingBench's own scorer compares the output's first character with the gold letter.
"""

from __future__ import annotations

import random
import re

# The spec's form priority (``by_form(strict=True)``), highest first; ``{L}`` is the class of the valid letters.
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

# lmms-eval 0.7.3's multiple-choice extraction (Video-MME, MLVU). Forms as (priority, pattern): a candidate is the last
# occurrence of the pattern, with no word boundary ("USA." is an "A." candidate).
_SUBSTRING_FORMS = ((6, "({})"), (5, "{}."), (4, "{}:"), (3, "{})"), (2, "{} "))
_START, _END, _PHRASE, _FALLBACK = 10, 9, 7, 0
_MCQ_STRIP = ",.!?;:'\""  # stripped from both ends first, one character after the other
_MMMU_STRIP = ",.!?;:'"  # the same for the MMMU-style EgoSchema parser (no double quote)
# Answer phrases it recognises, matched in lower case at their first occurrence; every option letter that occurs
# after one (anywhere, even inside a word) is a candidate at that letter's first position there.
_ANSWER_PHRASES = (
    "the answer is",
    "answer is",
    "the correct answer is",
    "correct answer is",
    "the best answer is",
    "best answer is",
    "the correct option is",
    "correct option is",
    "the best option is",
    "best option is",
    "the choice is",
    "choice is",
    "the correct choice is",
    "correct choice is",
    "i choose",
    "i select",
    "i pick",
    "my answer is",
    "my choice is",
    "\uc635\uc158",
    "\uc815\ub2f5\uc740",
    "\ub2f5\uc740",
    "\ub2f5:",  # Korean
    "\u7b54\u6848\u662f",
    "\u7b54\u6848\u4e3a",
    "\u9009",  # Chinese
    "\u7b54\u3048\u306f",  # Japanese
)

# lmms-eval's default --reasoning_tags: blocks removed from every reply before the task parser runs.
_REASONING_TAGS = (("<think>", "</think>"), ("<analysis>", "</analysis>"))

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


def _strip_each(text: str, chars: str) -> str:
    """Strip each character from both ends in turn, as the reference parsers do (not ``str.strip(chars)``: ".,A"
    keeps its comma once the dot has gone)."""
    for char in chars:
        text = text.strip(char)
    return text


def lmms_view(output: str) -> str:
    """The reply as lmms-eval 0.7.3's task parsers get it: each complete reasoning block removed (a reply holding
    only a closing tag keeps what follows its last one), then whitespace stripped."""
    text = output
    for start, end in _REASONING_TAGS:
        while start in text and end in text:
            a = text.find(start)
            b = text.find(end, a)
            if b == -1:
                break
            text = text[:a] + text[b + len(end) :]
        if end in text and start not in text:
            text = text.rsplit(end, 1)[-1]
    return text.strip()


def _lmms_mcq(output: str, letters: str) -> str | None:
    """lmms-eval 0.7.3's ``extract_mcq_answer``: the candidate of the highest form priority, later position first."""
    if not output.strip():
        return None
    text = f" {_strip_each(output.strip(), _MCQ_STRIP)} "
    candidates = [
        (prio, text.rfind(form.format(x)), x)
        for prio, form in _SUBSTRING_FORMS
        for x in letters
        if form.format(x) in text
    ]
    lower = text.lower()
    for phrase in _ANSWER_PHRASES:
        at = lower.find(phrase)
        if at != -1:
            found = ((text.find(x, at + len(phrase)), x) for x in letters)
            candidates += [(_PHRASE, pos, x) for pos, x in found if pos != -1]
    core = text.strip()
    candidates += [(_START, 0, x) for x in letters if core.startswith(x) and (len(core) == 1 or not core[1].isalpha())]
    candidates += [
        (_END, len(text) - 1, x) for x in letters if core.endswith(x) and (len(core) == 1 or not core[-2].isalpha())
    ]
    if not candidates:
        candidates = [(_FALLBACK, text.rfind(x), x) for x in letters if x in text]
    return max(candidates, key=lambda c: c[:2])[2] if candidates else None


def by_form(output: str, letters: str = "ABCD", strict: bool = False) -> str | None:
    """Video-MME / MLVU: the chosen letter, candidates ranked by form; the last occurrence wins within a form.

    ``faithful`` reproduces lmms-eval 0.7.3 (whose task utils call ``extract_mcq_answer``), quirks included: "DATA
    shows" is an "A " candidate, "the answer is B, Dog" also yields a D candidate (and D is later, so it wins), and
    a reply with no form at all falls back to its last capital option letter ("Bees and Cats" reads C). ``strict``
    is the spec's rule: standalone letters only, and None when no form matches.
    """
    cls = _letter_class(letters)
    if not strict:
        return _lmms_mcq(lmms_view(output), letters)
    for form in _FORMS:
        found = re.findall(form.replace("{L}", cls), output)
        if found:
            return found[-1]
    return None


def egoschema(
    output: str, options: dict[str, str], qid: str, seed: int, strict: bool = False, random_fallback: bool = True
) -> str | None:
    """lmms-eval's EgoSchema parser (MMMU-style); ``options`` maps letter -> option text without its "X. " prefix.

    lmms-eval matches long answers against the released option strings, prefix included ("A. text"), so the
    faithful parser does too; ``strict`` matches the bare option text and returns None instead of a random letter.
    ``random_fallback=False`` returns None where the faithful parser would draw (the parity report counts those
    draws: lmms-eval's come from its global random state and cannot be reproduced question by question).
    """
    letters = "".join(options)
    response = f" {_strip_each(output.strip() if strict else lmms_view(output), _MMMU_STRIP)} "
    candidates = [form.format(x) for form in ("({})", "{} ", "{}.") for x in letters if form.format(x) in response]
    positions = [response.rfind(c) for c in candidates]
    if not candidates and len(response.split()) > 5:
        texts = {x: (t if strict else f"{x}. {t}").lower() for x, t in options.items()}
        candidates = [x for x, t in texts.items() if t and t in response.lower()]
        positions = [response.lower().rfind(texts[x]) for x in candidates]
    if not candidates:
        return None if strict or not random_fallback else seeded_choice(letters, qid, seed)
    best = candidates[positions.index(min(positions))]
    return best.strip("(). ")


def first_capital(
    output: str, letters: str, qid: str, seed: int, strict: bool = False, random_fallback: bool = True
) -> str | None:
    """lmms-eval's LongVideoBench parser: drop answer phrases, then the first capital A-E anywhere.

    Faithful keeps its quirks: the capital may sit inside a word ("Answer: B" gives A), may be a letter the question
    does not have, and an unparseable answer gets a seeded random letter (None with ``random_fallback=False``).
    ``strict`` takes the first standalone valid letter and returns None when there is none.
    """
    text = output.strip() if strict else lmms_view(output)
    for prefix in _LVB_PREFIXES:
        text = text.replace(prefix, "")
    if strict:
        found = re.search(rf"(?<![A-Za-z]){_letter_class(letters)}(?![A-Za-z])", text)
        return found.group(0) if found else None
    found = re.search(r"[ABCDE]", text)  # lmms-eval's long-answer check also ends in the random letter
    if found or not random_fallback:
        return found.group(0) if found else None
    return seeded_choice(letters, qid, seed)


def first_char(output: str, letters: str) -> str | None:
    """StreamingBench's scorer: the first character of the raw output, when it is an option letter."""
    return output[0] if output and output[0] in letters else None
