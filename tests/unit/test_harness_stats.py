"""Bootstrap intervals (eval/stats.py): checked against the normal approximation and on degenerate inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval.stats import bootstrap_ci, mean_ci, scored


def test_bootstrap_matches_normal_approximation_on_bernoulli() -> None:
    rng = np.random.default_rng(1)
    x = (rng.random(400) < 0.3).astype(float)
    p = x.mean()
    half = 1.96 * math.sqrt(p * (1 - p) / len(x))
    lo, hi = bootstrap_ci(x.tolist(), n_resamples=4000, seed=0)
    assert lo == pytest.approx(p - half, abs=0.01)
    assert hi == pytest.approx(p + half, abs=0.01)


def test_bootstrap_deterministic_degenerate_and_shrinking() -> None:
    assert bootstrap_ci([1.0] * 10) == (1.0, 1.0)
    assert bootstrap_ci([]) is None
    a = bootstrap_ci([0.0, 1.0] * 10, seed=3)
    assert a == bootstrap_ci([0.0, 1.0] * 10, seed=3)
    small = bootstrap_ci([0.0, 1.0] * 10, seed=0)
    big = bootstrap_ci([0.0, 1.0] * 500, seed=0)
    assert small is not None and big is not None
    assert (big[1] - big[0]) < (small[1] - small[0])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0], confidence=1.5)


def test_mean_ci_leaves_out_missing_values() -> None:
    assert scored([1.0, None, 0.0, float("nan")]) == [1.0, 0.0]
    m = mean_ci([1.0, None, 0.0, None], n_resamples=200)
    assert m["mean"] == 0.5 and m["n"] == 2
    assert mean_ci([None, None]) == {"mean": None, "ci95": None, "n": 0}


def test_verdict_says_when_a_run_should_not_exit_zero() -> None:
    from eval.summary import verdict

    ok = {"n_scored": 95, "n_failed": 5, "n_missing": 0, "failed_by_kind": {"ServerError": 5}}
    assert verdict(ok, 0.1) is None
    bad = {"n_scored": 80, "n_failed": 20, "n_missing": 0, "failed_by_kind": {"ServerError": 15, "AuthError": 5}}
    msg = verdict(bad, 0.1)
    assert msg is not None and msg.startswith("20 of 100 rows failed (ServerError 15, AuthError 5), more than")
    none = {"n_scored": 0, "n_failed": 3, "n_missing": 0, "failed_by_kind": {"AuthError": 3}}
    assert (verdict(none, 1.0) or "").startswith("nothing was scored: 3 of 3 rows failed (AuthError 3)")


def test_paired_difference_pairs_by_question_and_leaves_unscored_questions_out() -> None:
    from eval.stats import paired_diff_ci

    a = {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": None, "q5": 1.0}
    b = {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 1.0, "q6": 0.0}
    r = paired_diff_ci(a, b, n_resamples=500)
    assert r["n"] == 3 and r["diff"] == pytest.approx(1 / 3)  # q1, q2, q3; q4 failed on one side, q5/q6 unpaired
    assert (r["a_mean"], r["b_mean"], r["wins"], r["losses"]) == (pytest.approx(2 / 3), pytest.approx(1 / 3), 1, 0)
    lo, hi = r["ci95"]
    assert 0.0 <= lo <= r["diff"] <= hi <= 1.0
    assert paired_diff_ci({"q": None}, {"q": 1.0})["n"] == 0


@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.sampled_from([0.0, 1.0])), min_size=1, max_size=40))
def test_paired_difference_is_the_difference_of_the_paired_means(pairs: list[tuple[float, float]]) -> None:
    from eval.stats import paired_diff_ci

    a = {f"q{i}": x for i, (x, _) in enumerate(pairs)}
    b = {f"q{i}": y for i, (_, y) in enumerate(pairs)}
    r = paired_diff_ci(a, b, n_resamples=50)
    assert r["diff"] == pytest.approx(r["a_mean"] - r["b_mean"])
    assert r["wins"] + r["losses"] <= r["n"] == len(pairs)
    assert r["ci95"][0] <= r["ci95"][1]
