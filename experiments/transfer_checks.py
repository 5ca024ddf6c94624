"""Zero-training checks before a long transfer run (issue 45, build step 1): context sources a searcher must beat.

Each check is a context source written as a contexts file (`{"id", "documents": [{"id", "title", "score"}]}`, the
contract `s3 eval --method searcher --contexts FILE` reads), so the real generator evaluates it like any searcher:

    A1 (the ceiling)      naive RAG's top-3 plus every missing gold paragraph a COPYABLE teacher would add: one whose
                          title is visible in the question or in the top-3 (each document's title and first
                          `VISIBLE_WORDS` words, about what the searcher's 96-token view of a document shows)
    A2 (any searcher's)   naive RAG's top-3 plus EVERY missing gold paragraph, visible or not: a perfect searcher at
                          the heuristic's cap (HotpotQA has two gold paragraphs), the margin any searcher could have
                          over the heuristic
    heuristic (control)   the product's title-following searcher (searcher/title_following.py): query every
                          title-like span visible in the question and the top-3, add the retrieved documents whose
                          title equals the span, up to a document cap
    title_following       the heuristic run live by `s3 eval --method title_following` (the same searcher, no
                          contexts file): its rows on the datasets that have no contexts files (musique, 2wiki)
    heuristic_pruned      the heuristic's documents without its non-gold additions (naive RAG's top-3 + only the
                          gold paragraphs the script added): whether dropping what it adds wrongly would help
    heuristic_plus_gold   the heuristic's documents, then the gold paragraphs among the question's own bm25 ranks
                          4-8 (up to 2 more): a perfect selector started where the script ends, the most a searcher
                          that READS the question's window (no new query) could add over the script
    heuristic_plus_next   the heuristic's documents, then the question's next bm25 document not among them (one
                          more): the same window selected by bm25 order, no reading
    heuristic_plus_gold16 the same perfect selector over the question's own ranks 4-16 (`READ_LAST`): the most the
                          reader below could add
    heuristic_plus_reader the heuristic's documents, then up to 2 of the question's own bm25 ranks 4-16 that a TRAINED
                          READER (the selection probe's pointwise reader) scores highest, each only at or above a
                          threshold chosen on held-out training questions (`precision_threshold`: the script's own
                          precision); what a searcher that reads where the script ends adds, no gold label at test time
    heuristic_plus_reader1 the heuristic's documents, then the same reader's best one among those ranks, always (no
                          threshold): reading's counterpart of heuristic_plus_next, for a generator that a non-gold
                          document costs little and a gold one gains much
    naive RAG top-N       the retriever's top-N of the question (`s3 eval --method naive_rag`, retriever.k = N): more
                          documents without better ones

Titles are compared after `norm` (ASCII, lower case, punctuation to spaces), with or without a trailing
parenthetical ("Kiss and Tell (1945 film)" is also "kiss and tell"). `cap_hit_shares` measures how often a generator's
answers hit max_tokens; `paired_rows` builds the paired-bootstrap table (eval/stats.py) the report prints.
`norm`, `title_variants`, `contains_phrase`, `first_words` and `VISIBLE_WORDS` are the copyable teacher's
(training/prep/oracle.py, imported from there): one definition of what a searcher can copy, for A1 here and the warm-up there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from eval.stats import mean_ci, paired_diff_ci
from s3core.errors import DataFormatError
from s3core.types import Document
from searcher.links import NO_READING, RANKER_FEATURES, ranker_rows, ranker_score  # noqa: F401  (re-exported)
from searcher.spans import MAX_TITLE_WORDS, TitleIndex, title_like_spans  # noqa: F401  (re-exported)
from searcher.title_following import SearchFn, TitleFollowing, follow_titles

# the copyable teacher's definitions, one for A1 here and the warm-up and training.data.keep_copyable there
from training.prep.oracle import (  # noqa: F401  (re-exported: this module's API)
    GOLD_PLACES,
    VISIBLE_WORDS,
    contains_phrase,
    copyable_gold,
    first_words,
    missing_gold_place,
    norm,
    title_variants,
)
from training.prep.oracle import document_segments as visible_segments

T = TypeVar("T")

HEURISTIC_K = 8  # documents retrieved per heuristic query (the searcher's k: the 8:3:3 loop)
DOC_CAP = 5  # |D| cap of the additive searcher and the heuristic: naive RAG's 3 + 2 added


def a1_documents(question: str, top: Sequence[Document], gold: Sequence[Document],
                 words: int = VISIBLE_WORDS) -> list[Document]:
    """A1's context: the top documents, then the copyable missing gold paragraphs."""
    return [*top, *copyable_gold(question, top, gold, words)]


