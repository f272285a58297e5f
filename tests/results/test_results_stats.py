"""Paired statistics against direct computations: exact McNemar, bootstrap CI, and the paired difference itself."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from infinipotv.data.scoring import is_correct
from infinipotv.results import bootstrap_ci, mcnemar_exact, paired_differences
from infinipotv.results.scoring import score_weights
from infinipotv.results.stats import score_ci


@pytest.mark.parametrize(("better", "worse"), [(2, 8), (8, 2), (0, 5), (3, 3), (1, 9), (0, 0)])
def test_mcnemar_matches_enumeration_of_sign_patterns(better, worse):
    """Under H0 each discordant pair is a fair coin: p = share of the 2^n patterns at least as unbalanced."""
    n = better + worse
    observed = abs(better - n / 2)
    patterns = list(itertools.product((0, 1), repeat=n))
    direct = sum(abs(sum(p) - n / 2) >= observed for p in patterns) / len(patterns)
    assert mcnemar_exact(better, worse) == pytest.approx(direct, abs=1e-12)
    assert mcnemar_exact(2, 8) == pytest.approx(0.109375)


def direct_bootstrap(delta: np.ndarray, weights: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Resample question indices with replacement within each equal-weight stratum, the textbook way."""
    rng = np.random.default_rng(seed)
    totals = np.zeros(n_boot)
    for w in np.unique(weights[weights != 0]):
        members = np.flatnonzero(weights == w)
        picks = rng.integers(0, len(members), size=(n_boot, len(members)))
        totals += w * delta[members][picks].sum(axis=1)
    return np.quantile(totals, [0.025, 0.975])


@pytest.mark.parametrize("macro", [False, True])
def test_bootstrap_ci_matches_direct_resampling(macro):
    rng = np.random.default_rng(1)
    delta = rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.55, 0.25], size=200)
    sizes = (120, 80) if macro else (200,)
    weights = np.concatenate([np.full(n, 100 / (len(sizes) * n)) for n in sizes])  # a macro mean over 2 "tasks"
    low, high = bootstrap_ci(delta, weights, n_boot=20_000, seed=0)
    direct = direct_bootstrap(delta, weights, 20_000, seed=7)
    step = weights.max()  # one question flipping: the bootstrap distribution's grid
    assert low == pytest.approx(direct[0], abs=1.5 * step) and high == pytest.approx(direct[1], abs=1.5 * step)
    assert low < weights @ delta < high
    assert bootstrap_ci(delta, weights, 2000, seed=3) == bootstrap_ci(delta, weights, 2000, seed=3)
    assert bootstrap_ci(delta, weights, 2000, seed=3) != bootstrap_ci(delta, weights, 2000, seed=4)


def test_paired_difference_equals_the_table_difference(runs):
    mlvu = {r.fields["kv"]: r for r in runs if r.fields["benchmark"] == "mlvu" and r.fields["budget_tokens"] == 6000}
    paths = ["avg", "groups.holistic", "tasks.ego"]
    stats = paired_differences(mlvu["int4"], mlvu["fp16"], paths, n_boot=2000)
    for path in paths:
        keys = path.split(".")
        shown = [r.scores for r in (mlvu["int4"], mlvu["fp16"])]
        for key in keys:
            shown = [s[key] for s in shown]
        assert stats[path].diff == pytest.approx(shown[0] - shown[1], abs=1e-9)
        assert stats[path].ci_low <= stats[path].diff <= stats[path].ci_high
    base = {r["question_id"]: is_correct(r) for r in mlvu["fp16"].predictions}
    ego = [r for r in mlvu["int4"].predictions if r["categories"]["task_type"] == "ego"]
    better = sum(is_correct(r) and not base[r["question_id"]] for r in ego)
    worse = sum(base[r["question_id"]] and not is_correct(r) for r in ego)
    ego_stat = stats["tasks.ego"]
    assert (ego_stat.n_paired, ego_stat.n_better, ego_stat.n_worse) == (346, better, worse)
    assert better == worse and stats["tasks.ego"].p_value == 1.0  # 63.9 vs 63.9


def test_score_weights_reproduce_scores_and_counts(runs):
    run = next(r for r in runs if r.fields["benchmark"] == "mlvu" and r.fields["policy"] == "full")
    weights = score_weights(run.config["benchmark"], run.predictions)
    correct = np.array([is_correct(r) for r in run.predictions], dtype=float)
    assert weights["avg"] @ correct == pytest.approx(run.scores["avg"])
    assert weights["groups.multi_detail"] @ correct == pytest.approx(run.scores["groups"]["multi_detail"])
    assert run.question_counts["groups.multi_detail"] == 225 + 197
    assert weights["avg"].sum() == pytest.approx(100.0)


def test_a_runs_own_ci_holds_its_score_and_narrows_with_questions(runs):
    run = next(r for r in runs if r.fields["benchmark"] == "mlvu" and r.fields["policy"] == "full")
    ci = score_ci(run, ["avg", "tasks.ego", "no.such.path"], n_boot=2000)
    assert set(ci) == {"avg", "tasks.ego"}
    assert ci["avg"][0] <= run.scores["avg"] <= ci["avg"][1]
    assert ci["tasks.ego"][0] <= run.scores["tasks"]["ego"] <= ci["tasks.ego"][1]
    # the whole benchmark (thousands of questions) is known more precisely than one task (346 of them)
    assert ci["avg"][1] - ci["avg"][0] < ci["tasks.ego"][1] - ci["tasks.ego"][0]
