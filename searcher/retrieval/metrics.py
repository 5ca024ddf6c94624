"""Support recall: how much of a question's gold supporting paragraphs (`metadata.supporting_ids`) a context holds.

- `support_recall(context_ids, supporting)`: THE definition, for one question and one context (a searcher's D_s3,
  naive RAG's D_RAG, any list of document ids): the fraction of the gold paragraphs found, None without gold ids.
  The eval harness records it per question.
- `recall_at_k(ranked_ids, gold_ids, ks)`: a ranking's top k at each k, over the questions that have gold ids: the
  share of questions with any gold paragraph in the top k, with all of them, and the mean support recall of the top k
  (`s3 retrieve --questions`). Questions without gold ids are left out (and counted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_KS = (1, 3, 5, 10)


def support_recall(context_ids: Iterable[str], supporting: Iterable[str]) -> float | None:
    """Fraction of the gold supporting paragraphs that are in the context (None without gold ids).

    >>> support_recall(["a", "b", "c"], ["b", "d"])
    0.5
    >>> support_recall(["a"], []) is None
    True
    """
    gold = set(supporting)
    if not gold:
        return None
    return len(gold.intersection(context_ids)) / len(gold)


@dataclass(frozen=True)
class RecallAtK:
    """A ranking's top k against the gold paragraphs, over `questions` questions with gold ids."""

    k: int
    any_gold: float
    all_gold: float
    mean_recall: float
    questions: int


def recall_at_k(
    ranked_ids: Sequence[Sequence[str]],
    gold_ids: Sequence[Sequence[str]],
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[int, RecallAtK]:
    """Support recall of each ranking's top k, at each k, over the questions that have gold ids; {} when none has.

    >>> r = recall_at_k([["a", "x", "b"], ["y", "z", "c"]], [["a", "b"], ["c"]], ks=(1, 3))
    >>> (r[1].any_gold, r[1].all_gold, r[1].mean_recall)
    (0.5, 0.0, 0.25)
    >>> (r[3].any_gold, r[3].all_gold, r[3].mean_recall)
    (1.0, 1.0, 1.0)
    """
    if len(ranked_ids) != len(gold_ids):
        raise ValueError(f"{len(ranked_ids)} rankings for {len(gold_ids)} gold lists")
    if any(k <= 0 for k in ks):
        raise ValueError(f"every k must be positive, got {list(ks)}")
    pairs = [(ranked, gold) for ranked, gold in zip(ranked_ids, gold_ids, strict=True) if gold]
    n = len(pairs)
    if n == 0:
        return {}
    out: dict[int, RecallAtK] = {}
    for k in ks:
        recalls = [support_recall(ranked[:k], gold) or 0.0 for ranked, gold in pairs]  # never None: gold is not empty
        out[k] = RecallAtK(
            k=k,
            any_gold=sum(r > 0 for r in recalls) / n,
            all_gold=sum(r == 1.0 for r in recalls) / n,
            mean_recall=sum(recalls) / n,
            questions=n,
        )
    return out


def supporting_ids_in_index(retriever: object, gold: Iterable[Iterable[str]]) -> tuple[int, int] | None:
    """(how many of the gold supporting ids the index holds, how many there are), or None when the retriever cannot
    say (no local doc store) or there are no gold ids. 0 held = an index built from another corpus: support recall
    would be 0 whatever the method does."""
    known = getattr(getattr(retriever, "store", None), "row_of", None)
    ids = [i for g in gold for i in g]
    if known is None or not ids:
        return None
    return sum(1 for i in ids if i in known), len(ids)
