"""The reward landscape's oracle selection (experiments/reward_landscape.py; issue 31's 8:3:3 landscape) on a fake
retriever."""

from __future__ import annotations

from typing import Any

from experiments import reward_landscape as landscape
from s3core.types import Document, QAExample


def _doc(i: str, title: str | None = None, text: str = "") -> Document:
    return Document(id=i, title=title or i, text=text or f"text of {i}")


class FakeRetriever:
    """Ranked lists by query; `get` by id in the order asked. Records the queries it was asked."""

    def __init__(self, ranked: dict[str, list[str]], titles: dict[str, str]) -> None:
        self.ranked = ranked
        self.docs = {i: _doc(i, titles.get(i)) for ids in ranked.values() for i in ids} | {
            i: _doc(i, t) for i, t in titles.items()}
        self.queries: list[str] = []

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        self.queries.extend(queries)
        return [[self.docs[i] for i in self.ranked.get(q, [])[:k]] for q in queries]

    def get(self, ids: list[str]) -> list[Document]:
        return [self.docs[i] for i in ids]


def _q(qid: str, question: str, gold: list[str]) -> QAExample:
    return QAExample(id=qid, question=question, golden_answers=["x"], metadata={"supporting_ids": gold})


def test_oracle_select_prefers_gold_and_falls_back_to_naive() -> None:
    ranked = [_doc(c) for c in "abcdefgh"]
    naive = ranked[:3]
    docs, found = landscape.oracle_select(ranked, ["g", "b"], naive)
    assert found and [d.id for d in docs] == ["g", "b"]  # gold order, not rank order
    docs, found = landscape.oracle_select(ranked, ["y", "z"], naive)
    assert not found and [d.id for d in docs] == ["a", "b", "c"]
    docs, _ = landscape.oracle_select(ranked, ["a", "b", "c", "d"], naive, max_select=3)
    assert [d.id for d in docs] == ["a", "b", "c"]
    assert landscape.missing_gold(ranked[:3], ["c", "z", "c"]) == ["z"]
    assert [d.id for d in landscape.merge_ranked(ranked[:2], [_doc("b"), _doc("q")])] == ["a", "b", "q"]


def test_oracle_contexts_a_b_c_on_a_fake_retriever() -> None:
    top8 = {
        # q1: one gold (g1) at rank 5, the other (h1, titled "Hidden") reachable only by its title
        "q1?": ["a", "b", "c", "d", "g1", "e", "f", "i"],
        "Hidden": ["h1", "z"],
        # q2: both gold in the top-3
        "q2?": ["g2", "h2", "c", "d"],
        # q3: no gold anywhere, the second query finds nothing gold either
        "q3?": ["a", "b", "c"],
        "Lost": ["y"],
    }
    r = FakeRetriever(top8, {"h1": "Hidden", "g1": "Found", "g2": "G2", "h2": "H2", "m3": "Lost", "n3": "Lost2"})
    qs = [_q("1", "q1?", ["g1", "h1"]), _q("2", "q2?", ["g2", "h2"]), _q("3", "q3?", ["m3", "n3"])]
    oc = landscape.oracle_contexts(qs, r, naive_k=3, k=8, max_select=3)
    ids = lambda lists: [[d.id for d in ds] for ds in lists]  # noqa: E731
    assert ids(oc.naive) == [["a", "b", "c"], ["g2", "h2", "c"], ["a", "b", "c"]]
    assert ids(oc.top3) == [["a", "b", "c"], ["g2", "h2"], ["a", "b", "c"]]           # (b)
    assert ids(oc.top8) == [["g1"], ["g2", "h2"], ["a", "b", "c"]]                    # (a)
    assert ids(oc.second) == [["g1", "h1"], ["g2", "h2"], ["a", "b", "c"]]            # (c)
    assert ids(oc.gold) == [["g1", "h1"], ["g2", "h2"], ["m3", "n3"]]
    assert oc.second_query == ["Hidden", None, "Lost"]  # the first missing gold paragraph's title
    assert (oc.gold_in_top3, oc.gold_in_top8, oc.gold_in_second) == ([0, 2, 0], [1, 2, 0], [2, 2, 0])
    assert r.queries[-2:] == ["Hidden", "Lost"]  # one batched second search, only where a gold paragraph is missing


def test_answer_survives_the_budget() -> None:
    text = "The river flows north for 120 km and joins the Lena at Yakutsk"
    assert not landscape.answer_survives(text, ["Yakutsk"], 8)
    assert landscape.answer_survives(text, ["Yakutsk"], 14)
    assert landscape.answer_survives(text, ["the Lena"], 12)  # normalised span (articles dropped)
    assert landscape.answer_survives(text, ["Yakutsk"], 3, count_tokens=lambda s: 0)  # a counter that says it fits


def test_searcher_summary_counts_new_gold() -> None:
    qs = [_q("1", "q1?", ["g1", "h1"]), _q("2", "q2?", ["g2", "h2"])]
    naive = {"1": ["a", "b", "g1"], "2": ["a", "b", "c"]}
    stats = {"replies": 2, "invalid_replies": 1, "search_turns": 1, "by_fallback": 0}
    rows = [
        {"id": "1", "documents": ["g1", "h1"], "error": None, "seconds": 2.0, "stats": stats,
         "steps": [{"turn": 0, "retrieved_ids": ["a", "b", "g1"]}, {"turn": 1, "retrieved_ids": ["h1", "x"]}]},
        {"id": "2", "documents": ["a"], "error": None, "seconds": 4.0, "stats": stats,
         "steps": [{"turn": 0, "retrieved_ids": ["a", "b", "c"]}, {"turn": 1, "retrieved_ids": ["h2"]}]},
    ]
    s = landscape.searcher_summary(rows, [1.0, None], qs, naive)
    assert s["acc"] == 1.0 and s["scored"] == 1
    assert s["new_gold_kept"] == 0.5 and s["new_gold_retrieved"] == 1.0
    assert s["searches_per_question"] == 1.0 and s["invalid_replies"] == 0.5 and s["seconds_per_question"] == 3.0


def test_cached_baseline_rows_count_only_under_an_accepted_key_with_todays_topk() -> None:
    """The rule prepare-training's re-keying and the landscape's read-only load share (training.data)."""
    from training.prep.data import rows_with_todays_topk

    rows: list[dict[str, Any]] = [
        {"id": "a", "key": "k1", "acc": 1.0, "doc_ids": ["d1", "d2"]},   # today's ids: kept
        {"id": "b", "key": "k1", "acc": 0.0, "doc_ids": ["d9", "d2"]},   # other ids: stale
        {"id": "c", "key": "k0", "acc": 1.0, "doc_ids": ["d3"]},         # a key not accepted
        {"id": "d", "key": "k1", "acc": None, "doc_ids": ["d4"]},        # a failed call: missing, not a 0
        {"id": "e", "key": "k1", "acc": 1.0, "doc_ids": ["d5"]},         # not a question of this run
        {"id": "a", "key": "k2", "acc": 0.0, "doc_ids": ["d1", "d2"]},   # a later row of "a": it wins
    ]
    top = {"a": ["d1", "d2"], "b": ["d1", "d2"], "c": ["d3"], "d": ["d4"]}
    kept, stale = rows_with_todays_topk(rows, {"k1", "k2"}, top)
    assert {i: r["acc"] for i, r in kept.items()} == {"a": 0.0}
    assert stale == 1