def a2_documents(top: Sequence[Document], gold: Sequence[Document]) -> list[Document]:
    """A2's context: the top documents, then every gold paragraph they lack (in `gold`'s order).

    >>> [d.id for d in a2_documents([Document(id="t", title="T", text="")],
    ...                             [Document(id="g", title="G", text=""), Document(id="t", title="T", text="")])]
    ['t', 'g']
    """
    have = {d.id for d in top}
    return [*top, *(g for g in gold if g.id not in have)]


QUERY_KINDS = ("stop", "top3_title", "copyable_gold", "other_visible", "unseen")


def query_kind(query: str | None, question: str, top: Sequence[Document], copyable: Sequence[Document],
               words: int = VISIBLE_WORDS) -> str:
    """What a searcher's first query asked for, against what it could see (the question and naive RAG's `top`):
    `stop` (no query); `top3_title` (a title naive RAG already has: it cannot add gold); `copyable_gold` (the title
    of a missing gold paragraph `copyable` holds: the copyable teacher's query); `other_visible` (another phrase it
    saw: a wrong guess at the bridge entity); `unseen` (text it did not see).

    >>> top = [Document(id="a", title="Veldor", text="Veldor's capital is Ostmark.")]
    >>> gold = [Document(id="g", title="Ostmark", text="")]
    >>> [query_kind(q, "Which river?", top, gold) for q in (None, "Veldor", "ostmark", "capital", "Sarn")]
    ['stop', 'top3_title', 'copyable_gold', 'other_visible', 'unseen']
    """
    if not query or not norm(query):
        return "stop"
    q = norm(query)
    if any(q in title_variants(d.title) for d in top):
        return "top3_title"
    if any(q in title_variants(d.title) for d in copyable):
        return "copyable_gold"
    if any(contains_phrase(norm(s), q) for s in visible_segments(question, top, words)):
        return "other_visible"
    return "unseen"


# ------------------------------------------------------------------------------------------------ the heuristic


HeuristicResult = TitleFollowing  # documents, queries (every span searched), added_by (added id -> its span)


def heuristic_documents(
    question: str, top: Sequence[Document], search: SearchFn, titles: TitleIndex | None = None, *,
    cap: int = DOC_CAP, k: int = HEURISTIC_K, words: int = VISIBLE_WORDS,
) -> HeuristicResult:
    """The scripted control for one question: the product's title-following searcher (searcher/title_following.py
    `follow_titles`, the one definition) at the checks' settings (cap 5, k = 8 a span, 70 words of each top
    document). `benchmarks/transfer_checks.py prepare` runs the searcher itself (`TitleFollowingSearcher.follow`)."""
    return follow_titles(question, top, search, titles, cap=cap, k=k, words=words)


def pruned_documents(documents: Sequence[Document], added_by: Mapping[str, str], gold: set[str]) -> list[Document]:
    """The oracle-pruned control: the script's documents without the additions that are not gold (naive RAG's top-k,
    then only the gold paragraphs the script added), in the script's order.

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> [x.id for x in pruned_documents([d("t"), d("x"), d("g")], {"x": "X", "g": "G"}, {"g", "t"})]
    ['t', 'g']
    """
    return [d for d in documents if d.id not in added_by or d.id in gold]


PLUS_FIRST = 4  # the question's own ranks a selector started where the script ends reads: 4..HEURISTIC_K


