"""The zero-training checks' logic (issue 45, build step 1; docs/transfer.md "Attempt 3"): context sources a trained
searcher must beat, and the tables that compare them. What each check is and what it runs: methods.py `METHODS`.

A check that is not a live `s3 eval` method is a contexts file (`{"id", "documents": [{"id", "title", "score"}]}`, the
contract `s3 eval --method searcher --contexts FILE` reads), so the real generator evaluates it like any searcher: A1
(`copyable_gold`: the missing gold paragraphs whose title is visible in the question or a top-3 document's title and
first `VISIBLE_WORDS` words, about what the searcher's 96-token view shows), A2 (`a2_documents`: every missing gold
paragraph), the title-following script (`title_following_documents`, the product's searcher at the checks' settings)
and the controls built on its documents: `pruned_documents`, `plus_documents` (a perfect selector, or bm25 order,
where the script ends), `read_candidates` / `read_picks` / `precision_threshold` (a trained reader there), `fit_ranker`
(a ranker over the reader's score and what the script found).

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
from searcher.spans import MAX_TITLE_WORDS, TitleIndex, title_like_spans  # noqa: F401  (re-exported)
from searcher.title_following import TitleFollowing, follow_titles
from searcher.title_following.links import NO_READING, RANKER_FEATURES, ranker_rows, ranker_score  # noqa: F401  (re-exported)
from searcher.title_following.script import SearchFn

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
from training.reading.ranker_fit import fit_ranker  # noqa: F401  (re-exported: this module's API)

T = TypeVar("T")

SPAN_K = 8  # documents the title-following script retrieves per span (the searcher's k: the 8:3:3 loop)
DOC_CAP = 5  # |D| cap of the additive searcher and the script: naive RAG's 3 + 2 added


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


# ------------------------------------------------------------------------------------- the title-following script


def title_following_documents(
    question: str, top: Sequence[Document], search: SearchFn, titles: TitleIndex | None = None, *,
    cap: int = DOC_CAP, k: int = SPAN_K, words: int = VISIBLE_WORDS,
) -> TitleFollowing:
    """The scripted control for one question: the product's title-following searcher (`follow_titles`, the one
    definition) at the checks' settings (cap 5, k = 8 a span, 70 words of each top document): its documents, queries
    (every span searched) and added_by (added id -> its span). `benchmarks/transfer_checks.py prepare` runs the
    searcher itself (`TitleFollowingSearcher.follow`)."""
    return follow_titles(question, top, search, titles, cap=cap, k=k, words=words)


def pruned_documents(documents: Sequence[Document], added_by: Mapping[str, str], gold: set[str]) -> list[Document]:
    """The oracle-pruned control: the script's documents without the additions that are not gold (naive RAG's top-k,
    then only the gold paragraphs the script added), in the script's order.

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> [x.id for x in pruned_documents([d("t"), d("x"), d("g")], {"x": "X", "g": "G"}, {"g", "t"})]
    ['t', 'g']
    """
    return [d for d in documents if d.id not in added_by or d.id in gold]


PLUS_FIRST = 4  # the question's own ranks a selector started where the script ends reads: 4..SPAN_K


def plus_documents(documents: Sequence[Document], ranked: Sequence[Document], gold: set[str] | None = None, *,
                   add: int = 2, first: int = PLUS_FIRST, window: int = SPAN_K) -> list[Document]:
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
# (its features and score are the product's: searcher/title_following/links.py, re-exported above; the fit is training's, here)

# ------------------------------------------------------------------------------------- where a searcher could reach

RANK_BUCKETS = ((4, 8), (9, 16), (17, 50))  # ranks of the question's own retrieval list beyond naive RAG's top-3


def reach_by_place(
    places: Mapping[str, str], missing: Mapping[str, set[str]], ranked: Mapping[str, Sequence[str]],
    script: Mapping[str, Sequence[str]], *, window: int = SPAN_K, cap: int = DOC_CAP,
) -> dict[str, dict[str, Any]]:
    """Where the gold paragraphs naive RAG's top-3 lacks could be reached, per place (`GOLD_PLACES` but "none missing";
    `places`: id -> place, `missing`: id -> the gold ids the top-3 lacks, as `place_rows` takes them): the best rank of a missing gold paragraph in the question's own
    retrieval list (`ranked`: id -> ids, best first; `RANK_BUCKETS`, "beyond" past the last), and on how many
    questions a missing gold paragraph gets in for: `selector` (a perfect selection among the question's own first
    `window` documents, no new query), the title-following script (its documents, `script`: id -> ids) and the script
    then that selector while the context is under `cap`; the keys of the last two are reach.json's, "heuristic" and
    "heuristic_then_selector" (the script's old name).

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
            have = list(script.get(qid, ()))
            by_heuristic = bool(lacks & set(have))
            entry["questions"] += 1
            entry["ranks"][bucket] += 1
            entry["selector"] += bool(selected)
            entry["heuristic"] += by_heuristic
            entry["heuristic_then_selector"] += by_heuristic or (bool(selected) and len(have) < cap)
        if entry["questions"]:
            out[place] = entry
    return out


# ------------------------------------------------------------------------------------------------ files and tables


def rows_sha256(path: Path) -> str:
    """The sha256 of a jsonl file's rows as it was written (what `s3 eval` and a manifest record), also where it is
    kept as FILE.jsonl.gz (`gzip -n` of the same bytes)."""
    import gzip
    import hashlib

    from s3core.io import file_sha256

    return hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest() if path.suffix == ".gz" else file_sha256(path)


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

    >>> composition_order(["ranker", "reader", "gold", "orphan"], {"ranker": "reader", "orphan": "gone"}, "script")
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

    >>> report_tiers({"naive_rag_top3": (500, 500), "title_following": (500, 500), "a1": (100, 100), "a0": (32, 100)})
    ([(500, ['naive_rag_top3', 'title_following']), (100, ['naive_rag_top3', 'title_following', 'a1'])], {'a0': (32, 100)})
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


def plot_genacc(
    panels: Sequence[tuple[str, int, Sequence[tuple[str, Mapping[str, Any]]], Sequence[tuple[str, Mapping[str, Any]]]]],
    path: Path, *, highlight: str | None = None,
) -> None:
    """A figure of one row per panel (title, questions, each method's (name, `mean_ci`), each comparison's (label,
    `paired_diff_ci`)): GenAcc with its 95% interval as bars, a method whose name starts with `highlight` in red
    (left), and the paired differences with theirs (right): one whose interval crosses 0 is no evidence of a gain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 2, figsize=(12, 3.6 * len(panels)), squeeze=False)
    for row, (title, n, accs, diffs) in zip(axes, panels, strict=True):
        bars = [(m, a) for m, a in accs if a["mean"] is not None]
        err = [[a["mean"] - a["ci95"][0] for _, a in bars], [a["ci95"][1] - a["mean"] for _, a in bars]]
        row[0].bar([m for m, _ in bars], [a["mean"] for _, a in bars], yerr=err, capsize=4,
                   color=["#d62728" if highlight and m.startswith(highlight) else "#1f77b4" for m, _ in bars])
        row[0].set_title(f"{title}: GenAcc (95% CI), n = {n}", fontsize=10)
        row[0].tick_params(axis="x", rotation=20)
        pairs = [(k, d) for k, d in diffs if d.get("diff") is not None]
        if pairs:
            ys = list(range(len(pairs)))
            row[1].errorbar([d["diff"] for _, d in pairs], ys, fmt="o", capsize=4,
                            xerr=[[d["diff"] - d["ci95"][0] for _, d in pairs],
                                  [d["ci95"][1] - d["diff"] for _, d in pairs]])
            row[1].axvline(0.0, color="grey", lw=1, ls="--")
            row[1].set_yticks(ys, [k for k, _ in pairs])
            row[1].set_title(f"{title}: paired difference (95% CI)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
