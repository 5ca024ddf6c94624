"""Small statistics for evaluation summaries: means over scored values and percentile-bootstrap 95% intervals.

`None` marks a value that could not be scored (a failed generator or judge call); it is left out, never counted
as 0.

>>> mean_ci([1.0, 0.0, None, 1.0, 1.0], n_resamples=200, seed=0)["mean"]
0.75
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def scored(values: Sequence[float | None]) -> list[float]:
    """The values that were scored (drops None and NaN)."""
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and np.isnan(v))]


def bootstrap_ci(
    values: Sequence[float], n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean of `values` (None when there is nothing to resample).

    Resamples `len(values)` items with replacement `n_resamples` times; the interval is the
    ((1 - confidence) / 2, (1 + confidence) / 2) quantiles of the resampled means.
    """
    return stratified_mean_ci([values], n_resamples=n_resamples, seed=seed, confidence=confidence)


def stratified_mean_ci(
    groups: Sequence[Sequence[float]], n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean over `groups` of each group's mean (a leaderboard row's mean over
    datasets: each dataset's questions resampled within the dataset, `len(group)` with replacement, the dataset means
    averaged); None when a group is empty or there is none. One group is `bootstrap_ci` (the same draws).

    >>> lo, hi = stratified_mean_ci([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0]], n_resamples=500)
    >>> lo < (0.75 + 1 / 3) / 2 < hi
    True
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    xs = [np.asarray(g, dtype=np.float64) for g in groups]
    if not xs or any(x.size == 0 for x in xs):
        return None
    rng = np.random.default_rng(seed)
    means = np.zeros(n_resamples)  # (R,)
    for x in xs:
        idx = rng.integers(0, x.size, size=(n_resamples, x.size))  # (R, N_group)
        means += x[idx].mean(axis=1)
    means /= len(xs)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def mean_ci(values: Sequence[float | None], n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """{"mean", "ci95": [lo, hi], "n"} over the scored values; mean and ci95 are None when nothing was scored."""
    xs = scored(values)
    if not xs:
        return {"mean": None, "ci95": None, "n": 0}
    ci = bootstrap_ci(xs, n_resamples=n_resamples, seed=seed)
    return {"mean": float(np.mean(xs)), "ci95": list(ci) if ci else None, "n": len(xs)}


def paired_diff_ci(
    a: dict[str, float | None], b: dict[str, float | None], n_resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Mean of a - b over the questions both scored (paired by question id), with a percentile-bootstrap 95% interval
    that resamples questions: {"diff", "ci95", "n", "a_mean", "b_mean", "wins", "losses"}. A question one side failed
    to score is left out of both (never counted as 0)."""
    ids = sorted(k for k in a.keys() & b.keys() if scored([a[k]]) and scored([b[k]]))
    if not ids:
        return {"diff": None, "ci95": None, "n": 0, "a_mean": None, "b_mean": None, "wins": 0, "losses": 0}
    x = np.asarray([float(a[k]) for k in ids])  # type: ignore[arg-type]
    y = np.asarray([float(b[k]) for k in ids])  # type: ignore[arg-type]
    d = x - y
    ci = bootstrap_ci(d.tolist(), n_resamples=n_resamples, seed=seed)
    return {
        "diff": float(d.mean()), "ci95": list(ci) if ci else None, "n": len(ids),
        "a_mean": float(x.mean()), "b_mean": float(y.mean()),
        "wins": int((d > 0).sum()), "losses": int((d < 0).sum()),
    }


def ratio_ci(
    num: Sequence[float], den: Sequence[float], n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> dict[str, Any]:
    """sum(num) / sum(den) over items (questions) with a percentile-bootstrap interval that resamples the items:
    a rate whose unit is not the item (search turns per question, stops) keeps each question's turns together.
    {"mean", "ci95", "items"}; mean None when sum(den) is 0; resamples whose denominator is 0 are dropped.

    >>> ratio_ci([1, 0, 2], [2, 1, 2], n_resamples=200)["mean"]
    0.6
    """
    if len(num) != len(den):
        raise ValueError(f"ratio_ci: {len(num)} numerators for {len(den)} denominators")
    x = np.asarray(num, dtype=np.float64)
    y = np.asarray(den, dtype=np.float64)
    if x.size == 0 or y.sum() <= 0:
        return {"mean": None, "ci95": None, "items": int(x.size)}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_resamples, x.size))  # (R, N)
    sx, sy = x[idx].sum(axis=1), y[idx].sum(axis=1)  # (R,)
    ok = sy > 0
    ratios = sx[ok] / sy[ok]
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha]) if ratios.size else (np.nan, np.nan)
    return {"mean": float(x.sum() / y.sum()), "ci95": [float(lo), float(hi)], "items": int(x.size)}