def plus_documents(documents: Sequence[Document], ranked: Sequence[Document], gold: set[str] | None = None, *,
                   add: int = 2, first: int = PLUS_FIRST, window: int = HEURISTIC_K) -> list[Document]:
    """The script's `documents`, then up to `add` of the question's own retrieval list (`ranked`, best first) at
    ranks `first`..`window` that are not among them: with `gold`, only the gold ones (a perfect selector, the most
    that reading the window can add); without, the best-ranked (selection by bm25 order, no reading).

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> ranked = [d(i) for i in ("t1", "t2", "t3", "h", "x", "g")]
    >>> script = [d("t1"), d("t2"), d("t3"), d("h")]
    >>> [x.id for x in plus_documents(script, ranked, {"g"})], [x.id for x in plus_documents(script, ranked, add=1)]
    (['t1', 't2', 't3', 'h', 'g'], ['t1', 't2', 't3', 'h', 'x'])
    >>> [x.id for x in plus_documents(script, ranked, {"t1"})]  # a gold already in: nothing to add
    ['t1', 't2', 't3', 'h']
    """
    have = {x.id for x in documents}
    pool = [x for x in ranked[first - 1:window] if x.id not in have and (gold is None or x.id in gold)]
    return [*documents, *pool[:add]]


READ_LAST = 16  # a reader started where the script ends reads the question's own ranks PLUS_FIRST..READ_LAST
READ_ADD = 2  # and adds at most this many of them


def read_candidates(documents: Sequence[Document], ranked: Sequence[Document], *, first: int = PLUS_FIRST,
                    last: int = READ_LAST) -> list[Document]:
    """What a reader started where the script ends reads: the question's own retrieval list (`ranked`, best first)
    at ranks `first`..`last`, less the script's `documents`.

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> [x.id for x in read_candidates([d("a"), d("c")], [d(i) for i in "abcdef"], first=2, last=5)]
    ['b', 'd', 'e']
    """
    have = {x.id for x in documents}
    return [x for x in ranked[first - 1:last] if x.id not in have]


def read_picks(scores: Sequence[float], threshold: float, add: int = READ_ADD) -> list[int]:
    """The candidates a reader adds: the indices of its `add` best `scores` at or above `threshold`, best first.

    >>> read_picks([0.5, 2.0, 1.0, -1.0], threshold=0.7), read_picks([0.5], threshold=0.7), read_picks([3.0, 3.0], 0.0)
    ([1, 2], [], [0, 1])
    """
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [i for i in order[:add] if scores[i] >= threshold]


def best_pick_hits(rows: Sequence[tuple[set[str], Sequence[str], Sequence[float]]]) -> dict[str, int]:
    """Per question (its gold ids, its candidates' ids best bm25 rank first, the reader's scores): on the questions
    with a gold among the candidates, how often the reader's best is gold and how often bm25 order's best is.

    >>> best_pick_hits([({"g"}, ["x", "g"], [0.1, 0.9]), ({"g"}, ["g", "x"], [0.1, 0.9]), ({"g"}, ["x"], [1.0])])
    {'questions_with_a_gold_candidate': 2, 'reader_best_is_gold': 1, 'bm25_best_is_gold': 1}
    """
    has = [(gold, ids, scores) for gold, ids, scores in rows if gold & set(ids)]
    return {"questions_with_a_gold_candidate": len(has),
            "reader_best_is_gold": sum(ids[read_picks(sc, -float("inf"), 1)[0]] in gold for gold, ids, sc in has),
            "bm25_best_is_gold": sum(ids[0] in gold for gold, ids, _ in has)}


def precision_threshold(picks: Sequence[tuple[float, bool]], precision: float) -> float:
    """The lowest score threshold at which the picks kept (score >= it) are gold at least `precision` of the time:
    `picks` are (score, gold) of every question's best candidates, on held-out training questions. A reader held to
    the script's own precision adds a document only where it is as sure as the script, and as often as it can. No such
    threshold (no pick, or none precise enough) is +inf: it adds nothing.

    >>> precision_threshold([(3.0, True), (2.0, False), (1.0, True), (0.0, False), (-1.0, False)], 0.5)
    0.0
    >>> precision_threshold([(3.0, True), (2.0, False), (1.0, False)], 0.9)
    3.0
    >>> precision_threshold([(1.0, False)], 0.5), precision_threshold([], 0.5)
    (inf, inf)
    >>> precision_threshold([(2.0, True), (1.0, False), (1.0, True)], 0.6)  # a tie is kept or dropped whole
    1.0
    """
    best, gold = float("inf"), 0
    ranked = sorted(picks, key=lambda p: -p[0])
    for i, (score, is_gold) in enumerate(ranked):
        gold += is_gold
        if i + 1 < len(ranked) and ranked[i + 1][0] == score:
            continue  # a threshold keeps every pick of its score
        if gold / (i + 1) >= precision:
            best = score
    return best


