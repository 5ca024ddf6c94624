"""The reading searcher's ranker, fitted: a logistic regression over each candidate's `ranker_rows` features
(searcher/title_following/links.py: the reader's score, the log of its rank, the names that link it to what was found)
of whether the candidate helps, written as a ranker file `LinkRanker.load` reads; and the stop, chosen on held-out
questions: how many pages to add and the ranker score below which none is added.

    weights = fit_ranker(rows, labels)                          # {"reader": ..., "log_rank": ..., "bias": ...}
    pages, min_score = choose_stop(heldout_scores, heldout_gains)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from searcher.title_following.links import RANKER_FEATURES

__all__ = ["choose_stop", "fit_ranker"]


def fit_ranker(rows: Sequence[Mapping[str, float]], gold: Sequence[bool], features: Sequence[str] = RANKER_FEATURES,
               ) -> dict[str, float]:
    """A logistic regression (scikit-learn, standardised features, L2 with C = 1) of whether a candidate is gold on
    `features` of its `ranker_rows`, fitted on training questions' candidates; returned as one weight a raw feature
    and a "bias", so that `ranker_score` is a plain sum a person can read (and the score is comparable across
    questions: a log-odds).

    >>> rows = [{"a": float(i % 2), "b": float(i % 3)} for i in range(60)]
    >>> w = fit_ranker(rows, [r["a"] > 0 for r in rows], ["a", "b"])
    >>> sorted(w), w["a"] > 1 > abs(w["b"])
    (['a', 'b', 'bias'], True)
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x = np.array([[r[f] for f in features] for r in rows], dtype=float)
    y = np.array(gold, dtype=bool)
    if len(set(y.tolist())) < 2:
        raise ValueError(f"fit_ranker needs gold and non-gold candidates, got {int(y.sum())} gold of {len(y)}")
    scaler = StandardScaler().fit(x)
    lr = LogisticRegression(C=1.0, max_iter=1000).fit(scaler.transform(x), y)
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    w = lr.coef_[0] / scale
    bias = float(lr.intercept_[0] - (w * scaler.mean_).sum())
    return {**{f: round(float(v), 4) for f, v in zip(features, w, strict=True)}, "bias": round(bias, 4)}


def choose_stop(scores: Sequence[Sequence[float]], gains: Sequence[Sequence[float]], *, max_pages: int = 2
                ) -> tuple[int, float | None, dict[str, float]]:
    """(pages, min_score, the mean credit of each choice tried) that add the most credit on held-out questions: for
    each question the ranker's `scores` of its candidates and their `gains` (the generator's credit); a choice adds the
    best-scored `pages` candidates scoring at least `min_score`, and is worth the sum of their gains (credit of two
    pages taken as additive: a choice's rough worth, not an exact one). 0 pages is worth 0: a page is added only where
    the held-out credit says it helps on average.

    >>> choose_stop([[2.0, -1.0], [1.5, -3.0]], [[1.0, -2.0], [0.5, -1.0]])[:2]
    (1, None)
    >>> choose_stop([[2.0], [1.5]], [[-1.0], [-0.5]])[:2]
    (0, None)
    """
    tried: dict[str, float] = {"pages=0": 0.0}
    best: tuple[float, int, float | None] = (0.0, 0, None)
    cuts: list[float | None] = [None, *sorted({round(s, 3) for row in scores for s in row})]
    n = max(len(scores), 1)
    for pages in range(1, max_pages + 1):
        for cut in cuts:
            total = 0.0
            for sc, gn in zip(scores, gains, strict=True):
                order = sorted(range(len(sc)), key=lambda i: (-sc[i], i))[:pages]
                total += sum(gn[i] for i in order if cut is None or sc[i] >= cut)
            worth = total / n
            if cut is None:
                tried[f"pages={pages}"] = round(worth, 4)
            if worth > best[0] + 1e-9:
                best = (worth, pages, cut)
    tried["chosen"] = round(best[0], 4)
    return best[1], best[2], tried
