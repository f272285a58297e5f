"""Paired statistics of one row against a baseline row, on the questions both answered.

Two runs scored on the same questions are paired: what matters is how often one is right where the other is wrong.
The difference of any table score (micro or macro mean) is a weighted sum of per-question differences
(:func:`infinipotv.results.scoring.score_weights`); its 95% CI comes from a stratified bootstrap over questions
(strata = questions of equal weight, e.g. one MLVU task, so a macro mean keeps its task sizes), and the exact McNemar
test asks whether the discordant pairs split evenly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from infinipotv.data.scoring import is_correct
from infinipotv.results.collect import Run
from infinipotv.results.scoring import score_weights

N_BOOT = 10_000
SEED = 0


@dataclass(frozen=True)
class PairedStat:
    """``diff`` = row - baseline (points) with its bootstrap CI; ``n_better``/``n_worse`` = discordant pairs."""

    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n_paired: int
    n_better: int
    n_worse: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mcnemar_exact(n_better: int, n_worse: int) -> float:
    """Two-sided exact McNemar p-value: a binomial(b + c, 1/2) test on the discordant pairs."""
    if n_better < 0 or n_worse < 0:
        raise ValueError(f"discordant counts must be >= 0, got {n_better} and {n_worse}")
    n = n_better + n_worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(n_better, n_worse) + 1))
    return min(1.0, 2 * tail / 2**n)


def bootstrap_ci(
    delta: np.ndarray, weights: np.ndarray, n_boot: int = N_BOOT, seed: int = SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile CI of ``sum(weights * delta)`` resampling questions with replacement within equal-weight strata.

    Resampling m questions of a stratum only changes how many of each ``delta`` value it holds, so each stratum is one
    multinomial draw per replicate: exact, and O(n_boot) instead of O(n_boot x questions).
    """
    if delta.shape != weights.shape:
        raise ValueError(f"delta {delta.shape} and weights {weights.shape} must have the same shape")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    totals = np.zeros(n_boot)
    keep = weights != 0
    strata_w = np.round(weights[keep], 12)
    for w in np.unique(strata_w):
        values, counts = np.unique(delta[keep][strata_w == w], return_counts=True)
        m = counts.sum()
        draws = rng.multinomial(m, counts / m, size=n_boot)
        totals += w * (draws @ values)
    alpha = (1 - level) / 2
    low, high = np.quantile(totals, [alpha, 1 - alpha])
    return float(low), float(high)


def paired_differences(
    run: Run, baseline: Run, paths: Sequence[str], n_boot: int = N_BOOT, seed: int = SEED
) -> dict[str, PairedStat | None]:
    """``run`` - ``baseline`` on each score path, over the question ids both answered (None: no such questions)."""
    base_by_id = {str(r["question_id"]): r for r in baseline.predictions}
    pairs = [(base_by_id[str(r["question_id"])], r) for r in run.predictions if str(r["question_id"]) in base_by_id]
    if not pairs:
        return dict.fromkeys(paths)
    all_weights = score_weights(baseline.config["benchmark"], [b for b, _ in pairs])
    base_ok = np.array([is_correct(b) for b, _ in pairs])
    run_ok = np.array([is_correct(r) for _, r in pairs])
    delta = run_ok.astype(float) - base_ok
    out: dict[str, PairedStat | None] = {}
    for path in paths:
        weights = all_weights.get(path)
        if weights is None or not weights.any():
            out[path] = None
            continue
        counted = weights != 0
        better = int((run_ok & ~base_ok & counted).sum())
        worse = int((~run_ok & base_ok & counted).sum())
        low, high = bootstrap_ci(delta, weights, n_boot, seed)
        out[path] = PairedStat(
            float(weights @ delta), low, high, mcnemar_exact(better, worse), int(counted.sum()), better, worse
        )
    return out


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two rankings of the same items (ties corrected): +1 the same order, -1 reversed, 0 no
    agreement; None for fewer than two items or a ranking that ties everything."""
    if len(x) != len(y):
        raise ValueError(f"two rankings of the same items, got {len(x)} and {len(y)} values")
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else None


def score_ci(run: Run, paths: Sequence[str], n_boot: int = N_BOOT, seed: int = SEED) -> dict[str, tuple[float, float]]:
    """A run's own 95% CI on each score path (points): the same stratified bootstrap over its questions."""
    weights_by_path = score_weights(run.config["benchmark"], run.predictions)
    correct = np.array([is_correct(r) for r in run.predictions], dtype=float)
    out: dict[str, tuple[float, float]] = {}
    for path in paths:
        weights = weights_by_path.get(path)
        if weights is not None and weights.any():
            out[path] = bootstrap_ci(correct, weights, n_boot, seed)
    return out