# ------------------------------------------------------------------------------- a ranker trained over the reader
# (its features and score are the product's: searcher/links.py, re-exported above; the fit is training's, here)

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


# ------------------------------------------------------------------------------------- where a searcher could reach

RANK_BUCKETS = ((4, 8), (9, 16), (17, 50))  # ranks of the question's own retrieval list beyond naive RAG's top-3


def reach_by_place(
    places: Mapping[str, str], missing: Mapping[str, set[str]], ranked: Mapping[str, Sequence[str]],
    heuristic: Mapping[str, Sequence[str]], *, window: int = HEURISTIC_K, cap: int = DOC_CAP,
) -> dict[str, dict[str, Any]]:
    """Where the gold paragraphs naive RAG's top-3 lacks could be reached, per place (`GOLD_PLACES` but "none missing";
    `places`: id -> place, `missing`: id -> the gold ids the top-3 lacks, as `place_rows` takes them): the best rank of a missing gold paragraph in the question's own
    retrieval list (`ranked`: id -> ids, best first; `RANK_BUCKETS`, "beyond" past the last), and on how many
    questions a missing gold paragraph gets in for: `selector` (a perfect selection among the question's own first
    `window` documents, no new query), `heuristic` (its documents, `heuristic`: id -> ids) and `heuristic_then_selector`
    (the heuristic's documents, then the selector's while the context is under `cap`).

    >>> places = {"q1": "unseen", "q2": "documents", "q3": "none missing"}
    >>> missing = {"q1": {"g"}, "q2": {"b"}, "q3": set()}
    >>> ranked = {"q1": ["t1", "t2", "t3", "x", "g"], "q2": ["t1", "t2", "t3"], "q3": ["t1"]}
    >>> heur = {"q1": ["t1", "t2", "t3"], "q2": ["t1", "t2", "t3", "b"], "q3": ["t1"]}
    >>> r = reach_by_place(places, missing, ranked, heur)
    >>> r["unseen"]["ranks"], r["unseen"]["selector"], r["unseen"]["heuristic"], r["unseen"]["heuristic_then_selector"]
    ({'4-8': 1, '9-16': 0, '17-50': 0, 'beyond': 0}, 1, 0, 1)
    >>> r["documents"]["ranks"]["beyond"], r["documents"]["heuristic_then_selector"], "none missing" in r
    (1, 1, False)
    """
    out: dict[str, dict[str, Any]] = {}
    for place in GOLD_PLACES:
        if place == "none missing":
            continue
        entry: dict[str, Any] = {"questions": 0, "ranks": {f"{a}-{b}": 0 for a, b in RANK_BUCKETS} | {"beyond": 0},
                                 "selector": 0, "heuristic": 0, "heuristic_then_selector": 0}
        for qid in (i for i, p in places.items() if p == place):
            lacks = missing.get(qid, set())
            ids = list(ranked.get(qid, ()))
            best = min((ids.index(m) + 1 for m in lacks if m in ids), default=None)
            bucket = next((f"{a}-{b}" for a, b in RANK_BUCKETS if best is not None and a <= best <= b), "beyond")
            selected = lacks & set(ids[:window])
            have = list(heuristic.get(qid, ()))
            by_heuristic = bool(lacks & set(have))
            entry["questions"] += 1
            entry["ranks"][bucket] += 1
            entry["selector"] += bool(selected)
            entry["heuristic"] += by_heuristic
            entry["heuristic_then_selector"] += by_heuristic or (bool(selected) and len(have) < cap)
        if entry["questions"]:
            out[place] = entry
    return out


# ------------------------------------------------------------------------------------------------ the runs


CONTEXTS_METHODS = ("a1", "a2", "heuristic", "heuristic_pruned", "heuristic_plus_gold", "heuristic_plus_next",
                    "heuristic_plus_gold16", "heuristic_plus_reader", "heuristic_plus_reader1", "heuristic_plus_ranker1",
                    "heuristic_plus_links1", "heuristic_plus_ranker1_shipped")


