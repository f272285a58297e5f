"""The benchmarks' own scorers, seen from the aggregator: re-scoring, flat score paths, per-question weights.

Tables name a score by a dotted path into ``metrics.json``'s ``scores`` (Video-MME ``S``/``M``/``L``/``Avg``,
MLVU ``groups.holistic``, ``tasks.needle``, ``avg``, any ``breakdown.FIELD.VALUE``). Every such score is a mean of
per-question correctness, micro (a category's accuracy) or macro (MLVU's task means), so for a fixed question set it
is linear in the ``correct`` flags.
:func:`score_weights` recovers each question's weight by asking the benchmark's scorer itself, which keeps the
breakdown rules in one place (the benchmark module) while the statistics and the per-cell question counts stay exact.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from infinipotv.config import ConfigError
from infinipotv.data.loading import benchmark_class
from infinipotv.data.rescore import benchmark_config
from infinipotv.data.scoring import is_correct

SKIPPED_KEYS = frozenset({"n", "n_errors", "missing", "counts"})  # counts and lists, not scores
STRUCTURE_KEYS = ("benchmark", "question_id", "video_id", "categories", "gold")  # what a question is, not its answer


class ScorerError(RuntimeError):
    """A benchmark scorer that is missing or does not behave as a mean of per-question correctness."""


def has_scorer(name: str | None) -> bool:
    """Whether a scorer for benchmark ``name`` is registered."""
    try:
        benchmark_class(str(name))
    except ConfigError:
        return False
    return True


def score_records(benchmark: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Scores of ``records`` by the benchmark's own scorer; ``benchmark`` is the run's ``benchmark`` config block."""
    try:
        cls = benchmark_class(str(benchmark.get("name")))
    except ConfigError as err:
        raise ScorerError(f"cannot re-score: {err}") from err
    return cls(benchmark_config({**benchmark, "shard": None})).score([dict(r) for r in records])


def flatten_scores(scores: Mapping[str, Any], prefix: str = "") -> dict[str, float | None]:
    """``{"duration": {"short": 74.6}}`` -> ``{"duration.short": 74.6}``; None (a missing task) is kept as None."""
    flat: dict[str, float | None] = {}
    for key, value in scores.items():
        if key in SKIPPED_KEYS:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_scores(value, f"{path}."))
        elif value is None:
            flat[path] = None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[path] = None if math.isnan(value) else float(value)
    return flat


def implausible_scores(scores: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Each score path whose value no accuracy can be (not a number, NaN, outside [0, 100]) and that value as
    metrics.json writes it; None (a task with no questions) and the counts are fine."""
    bad: dict[str, str] = {}
    for key, value in scores.items():
        if key in SKIPPED_KEYS or value is None:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            bad.update(implausible_scores(value, f"{path}."))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
            bad[path] = json.dumps(value)  # NaN fails 0 <= value too
    return bad


def contradicted_scores(scores: Mapping[str, Any], fresh: Mapping[str, Any]) -> dict[str, tuple[float, float | None]]:
    """Each score path where ``scores`` (metrics.json's) holds a number that ``fresh`` (scored from the run's
    predictions) does not give, with both: a hand-edited or stale metrics.json, whose cell would stand beside a
    paired difference counted from other answers."""
    mine, theirs = flatten_scores(scores), flatten_scores(fresh)
    return {
        path: (value, theirs.get(path))
        for path, value in mine.items()
        if value is not None and (theirs.get(path) is None or not math.isclose(value, theirs[path], abs_tol=1e-6))
    }


def replace_scores(scores: Mapping[str, Any], paths: set[str], other: Mapping[str, Any], prefix: str = "") -> dict:
    """``scores`` with the value at every dotted path in ``paths`` taken from ``other`` (left out where ``other``
    has none)."""
    out: dict[str, Any] = {}
    for key, value in scores.items():
        path = f"{prefix}{key}"
        if path in paths:
            if key in other:
                out[key] = other[key]
        elif isinstance(value, Mapping) and any(p.startswith(f"{path}.") for p in paths):
            out[key] = replace_scores(value, paths, other.get(key) or {}, f"{path}.")
        else:
            out[key] = value
    return out


def _with_correct(record: Mapping[str, Any], correct: bool) -> dict[str, Any]:
    """A copy of ``record`` answered right (parsed = gold) or wrong (nothing parsed), without error."""
    return {**record, "correct": correct, "parsed": record.get("gold") if correct else None, "error": None}


def _groupings(records: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
    """Candidate partitions of the questions, coarse to fine: all in one, each category field alone (fewest values
    first), then the full category tuple (always enough for a mean-based scorer, but the most probes)."""

    def labels(key: Callable[[Mapping[str, Any]], Any]) -> np.ndarray:
        return np.array([json.dumps(key(r.get("categories") or {}), sort_keys=True) for r in records])

    fields = sorted({f for r in records for f in (r.get("categories") or {})})
    by_field = sorted((labels(lambda c, f=f: c.get(f)) for f in fields), key=lambda a: len(np.unique(a)))
    return [np.zeros(len(records), dtype="<U1"), *by_field, labels(lambda c: c)]


@functools.lru_cache(maxsize=64)
def _probe(benchmark_json: str, template: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Base scores (all wrong) and per-question weights for a question set. They depend on the questions only, not on
    the answers: every run of one benchmark selection shares them, so a sweep probes the scorer once per benchmark.

    For each score path, the coarsest partition whose groups explain it is found by probing the scorer with one group
    right at a time; the weights are accepted only if they predict two random answer patterns exactly.
    """
    benchmark = json.loads(benchmark_json)
    records = [json.loads(t) for t in template]

    def score(correct: np.ndarray) -> dict[str, float | None]:
        return flatten_scores(score_records(benchmark, [_with_correct(r, bool(c)) for r, c in zip(records, correct)]))

    n = len(records)
    base = score(np.zeros(n, dtype=bool))
    rng = np.random.default_rng(0)
    checks = [(c, score(c)) for c in (rng.random(n) < 0.5 for _ in range(2))]
    weights: dict[str, np.ndarray] = {}
    for labels in _groupings(records):
        todo = [p for p, v in base.items() if v is not None and p not in weights]
        if not todo:
            break
        candidate = {p: np.zeros(n) for p in todo}
        for value in np.unique(labels):
            group = labels == value
            probed = score(group)
            for p in todo:
                if probed.get(p) is not None:
                    candidate[p][group] = (probed[p] - base[p]) / group.sum()
        for p in todo:
            predicted = [(s.get(p), base[p] + candidate[p] @ c) for c, s in checks]
            if all(got is not None and math.isclose(got, want, abs_tol=1e-6) for got, want in predicted):
                weights[p] = candidate[p]
    return base, weights


def score_weights(benchmark: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Each question's weight (points) in every score path: ``score = base + sum(weight * correct)``.

    A path whose real score the weights do not reproduce is not a mean of correctness (or has no questions: a missing
    task) and is left out.
    """
    template = tuple(json.dumps({k: r.get(k) for k in STRUCTURE_KEYS}, sort_keys=True, default=str) for r in records)
    base, weights = _probe(json.dumps(dict(benchmark), sort_keys=True, default=str), template)
    actual = flatten_scores(score_records(benchmark, records))
    correct = np.array([is_correct(dict(r)) for r in records], dtype=float)
    return {
        path: w.copy()
        for path, w in weights.items()
        if actual.get(path) is not None and math.isclose(actual[path], base[path] + w @ correct, abs_tol=1e-6)
    }
