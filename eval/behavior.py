"""What a searcher does, question by question and turn by turn: one implementation for `s3 analyze` (eval runs) and
the trainer's `search/` rows in metrics.jsonl. Pure functions over trajectories; no model, retriever or file here.

A trajectory is a `Trace`: its steps (turn 0 = begin-with-search on the question, turns >= 1 = the policy's queries)
and the documents of D_s3 with the turn that admitted each. Built from a contexts.jsonl row (`Trace.from_row`) or a
live `SearchResult` (`Trace.from_result`).

Per question (`question_behavior`), against the gold supporting paragraphs:

    recall_after[t]     support recall of D_s3 after turn t (the documents admitted at turns <= t)
    redundant turn      a search turn t >= 1 issued when D_s3 after t - 1 already held every gold paragraph, or when
                        the generator already answered correctly from D_s3 after t - 1 (`genacc_after`, when known)
    premature stop      the policy stopped (search_complete) before its turn budget with support missing, and another
                        turn would have found a missing gold paragraph (`probe_ids`: what that turn would retrieve)
    selection           precision = gold share of D_s3; recall = gold in D_s3 / gold the searcher was shown
    query drift         `query_overlap`: share of a query's content words that are in the question (1.0 = a copy)

`summarize` turns a list of them into run-level rates with percentile-bootstrap intervals over questions
(eval/stats.py); `training_row` into the trainer's flat `search/...` floats.

>>> tr = Trace.from_row({"id": "q", "question": "Who wrote Dune?", "turns": 1,
...     "documents": [{"id": "a", "turn": 0}, {"id": "b", "turn": 1}],
...     "steps": [{"turn": 0, "query": "Who wrote Dune?", "retrieved_ids": ["a", "x"], "selected_ids": ["a"]},
...               {"turn": 1, "query": "Dune author", "retrieved_ids": ["b"], "selected_ids": ["b"],
...                "search_complete": True}]})
>>> b = question_behavior(tr, {"a"}, max_turns=3)
>>> b.recall_after, b.search_turns, b.redundant, b.stopped
([1.0, 1.0], 1, 1, True)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eval.stats import mean_ci, ratio_ci

if TYPE_CHECKING:
    from s3core.types import SearchResult

__all__ = ["QuestionBehavior", "Trace", "Turn", "bridge_query", "needs_probe", "query_overlap", "question_behavior", "rollout_row",
           "summarize", "training_row"]

_STOP = frozenset(
    ["a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "but", "is", "are", "was", "were", "be", "been", "being", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "that", "this", "these", "those", "it", "its", "as", "did", "does", "do", "has", "have", "had", "not", "no", "than", "then", "there", "their", "they", "he", "she", "his", "her", "him", "i", "you", "we", "our", "your", "my", "me", "us", "also", "into", "about", "after", "before", "during", "over", "under", "between", "both", "same", "one"]
)
_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    """Lower-cased alphanumeric words of `text`, stop words left out.

    >>> sorted(content_words("Who is the director of Big Stone Gap?"))
    ['big', 'director', 'gap', 'stone']
    """
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def query_overlap(query: str, question: str) -> float | None:
    """Share of the query's content words that appear in the question: 1.0 = the query only restates the question,
    low = the searcher moved to new terms (a bridge entity, or drift). None for a query with no content words.

    >>> query_overlap("Big Stone Gap director", "Who directed Big Stone Gap?")
    0.75
    """
    q = content_words(query)
    return len(q & content_words(question)) / len(q) if q else None


@dataclass
class Turn:
    """One step of a trajectory, in the contexts.jsonl shape (s3core.types.SearchStep's fields that matter here)."""

    turn: int
    query: str | None
    retrieved: list[str] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    stop: bool | None = None
    invalid: str | None = None


@dataclass
class Trace:
    """A searcher's trajectory for one question: its steps and D_s3 as (document id, the turn that admitted it)."""

    qid: str
    question: str
    turns: list[Turn]
    documents: list[tuple[str, int]]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trace:
        """From a contexts.jsonl row (eval/contexts.py `contexts_row`)."""
        steps = [Turn(turn=int(s.get("turn", 0)), query=s.get("query"), retrieved=list(s.get("retrieved_ids") or []),
                      selected=list(s.get("selected_ids") or []), stop=s.get("search_complete"),
                      invalid=s.get("invalid_reason"))
                 for s in row.get("steps") or []]
        docs = row.get("documents") or []
        if docs and all("turn" in d and d["turn"] is not None for d in docs):
            documents = [(str(d["id"]), int(d["turn"])) for d in docs]
        else:  # an older row without turns: D_s3 grows by each step's selection
            documents = _from_selections(steps)
        return cls(qid=str(row.get("id")), question=str(row.get("question") or ""), turns=steps, documents=documents)

    @classmethod
    def from_result(cls, result: SearchResult, qid: str = "") -> Trace:
        """From a live SearchResult (training rollouts)."""
        steps = [Turn(turn=s.turn, query=s.query, retrieved=list(s.retrieved_ids), selected=list(s.selected_ids),
                      stop=s.search_complete, invalid=s.invalid_reason) for s in result.steps]
        from searcher.service import document_turns  # the turn each document of D_s3 was admitted (one rule)

        turns = document_turns(result)
        documents = [(d.id, turns.get(d.id, 0)) for d in result.documents]
        return cls(qid=qid, question=result.question, turns=steps, documents=documents)

    @property
    def last_turn(self) -> int:
        return max((s.turn for s in self.turns), default=0)

    def d_after(self, t: int) -> set[str]:
        """D_s3 after turn t: the documents admitted at turns <= t."""
        return {i for i, turn in self.documents if turn <= t}


def _from_selections(steps: list[Turn]) -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    for s in steps:
        for i in s.selected:
            seen.setdefault(i, s.turn)
    return list(seen.items())


@dataclass
class QuestionBehavior:
    """What the searcher did on one question (see the module docstring for each definition)."""

    qid: str
    n_gold: int
    search_turns: int  # turns >= 1 that issued a query
    invalid_turns: int  # replies that were invalid (a step's reply judges its window: turn 0's judges D0)
    replies: int  # the policy's replies (one per step)
    recall_after: list[float]  # index t = 0..last turn; [] when the question has no gold paragraphs
    genacc_after: list[float | None] | None
    redundant: int  # redundant search turns (either reason)
    redundant_support: int  # ... because every gold paragraph was already in D_s3
    redundant_answer: int  # ... because the generator already answered correctly from D_s3
    stopped: bool  # the policy stopped before its turn budget
    stop_missing_support: bool  # ... while gold paragraphs were missing
    premature: bool | None  # ... and another turn would have found one (None: no probe)
    selected: int  # |D_s3|
    selected_gold: int
    shown_gold: int  # gold paragraphs among everything retrieved (what the searcher could have kept)
    overlaps: list[float | None]  # query_overlap of each search turn's query, in turn order
    turn_of_overlap: list[int]


def question_behavior(
    trace: Trace,
    gold: set[str],
    max_turns: int,
    *,
    probe_ids: Sequence[str] | None = None,
    genacc_after: Sequence[float | None] | None = None,
) -> QuestionBehavior:
    """The behaviour of one trajectory against its gold supporting paragraph ids (see the module docstring).

    `probe_ids`: what one more search turn would retrieve (None: premature stops are not judged); `genacc_after[t]`:
    the generator's accuracy with D_s3 after turn t (1.0 correct, 0.0 wrong, None unknown or a failed call).
    """
    last = trace.last_turn
    recall = [len(trace.d_after(t) & gold) / len(gold) for t in range(last + 1)] if gold else []
    searches = [s for s in trace.turns if s.turn >= 1 and s.query]
    red = red_support = red_answer = 0
    for s in searches:
        by_support = bool(recall) and recall[s.turn - 1] >= 1.0
        g = genacc_after[s.turn - 1] if genacc_after is not None and s.turn - 1 < len(genacc_after) else None
        by_answer = g is not None and g >= 1.0
        red += by_support or by_answer
        red_support += by_support
        red_answer += by_answer
    final_step = trace.turns[-1] if trace.turns else None
    stopped = bool(final_step is not None and final_step.stop and last < max_turns)
    d_final = trace.d_after(last)
    missing = gold - d_final
    stop_missing = stopped and bool(missing)
    premature: bool | None = None
    if probe_ids is not None:
        premature = stop_missing and bool(missing & set(probe_ids))
    shown = {i for s in trace.turns for i in s.retrieved} | d_final
    overlaps = [query_overlap(s.query or "", trace.question) for s in searches]
    return QuestionBehavior(
        qid=trace.qid, n_gold=len(gold), search_turns=len(searches),
        invalid_turns=sum(1 for s in trace.turns if s.invalid), replies=len(trace.turns),
        recall_after=recall, genacc_after=list(genacc_after) if genacc_after is not None else None,
        redundant=red, redundant_support=red_support, redundant_answer=red_answer,
        stopped=stopped, stop_missing_support=stop_missing, premature=premature,
        selected=len(d_final), selected_gold=len(d_final & gold), shown_gold=len(shown & gold),
        overlaps=overlaps, turn_of_overlap=[s.turn for s in searches],
    )


# ----------------------------------------------------------------------------------------------- run level


def _rate(num: list[float], den: list[float], n_resamples: int, seed: int) -> dict[str, Any]:
    """sum(num) / sum(den) with a bootstrap interval resampling questions; `n` = the denominator's sum."""
    out = ratio_ci(num, den, n_resamples=n_resamples, seed=seed)
    out["n"] = round(sum(den))
    return out


def summarize(behaviors: Sequence[QuestionBehavior], max_turns: int, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Run-level behaviour with 95% percentile-bootstrap intervals over questions.

    Rates whose unit is a turn or a stop are ratios (sum over questions / sum over questions, resampled by question):
    `redundant_turn_rate` (of search turns), `premature_stop_rate` and `stop_missing_support_rate` (of stops),
    `invalid_turn_rate` (of the policy's replies), `selection_precision` (of selected documents), `selection_recall` (of gold
    paragraphs shown). Per-question means: `queries_per_question`, `support_recall`, `genacc` (final D_s3).
    `per_turn`: for each turn t, the number of questions that reached it, the mean support recall after t over all
    questions, the marginal recall of turn t (mean of recall after t - recall after t - 1 over the questions that
    searched at t), the same for GenAcc where known, and the mean query overlap of turn t's queries.
    """
    bs = list(behaviors)
    kw = {"n_resamples": n_resamples, "seed": seed}
    with_gold = [b for b in bs if b.recall_after]
    out: dict[str, Any] = {"questions": len(bs), "questions_with_gold": len(with_gold)}
    out["queries_per_question"] = mean_ci([float(b.search_turns) for b in bs], **kw)
    out["redundant_turn_rate"] = _rate([b.redundant for b in bs], [b.search_turns for b in bs], **kw)
    out["redundant_support_rate"] = _rate([b.redundant_support for b in bs], [b.search_turns for b in bs], **kw)
    if any(b.genacc_after is not None for b in bs):
        gb = [b for b in bs if b.genacc_after is not None]
        out["redundant_answer_rate"] = _rate([b.redundant_answer for b in gb], [b.search_turns for b in gb], **kw)
    out["stop_rate"] = mean_ci([float(b.stopped) for b in bs], **kw)
    out["stop_missing_support_rate"] = _rate([float(b.stop_missing_support) for b in bs], [float(b.stopped) for b in bs], **kw)
    if any(b.premature is not None for b in bs):
        pb = [b for b in bs if b.premature is not None]
        out["premature_stop_rate"] = _rate([float(bool(b.premature)) for b in pb], [float(b.stopped) for b in pb], **kw)
    out["invalid_turn_rate"] = _rate([b.invalid_turns for b in bs], [b.replies for b in bs], **kw)
    out["selection_precision"] = _rate([b.selected_gold for b in with_gold], [b.selected for b in with_gold], **kw)
    out["selection_recall"] = _rate([b.selected_gold for b in with_gold], [b.shown_gold for b in with_gold], **kw)
    out["support_recall"] = mean_ci([b.recall_after[-1] for b in with_gold], **kw)
    ov = [o for b in bs for o in b.overlaps if o is not None]
    out["query_overlap"] = mean_ci(ov, **kw)
    out["query_is_question_rate"] = mean_ci([float(o >= 1.0) for o in ov], **kw)
    out["per_turn"] = _per_turn(bs, max_turns)
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _nan_mean(xs: list[float]) -> float:
    m = _mean(xs)
    return float("nan") if m is None else m


def _per_turn(bs: list[QuestionBehavior], max_turns: int) -> list[dict[str, Any]]:
    rows = []
    for t in range(max_turns + 1):
        searched = [b for b in bs if t == 0 or t in b.turn_of_overlap]
        # after turn t, a question that stopped earlier keeps its last D_s3
        cum = [b.recall_after[min(t, len(b.recall_after) - 1)] for b in bs if b.recall_after]
        marg = [b.recall_after[t] - (b.recall_after[t - 1] if t else 0.0) for b in searched if len(b.recall_after) > t]
        g_cum: list[float] = []
        g_marg: list[float] = []
        for b in bs:
            ga = b.genacc_after
            if not ga:
                continue
            v = ga[min(t, len(ga) - 1)]
            if v is not None:
                g_cum.append(v)
            if (t == 0 or t in b.turn_of_overlap) and t < len(ga) and ga[t] is not None:
                prev = ga[t - 1] if t else None
                if t == 0:
                    g_marg.append(float(ga[0]))  # type: ignore[arg-type]
                elif prev is not None:
                    g_marg.append(float(ga[t]) - float(prev))  # type: ignore[arg-type]
        ov = [o for b in bs for o, tt in zip(b.overlaps, b.turn_of_overlap, strict=True) if tt == t and o is not None]
        rows.append({"turn": t, "questions": len(searched),
                     "recall_after": _mean(cum), "marginal_recall": _mean(marg), "marginal_recall_n": len(marg),
                     "genacc_after": _mean(g_cum), "marginal_genacc": _mean(g_marg), "marginal_genacc_n": len(g_marg),
                     "query_overlap": _mean(ov)})
    return rows


def training_row(behaviors: Sequence[QuestionBehavior], max_turns: int) -> dict[str, float]:
    """The trainer's `search/` metrics of one step's rollouts (no intervals: one number per step, NaN when undefined).

    >>> training_row([], 3)["search/queries_per_question"]
    nan
    """
    nan = float("nan")
    bs = list(behaviors)

    def ratio(num: float, den: float) -> float:
        return num / den if den else nan

    searches = sum(b.search_turns for b in bs)
    stops = sum(b.stopped for b in bs)
    probed = [b for b in bs if b.premature is not None]
    row = {
        "search/queries_per_question": ratio(searches, len(bs)),
        "search/redundant_turn_rate": ratio(sum(b.redundant for b in bs), searches),
        "search/stop_rate": ratio(stops, len(bs)),
        "search/stop_missing_support_rate": ratio(sum(b.stop_missing_support for b in bs), stops),
        "search/premature_stop_rate": ratio(sum(bool(b.premature) for b in probed), sum(b.stopped for b in probed))
        if probed else nan,
        "search/support_recall": _nan_mean([b.recall_after[-1] for b in bs if b.recall_after]),
        "search/query_overlap": _nan_mean([o for b in bs for o in b.overlaps if o is not None]),
    }
    for r in _per_turn(bs, max_turns):
        m = r["marginal_recall"]
        row[f"search/marginal_recall_t{r['turn']}"] = nan if m is None else float(m)
    return row


def bridge_query(question: str, titles: Sequence[str]) -> str:
    """The probe for "would another turn have found it": the question with the titles of the documents kept so far
    (the bridge entities a next hop asks about). One implementation for `s3 analyze --probe` and training.

    >>> bridge_query("Where was the director of Jaws born?", ["Jaws (film)", "Steven Spielberg"])
    'Where was the director of Jaws born? Jaws (film) Steven Spielberg'
    """
    return " ".join([question, *[t for t in titles if t]]).strip()


def needs_probe(trace: Trace, gold: set[str], max_turns: int) -> bool:
    """A stop before the budget with gold paragraphs missing: the only case a probe can change."""
    return bool(trace.turns and trace.turns[-1].stop and trace.last_turn < max_turns and gold - trace.d_after(trace.last_turn))


def rollout_row(
    results: Sequence[SearchResult],
    golds: Sequence[Sequence[str]],
    max_turns: int,
    probe: Callable[[list[str]], list[list[str]]] | None = None,
) -> dict[str, float]:
    """The trainer's `search/` rows for one step's rollouts: `golds[i]` = the supporting ids of results[i]'s
    question; `probe(queries)` = the ids one more search would retrieve for each bridge query (one batched call)."""
    traces = [Trace.from_result(r, str(i)) for i, r in enumerate(results)]
    gs = [set(g) for g in golds]
    probes: dict[int, list[str]] = {}
    if probe is not None:
        todo = [i for i, (t, g) in enumerate(zip(traces, gs, strict=True)) if needs_probe(t, g, max_turns)]
        if todo:
            titles = {d.id: d.title or "" for r in results for d in r.documents}
            qs = [bridge_query(traces[i].question, [titles.get(d, "") for d, _ in traces[i].documents]) for i in todo]
            probes = dict(zip(todo, probe(qs), strict=True))
    bs = [question_behavior(t, g, max_turns, probe_ids=probes.get(i, []) if probe is not None else None)
          for i, (t, g) in enumerate(zip(traces, gs, strict=True))]
    return training_row(bs, max_turns)