def eval_method_args(
    method: str, contexts: Path, policy: str | None = None, extra_sets: Sequence[str] = ()
) -> tuple[list[str], list[str], bool]:
    """What one check runs as (`benchmarks/transfer_checks.py run METHOD`): the `s3 eval --method` arguments, the
    `--set`s beyond the generator's, and whether the run reads the index (no_retrieval does not, and `s3 eval`
    refuses an `--index` it would not use). `contexts` holds one file per `CONTEXTS_METHODS` (a1.jsonl, ...);
    `policy` is a0's and
    policy_NAME's policy directory; `extra_sets` are a0's additive setting, policy_NAME's, title_following_NAME's and
    untrained's extra `--set`s.
    A method it does not know, or one missing what it needs, is a ValueError that says what to pass.

    >>> eval_method_args("naive_rag_top4", Path("c"))
    (['naive_rag'], ['retriever.k=4'], True)
    >>> eval_method_args("no_retrieval", Path("c"))
    (['no_retrieval'], [], False)
    >>> eval_method_args("title_following", Path("c"))
    (['title_following'], ['searcher.k=8', 'searcher.context_cap=5', 'searcher.max_turns=1'], True)
    >>> eval_method_args("title_following_links1", Path("c"), None, ["searcher.read_last=16"])[1][-1]
    'searcher.read_last=16'
    >>> eval_method_args("title_following", Path("c"), None, ["searcher.read_last=16"])
    Traceback (most recent call last):
    ValueError: title_following is the script as it is (its runs' folder says so): name a variant title_following_NAME to run it with --additive settings
    >>> eval_method_args("policy_x", Path("c"), "p", ["searcher.min_turns=2"])
    (['searcher'], ['searcher.policy_path=p', 'searcher.min_turns=2'], True)
    """
    extra = list(extra_sets)
    if method.startswith("naive_rag_top"):
        n = method.removeprefix("naive_rag_top")
        if not n.isdigit() or int(n) < 1:
            raise ValueError(f"naive_rag_topN takes N >= 1, got {method!r}")
        return ["naive_rag"], [f"retriever.k={int(n)}"], True
    if method == "no_retrieval":
        return ["no_retrieval"], [], False
    if method == "untrained":  # the base searcher model in the same additive loop (configs/transfer3.toml), greedy
        return ["searcher"], extra, True
    if method == "title_following" or method.startswith("title_following_"):
        # the heuristic run live (the product searcher), on any dataset with an index; _NAME: with extra --sets
        if method != "title_following" and not extra:
            raise ValueError(f"{method} is the title-following searcher with other settings: pass them with "
                             "--additive KEY=VALUE (e.g. searcher.read_last=16)")
        if method == "title_following" and extra:
            raise ValueError("title_following is the script as it is (its runs' folder says so): name a variant "
                             "title_following_NAME to run it with --additive settings")
        return ["title_following"], [f"searcher.k={HEURISTIC_K}", f"searcher.context_cap={DOC_CAP}",
                                     "searcher.max_turns=1", *extra], True
    if method in CONTEXTS_METHODS:
        return ["searcher", "--contexts", str(contexts / f"{method}.jsonl")], [], True
    if method == "a0":
        if policy is None or not extra:
            raise ValueError("a0 needs --policy DIR (attempt 2's policy) and --additive KEY=VALUE (the searcher's "
                             "additive setting, e.g. searcher.<field>=true)")
        return ["searcher"], [f"searcher.policy_path={policy}", *extra], True
    if method.startswith("policy_") and len(method) > len("policy_"):
        # a searcher trained under configs/transfer3.toml (its [searcher] loop: additive, cap 5, 8:3:3), greedy
        if policy is None:
            raise ValueError(f"{method} needs --policy DIR (a checkpoint's policy/ folder or an exported policy)")
        return ["searcher"], [f"searcher.policy_path={policy}", *extra], True
    raise ValueError(f"unknown method {method!r}: naive_rag_topN, no_retrieval, untrained, "
                     f"{', '.join(CONTEXTS_METHODS)}, title_following, a0 or policy_NAME")


# ------------------------------------------------------------------------------------------------ files and tables


def contexts_row(question_id: str, docs: Sequence[Document], **extra: Any) -> dict[str, Any]:
    """One contexts-file row (`s3 eval --contexts`): the documents by id and title, in order."""
    return {"id": question_id, "documents": [{"id": d.id, "title": d.title} for d in docs], **extra}


