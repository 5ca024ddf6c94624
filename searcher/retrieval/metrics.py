"""Support recall of rankings against gold supporting-paragraph ids (`metadata.supporting_ids`).

For each k: the share of questions with any gold paragraph in the top k, with all gold paragraphs in the top k,
and the mean fraction of gold paragraphs found. Questions without gold ids are left out (and counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_KS = (1, 3, 5, 10)


@dataclass(frozen=True)
class SupportRecall:
    k: int
    any_gold: float
    all_gold: float
    mean_recall: float
    questions: int


def support_recall(
    ranked_ids: Sequence[Sequence[str]],
    gold_ids: Sequence[Sequence[str]],
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[int, SupportRecall]:
    """Recall at each k over the questions that have gold ids; {} when none has.

    >>> r = support_recall([["a", "x", "b"], ["y", "z", "c"]], [["a", "b"], ["c"]], ks=(1, 3))
    >>> (r[1].any_gold, r[1].all_gold, r[1].mean_recall)
    (0.5, 0.0, 0.25)
    >>> (r[3].any_gold, r[3].all_gold, r[3].mean_recall)
    (1.0, 1.0, 1.0)
    """
    if len(ranked_ids) != len(gold_ids):
        raise ValueError(f"{len(ranked_ids)} rankings for {len(gold_ids)} gold lists")
    if any(k <= 0 for k in ks):
        raise ValueError(f"every k must be positive, got {list(ks)}")
    pairs = [(list(r), set(g)) for r, g in zip(ranked_ids, gold_ids, strict=True) if g]
    n = len(pairs)
    if n == 0:
        return {}
    out: dict[int, SupportRecall] = {}
    for k in ks:
        anyg = allg = 0
        frac = 0.0
        for ranked, gold in pairs:
            found = len(gold.intersection(ranked[:k]))
            anyg += found > 0
            allg += found == len(gold)
            frac += found / len(gold)
        out[k] = SupportRecall(k=k, any_gold=anyg / n, all_gold=allg / n, mean_recall=frac / n, questions=n)
    return out