def cap_hit_shares(completion_tokens: Sequence[int], caps: Sequence[int]) -> dict[int, float]:
    """Share of answers that would hit each max_tokens cap, from completion lengths measured under a cap of at least
    max(caps): greedy decoding under a smaller cap writes a prefix of the same answer, so an answer of L tokens hits
    cap c exactly when L >= c (an answer of exactly c tokens stops at the cap: counted, as providers report it).

    >>> cap_hit_shares([2, 16, 40, 48], [16, 32, 48])
    {16: 0.75, 32: 0.5, 48: 0.25}
    """
    if not completion_tokens:
        raise DataFormatError("no completions to measure max_tokens hits on")
    n = len(completion_tokens)
    return {c: sum(t >= c for t in completion_tokens) / n for c in caps}


def smallest_cap(shares: dict[int, float], below: float = 0.05) -> int | None:
    """The smallest cap whose hit share is under `below` (None: none is).

    >>> smallest_cap({16: 0.3, 32: 0.04, 48: 0.01})
    32
    """
    ok = [c for c, s in sorted(shares.items()) if s < below]
    return ok[0] if ok else None


def changed_ids(rows: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids (in `rows` order) whose contexts-file documents differ from `base`'s (a control that changes only some
    contexts: only these need a generator call).

    >>> a = [{"id": "q1", "documents": [{"id": "x"}]}, {"id": "q2", "documents": [{"id": "x"}, {"id": "g"}]}]
    >>> changed_ids(a, [{"id": "q1", "documents": [{"id": "x"}]}, {"id": "q2", "documents": [{"id": "x"}]}])
    ['q2']
    """
    before = {r["id"]: [d["id"] for d in r["documents"]] for r in base}
    return [r["id"] for r in rows if [d["id"] for d in r["documents"]] != before.get(r["id"])]


def composition_order(names: Sequence[str], base_of: Mapping[str, str], root: str) -> list[str]:
    """The changed-only runs `names` in the order they can be composed: each after the run it composes over
    (`base_of[name]`, `root` where it is not there), those over `root` first, then by name. A run whose base is neither
    `root` nor among `names` (nor reached through them), or a circle of bases, comes last: the caller leaves it out.

    >>> composition_order(["ranker", "reader", "gold", "orphan"], {"ranker": "reader", "orphan": "gone"}, "heuristic")
    ['gold', 'reader', 'ranker', 'orphan']
    >>> composition_order(["a", "b"], {"a": "b", "b": "a"}, "r")
    ['a', 'b']
    """
    have = set(names)

    def depth(name: str, seen: frozenset[str] = frozenset()) -> float:
        base = base_of.get(name, root)
        if base == root:
            return 0
        if base not in have or base in seen:
            return float("inf")
        return 1 + depth(base, seen | {name})

    return sorted(names, key=lambda n: (depth(n), n))


def compose_changed(base: Mapping[str, T], own: Mapping[str, T], changed: Sequence[str]) -> dict[str, T]:
    """Per question (a row, a score) of a control that changes only the `changed` questions' contexts: its own there
    (`own`, a run over those questions only), the base run's elsewhere (the same documents give the generator the same
    prompt, and decoding is greedy: the base's answer is the answer). A changed question `own` lacks is an error: a
    run in progress is not a result.

    >>> compose_changed({"q1": 1.0, "q2": 0.0, "q3": None}, {"q2": 1.0}, ["q2"])
    {'q1': 1.0, 'q2': 1.0, 'q3': None}
    >>> compose_changed({"q1": 1.0}, {}, ["q1"])
    Traceback (most recent call last):
    ...
    s3core.errors.DataFormatError: 1 of the 1 changed questions are not scored yet (first: q1)
    """
    lacking = [i for i in changed if i not in own]
    if lacking:
        raise DataFormatError(f"{len(lacking)} of the {len(changed)} changed questions are not scored yet "
                              f"(first: {lacking[0]})")
    mine = set(changed)
    return {i: own[i] if i in mine else v for i, v in base.items()}


def genacc_by_id(rows: dict[str, dict[str, Any]], ids: Sequence[str] | None = None) -> dict[str, float | None]:
    """question id -> GenAcc of an eval run's rows (None: not scored), over `ids` when given (missing ones left out)."""
    keep = rows.keys() if ids is None else [i for i in ids if i in rows]
    out: dict[str, float | None] = {}
    for i in keep:
        r = rows[i]
        g = (r.get("metrics") or {}).get("genacc")
        out[i] = None if r.get("error") is not None or g is None else float(g)
    return out


def paired_rows(
    runs: dict[str, dict[str, dict[str, Any]]], baselines: Sequence[str], ids: Sequence[str], *,
    n_resamples: int = 2000, seed: int = 0,
) -> list[dict[str, Any]]:
    """One entry per run in `runs` (name -> eval rows by id) over the question ids `ids`: GenAcc with its bootstrap
    interval, mean documents, mean support recall (the share of the question's gold paragraphs in its context, where
    the rows record it), and the paired difference to each baseline run present in `runs` (`paired_diff_ci`)."""
    out = []
    for name, rows in runs.items():
        acc = genacc_by_id(rows, ids)
        docs = [len(rows[i].get("context_ids") or []) for i in ids if i in rows]
        recall = [float(rows[i]["support_recall"]) for i in ids
                  if i in rows and rows[i].get("support_recall") is not None]
        entry: dict[str, Any] = {
            "method": name, "genacc": mean_ci(list(acc.values()), seed=seed),
            "mean_docs": sum(docs) / len(docs) if docs else None,
            "support_recall": sum(recall) / len(recall) if recall else None, "vs": {},
        }
        for b in baselines:
            if b != name and b in runs:
                entry["vs"][b] = paired_diff_ci(acc, genacc_by_id(runs[b], ids), n_resamples=n_resamples, seed=seed)
        out.append(entry)
    return out


def report_tiers(
    progress: dict[str, tuple[int, int]], baseline: str = "naive_rag_top3",
) -> tuple[list[tuple[int, list[str]]], dict[str, tuple[int, int]]]:
    """Which methods each report table compares, from each run's (questions scored, questions asked): one table per
    finished length, longest first, over every run that has scored at least that many (runs extend as prefixes of the
    same question order, so a 500-question run also answers the first 100), kept only where `baseline` is among them
    with one other method; the runs still short of their length are also returned apart: one run in progress joins the
    tables it already covers and never shrinks every table to its prefix.

    >>> report_tiers({"naive_rag_top3": (500, 500), "heuristic": (500, 500), "a1": (100, 100), "a0": (32, 100)})
    ([(500, ['naive_rag_top3', 'heuristic']), (100, ['naive_rag_top3', 'heuristic', 'a1'])], {'a0': (32, 100)})
    """
    done = {m: asked for m, (scored, asked) in progress.items() if asked > 0 and scored >= asked}
    running = {m: p for m, p in progress.items() if m not in done}
    tiers = []
    for n in sorted(set(done.values()), reverse=True):
        names = [m for m, (scored, _) in progress.items() if scored >= n]
        if baseline in names and len(names) > 1:
            tiers.append((n, names))
    return tiers, running


# ------------------------------------------------------------------------------ where the missing gold could be read

def place_rows(
    runs: dict[str, dict[str, dict[str, Any]]], places: dict[str, str], missing: dict[str, set[str]],
    ids: Sequence[str],
) -> list[dict[str, Any]]:
    """Per place (`GOLD_PLACES`, those with questions): how many of `ids` are there, and per run how many of them got a
    missing gold paragraph (`missing`: question id -> the gold ids naive RAG's top lacks) into the context and its
    GenAcc there (failed rows left out, as everywhere)."""
    out = []
    for place in GOLD_PLACES:
        qids = [i for i in ids if places.get(i) == place]
        if not qids:
            continue
        entry: dict[str, Any] = {"place": place, "questions": len(qids), "methods": {}}
        for name, rows in runs.items():
            acc = [a for a in genacc_by_id(rows, qids).values() if a is not None]
            found = sum(bool(missing.get(i, set()) & set(rows[i].get("context_ids") or [])) for i in qids if i in rows)
            entry["methods"][name] = {"found": found, "genacc": sum(acc) / len(acc) if acc else None, "n": len(acc)}
        out.append(entry)
    return out
