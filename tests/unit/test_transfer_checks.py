"""The zero-training checks' logic (experiments/transfer_checks.py): the copyable teacher's gold choice (A1), title-like
spans and the heuristic control, the contexts rows `s3 eval --contexts` reads, max_tokens cap hits, the paired table.
Hand-made data with hand-derived answers; one real BM25 index."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from eval.contexts import read_contexts_file
from experiments import transfer_checks as tc
from s3core.corpus import write_corpus
from s3core.errors import ConfigError, DataFormatError
from s3core.types import Document
from searcher.config import RetrieverConfig
from searcher.retrieval import build_index, load_retriever


def doc(i: str, title: str, text: str = "") -> Document:
    return Document(id=i, title=title, text=text)


TOP = [
    doc("t1", "Meet Corliss Archer", "Meet Corliss Archer is a radio comedy. In the film Shirley Temple played Corliss."),
    doc("t2", "A Kiss for Corliss", "A Kiss for Corliss is a 1949 film, a sequel to Kiss and Tell (1945 film)."),
    doc("t3", "Janet Waldo", "Janet Waldo was an American actress. " + "word " * 80 + "Charles Craft"),
]
QUESTION = "What position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"


def test_titles_are_compared_normalised_with_and_without_a_trailing_parenthetical() -> None:
    assert tc.norm("Pirate’s Cove – Board Game") == "pirate s cove board game"
    assert tc.title_variants("Kiss and Tell (1945 film)") == {"kiss and tell 1945 film", "kiss and tell"}
    assert tc.title_variants("Animorphs") == {"animorphs"}
    assert tc.contains_phrase("the film kiss and tell is", "kiss and tell")
    assert not tc.contains_phrase("a kissing and telling game", "kiss and tell")  # word boundaries
    assert not tc.contains_phrase("anything", "")


def test_a1_adds_only_missing_gold_whose_title_is_visible() -> None:
    gold = [
        doc("g1", "Kiss and Tell (1945 film)"),  # missing; "Kiss and Tell" is in the question
        doc("g2", "Shirley Temple"),  # missing; in t1's text
        doc("g3", "Charles Craft"),  # missing; only after t3's first 70 words: not visible
        doc("g4", "Chief of Protocol"),  # missing; nowhere
        TOP[1],  # gold but already in the top-3: nothing to add
    ]
    added = tc.copyable_gold(QUESTION, TOP, gold)
    assert [d.id for d in added] == ["g1", "g2"]
    assert [d.id for d in tc.a1_documents(QUESTION, TOP, gold)] == ["t1", "t2", "t3", "g1", "g2"]
    # A2, the perfect searcher: every missing gold paragraph, visible or not
    assert [d.id for d in tc.a2_documents(TOP, gold)] == ["t1", "t2", "t3", "g1", "g2", "g3", "g4"]
    # a longer view makes g3 visible; a shorter one (2 words a document) leaves only the question's title
    assert [d.id for d in tc.copyable_gold(QUESTION, TOP, gold, words=200)] == ["g1", "g2", "g3"]
    assert [d.id for d in tc.copyable_gold(QUESTION, TOP, gold, words=2)] == ["g1"]
    assert tc.copyable_gold(QUESTION, TOP, [TOP[0]]) == []


def test_title_like_spans_quoted_capitalised_runs_and_index_titles() -> None:
    text = 'Which Kentucky county has the Lake Louisvilla neighborhood, home of "the old mill" and Macintosh?'
    # "Which" is an opener, "the" ends no run; "Macintosh" is a single word: only an index title makes it a span
    assert tc.title_like_spans(text) == ["Lake Louisvilla", "the old mill"]
    titles = tc.TitleIndex.of(["Macintosh", "Lake Louisvilla", "Oldham County, Kentucky", "The"])
    assert tc.title_like_spans(text, titles) == ["Lake Louisvilla", "the old mill", "Macintosh"]
    # connectors inside a run (and its connector-free pieces), a trailing possessive, punctuation cutting runs
    assert tc.title_like_spans("The Museum of Modern Art's founder, Abby Rockefeller, met Louis.") == [
        "The Museum of Modern Art", "The Museum", "Modern Art", "Abby Rockefeller"]
    # index titles: the longest match wins ("Kiss and Tell", not also "Kiss" or "Tell")
    kiss = tc.TitleIndex.of(["Kiss (album)", "Kiss and Tell (1945 film)", "Tell"])
    assert tc.title_like_spans("he saw Kiss and Tell twice", kiss) == ["Kiss and Tell"]
    assert tc.title_like_spans("he saw Kiss twice", kiss) == ["Kiss"]
    # a lower-case word that equals a title is not a span (titles must start capitalised or with a digit)
    assert tc.title_like_spans("he ate a macintosh", titles) == []


class FakeSearch:
    """A retriever's batched search over a fixed table: query -> documents (rank order); records the queries."""

    def __init__(self, table: dict[str, list[Document]]) -> None:
        self.table, self.queries = table, []  # type: ignore[var-annotated]

    def __call__(self, queries: list[str], k: int) -> list[list[Document]]:
        self.queries.extend(queries)
        return [self.table.get(q, [])[:k] for q in queries]


def test_heuristic_adds_exact_title_matches_in_span_order_up_to_the_cap() -> None:
    top = [doc("t1", "Erika Jayne", "Erika Jayne is a singer from Atlanta who met Marco Da Silva in Los Angeles.")]
    kt = doc("k1", "Kiss and Tell (1945 film)")
    search = FakeSearch({
        "Kiss and Tell": [doc("x", "Kiss Me"), kt],  # the exact match ranks 2nd: still added, "Kiss Me" is not
        "Marco Da Silva": [doc("m1", "Marco Da Silva (dancer)"), doc("m2", "Marco da Silva (footballer)")],
        "Los Angeles": [doc("la", "Los Angeles")],
    })
    q = "Did Erika Jayne star in Kiss and Tell?"
    h = tc.heuristic_documents(q, top, search, cap=4, k=8)
    # spans: the question's ("Erika Jayne" is t1's own title: skipped), then t1's window in order
    # t1's capitalised run "Marco Da Silva in Los Angeles" is queried whole, then its connector-free pieces
    assert h.queries == ["Kiss and Tell", "Marco Da Silva in Los Angeles", "Marco Da Silva", "Los Angeles"]
    assert search.queries == h.queries
    assert [d.id for d in h.documents] == ["t1", "k1", "m1", "m2"]  # cap 4: Los Angeles does not fit
    assert h.added_by == {"k1": "Kiss and Tell", "m1": "Marco Da Silva", "m2": "Marco Da Silva"}
    assert [d.id for d in tc.heuristic_documents(q, top, search, cap=1).documents] == ["t1"]
    with pytest.raises(ConfigError, match="below"):
        tc.heuristic_documents(q, [*top, kt], search, cap=1)


def _bm25(tmp_path: Path, docs: list[Document]) -> Any:
    """A real bm25s retriever over `docs`."""
    write_corpus(tmp_path / "corpus.jsonl", docs)
    build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index", RetrieverConfig(), overwrite=True)
    return load_retriever(RetrieverConfig(), tmp_path / "index")


def test_heuristic_on_a_real_bm25_index(tmp_path: Path) -> None:
    docs = [
        doc("a", "Garbage Warrior", "Garbage Warrior is a film about the architect Michael Reynolds."),
        doc("b", "Michael Reynolds", "Michael Reynolds is an architect known for the Earthship."),
        doc("c", "Earthship", "An Earthship is a kind of passive solar house."),
        doc("d", "Reynolds Wrap", "Reynolds Wrap is an aluminium foil brand."),
        doc("e", "Solar house", "A solar house uses the sun."),
    ]
    bm25 = _bm25(tmp_path, docs)
    top = bm25.search(["Who made the film Garbage Warrior?"], 1)[0]
    assert [d.id for d in top] == ["a"]
    titles = tc.TitleIndex.of(d.title for d in docs)
    h = tc.heuristic_documents("Who made the film Garbage Warrior?", top, bm25.search, titles, cap=3, k=3)
    # "Michael Reynolds" (capitalised run and an index title) finds b; "Reynolds Wrap" is retrieved but not exact
    assert h.queries == ["Michael Reynolds"]
    assert [d.id for d in h.documents] == ["a", "b"]


def test_contexts_rows_are_what_s3_eval_reads(tmp_path: Path) -> None:
    rows = [tc.contexts_row("q1", TOP, added=["t3"]), tc.contexts_row("q2", [])]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = read_contexts_file(path, ["q1", "q2"])
    assert [d["id"] for d in got["q1"]] == ["t1", "t2", "t3"] and got["q2"] == []
    with pytest.raises(DataFormatError, match="no contexts for 1 of 3"):
        read_contexts_file(path, ["q1", "q2", "q3"])


def test_cap_hits_from_one_longer_run() -> None:
    # lengths measured at 48: 2 and 15 stop early everywhere; 16 hits 16; 31 hits 16; 32 hits 16 and 32; 48 all
    shares = tc.cap_hit_shares([2, 15, 16, 31, 32, 48], [16, 32, 48])
    assert shares == {16: 4 / 6, 32: 2 / 6, 48: 1 / 6}
    assert tc.smallest_cap(shares) is None
    assert tc.smallest_cap({16: 0.2, 32: 0.05, 48: 0.049}) == 48  # strictly below 5%
    with pytest.raises(DataFormatError):
        tc.cap_hit_shares([], [16])


def row(acc: float | None, n_docs: int, error: str | None = None, recall: float | None = None) -> dict[str, object]:
    return {"metrics": {"genacc": acc}, "context_ids": [f"d{i}" for i in range(n_docs)], "error": error,
            **({"support_recall": recall} if recall is not None else {})}


def test_paired_rows_over_the_given_questions() -> None:
    ids = ["q1", "q2", "q3", "q4"]
    runs = {
        "naive_rag_top3": {"q1": row(0.0, 3, recall=0.0), "q2": row(1.0, 3, recall=0.5),
                           "q3": row(0.0, 3, recall=0.5), "q4": row(1.0, 3, recall=1.0),
                           "q5": row(1.0, 3, recall=0.0)},  # q5 is not among the questions compared
        "a1": {"q1": row(1.0, 4), "q2": row(1.0, 3), "q3": row(0.0, 4), "q4": row(0.0, 3, error="judge failed")},
    }
    table = {e["method"]: e for e in tc.paired_rows(runs, ["naive_rag_top3"], ids, n_resamples=200)}
    assert table["naive_rag_top3"]["genacc"]["mean"] == 0.5 and table["naive_rag_top3"]["vs"] == {}
    a1 = table["a1"]
    assert a1["genacc"]["mean"] == pytest.approx(2 / 3) and a1["genacc"]["n"] == 3  # q4 failed: left out
    assert a1["mean_docs"] == 3.5
    assert table["naive_rag_top3"]["support_recall"] == 0.5 and a1["support_recall"] is None  # rows without it
    d = a1["vs"]["naive_rag_top3"]
    assert (d["n"], d["diff"], d["wins"], d["losses"]) == (3, pytest.approx(1 / 3), 1, 0)
    assert d["ci95"][0] <= d["diff"] <= d["ci95"][1]


def test_query_kinds_and_the_module_doctests() -> None:
    """`query_kind` (benchmarks/transfer3_heldout_modes.py's classes) and the doctests of this module, training/prep/oracle.py
    (the copyable teacher's helpers), training/run/evaluate.py and experiments/transfer_ablation.py (the held-out
    ablation's table)."""
    import doctest

    import experiments.transfer_ablation
    import training.prep.oracle
    import training.run.evaluate

    for mod in (tc, training.prep.oracle, training.run.evaluate, experiments.transfer_ablation):
        res = doctest.testmod(mod, raise_on_error=False)
        assert res.failed == 0, mod.__name__
    top = [Document(id="a", title="Harrow (town)", text="Harrow lies near Ostmark.")]
    gold = [Document(id="g", title="Ostmark", text="")]
    assert tc.query_kind("Harrow", "Where?", top, gold) == "top3_title"  # a title without its parenthetical
    assert tc.query_kind("  ", "Where?", top, gold) == "stop"
    assert tc.query_kind("Ostmark", "Where?", top, []) == "other_visible"  # visible, but not a missing gold title


def test_each_check_runs_as_its_s3_eval_arguments_and_a_missing_piece_is_named(tmp_path: Path) -> None:
    """The method -> `s3 eval` mapping: no_retrieval reads no index (`s3 eval` refuses an --index it would not use:
    the first no_retrieval run stopped there), the contexts files, and errors that say what to pass."""
    for method in ("heuristic", "heuristic_pruned", "a2", "heuristic_plus_gold", "heuristic_plus_next"):
        assert tc.eval_method_args(method, tmp_path) == (
            ["searcher", "--contexts", str(tmp_path / f"{method}.jsonl")], [], True)
    assert tc.eval_method_args("untrained", tmp_path, None, ["searcher.policy=vllm"]) == (
        ["searcher"], ["searcher.policy=vllm"], True)
    assert tc.eval_method_args("a0", tmp_path, "p2", ["searcher.additive=true"])[1] == [
        "searcher.policy_path=p2", "searcher.additive=true"]
    for method, policy, extra, says in (
        ("naive_rag_topx", None, [], "N >= 1"), ("naive_rag_top0", None, [], "N >= 1"),
        ("a0", "p2", [], "--additive"), ("a0", None, ["searcher.additive=true"], "--policy"),
        ("policy_", "p", [], "unknown method"), ("policy_x", None, [], "--policy DIR"), ("bm25", None, [], "unknown"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            tc.eval_method_args(method, tmp_path, policy, extra)


def test_report_tiers_never_let_a_run_in_progress_shrink_the_tables() -> None:
    """The report's tables: one per finished length, longest first; a run short of its length is listed apart and joins
    only the tables it already covers, instead of cutting every table to its prefix (the 1.5B's table fell from 100 to 32 questions while A0 was running)."""
    tiers, running = tc.report_tiers({
        "naive_rag_top3": (300, 300), "policy_x": (300, 300), "heuristic": (200, 300), "a1": (100, 100)})
    # the heuristic, extended from 200 to 300 and 200 in, is in the table of the first 100 but defines none itself
    assert tiers == [(300, ["naive_rag_top3", "policy_x"]),
                     (100, ["naive_rag_top3", "policy_x", "heuristic", "a1"])]
    assert running == {"heuristic": (200, 300)}
    # no table without the baseline finished that long, nor with the baseline alone; a run asked for nothing is running
    assert tc.report_tiers({"naive_rag_top3": (50, 100), "a1": (100, 100)}) == ([], {"naive_rag_top3": (50, 100)})
    assert tc.report_tiers({"naive_rag_top3": (100, 100), "a0": (0, 0)}) == ([], {"a0": (0, 0)})


def test_place_rows_split_the_questions_by_where_the_missing_gold_was_visible() -> None:
    """The report's diagnosis table: per place, how often each run got a missing gold paragraph in, and its GenAcc."""
    ids = ["q1", "q2", "q3"]
    places = {"q1": "documents", "q2": "documents", "q3": "none missing"}
    missing = {"q1": {"g1"}, "q2": {"g2"}, "q3": set()}
    runs = {
        "naive_rag_top3": {"q1": row(0.0, 3), "q2": row(1.0, 3), "q3": row(1.0, 3)},
        "heuristic": {"q1": {**row(1.0, 4), "context_ids": ["d0", "g1"]}, "q2": row(None, 3, error="timeout"),
                      "q3": row(1.0, 4)},
    }
    table = {e["place"]: e for e in tc.place_rows(runs, places, missing, ids)}
    assert list(table) == ["none missing", "documents"]  # GOLD_PLACES order, empty places left out
    docs = table["documents"]
    assert docs["questions"] == 2 and docs["methods"]["naive_rag_top3"] == {"found": 0, "genacc": 0.5, "n": 2}
    assert docs["methods"]["heuristic"] == {"found": 1, "genacc": 1.0, "n": 1}  # q2 failed: not scored, not wrong
    assert table["none missing"]["methods"]["heuristic"]["found"] == 0


def test_the_plus_controls_read_only_the_question_window_after_the_script() -> None:
    """heuristic_plus_gold adds the gold among the question's own ranks 4-8 that the script lacks (a perfect selector
    where the script ends, at most 2); a gold at rank 9 or already in is not added; heuristic_plus_next adds the
    best-ranked document of that window the script lacks (bm25 order, no reading)."""
    ranked = [doc(f"r{i}", f"R{i}") for i in range(1, 10)]  # ranks 1..9
    script = [*ranked[:3], ranked[4]]  # naive RAG's top-3 and rank 5 (the script added it)
    gold = {"r5", "r7", "r8", "r9", "r1"}
    assert [d.id for d in tc.plus_documents(script, ranked, gold)] == ["r1", "r2", "r3", "r5", "r7", "r8"]
    assert [d.id for d in tc.plus_documents(script, ranked, gold, add=1)] == ["r1", "r2", "r3", "r5", "r7"]
    assert [d.id for d in tc.plus_documents(script, ranked, {"r9"})] == ["r1", "r2", "r3", "r5"]
    assert [d.id for d in tc.plus_documents(script, ranked, add=1)] == ["r1", "r2", "r3", "r5", "r4"]
    assert tc.plus_documents(script, ranked[:3], add=1) == script  # nothing beyond the top-3 retrieved


def test_the_reader_control_reads_ranks_4_to_16_and_adds_only_what_clears_the_threshold() -> None:
    """heuristic_plus_reader: the candidates are the question's own ranks 4-16 the script lacks; the reader adds its
    best (at most 2), only at or above the threshold, and the threshold is the lowest one whose kept picks are gold at
    least as often as the script's additions."""
    ranked = [doc(f"r{i}", f"R{i}") for i in range(1, 21)]  # ranks 1..20
    script = [*ranked[:3], ranked[4]]
    cands = tc.read_candidates(script, ranked)
    assert [d.id for d in cands] == [f"r{i}" for i in (4, *range(6, 17))]  # rank 5 is in; 17+ are not read
    scores = [0.0] * len(cands)
    scores[5], scores[9], scores[1] = 2.0, 1.5, 1.4  # r10, r14, r6
    assert [cands[i].id for i in tc.read_picks(scores, threshold=1.0)] == ["r10", "r14"]
    assert [cands[i].id for i in tc.read_picks(scores, threshold=1.0, add=1)] == ["r10"]
    assert [cands[i].id for i in tc.read_picks(scores, threshold=1.6)] == ["r10"]
    assert tc.read_picks(scores, threshold=3.0) == []
    # picks of held-out questions, best first: gold, gold, not, not, gold, not; the script's precision 0.5
    picks = [(5.0, True), (4.0, True), (3.0, False), (2.0, False), (1.0, True), (0.0, False)]
    assert tc.precision_threshold(picks, 0.5) == 0.0  # 3 of 6 gold
    assert tc.precision_threshold(picks, 0.6) == 1.0  # 3 of 5
    assert tc.precision_threshold(picks, 0.65) == 3.0  # 2 of 3
    assert tc.precision_threshold(picks, 0.7) == tc.precision_threshold(picks, 1.0) == 4.0  # 2 of 2
    assert tc.precision_threshold([(1.0, False)], 0.1) == float("inf")


def test_the_ranker_sees_the_page_a_found_document_names_and_learns_to_put_it_first(tmp_path: Path) -> None:
    """heuristic_plus_ranker1's features on a real bm25 index: past the script's documents, the page one of them names
    (a second hop the script does not take) is `named_in_found`; the question's own words are `named_in_question`.
    A ranker fitted where that feature marks the gold puts such a candidate above bm25 order and above a reader that
    says nothing, and its weights say why; candidates of one class are refused with the counts."""
    docs = [
        doc("a", "Garbage Warrior", "Garbage Warrior is a film about the architect Michael Reynolds."),
        doc("b", "Michael Reynolds", "Michael Reynolds is an architect who founded Earthship Biotecture."),
        doc("c", "Earthship Biotecture", "Earthship Biotecture sells a house kit in Taos."),
        *(doc(f"f{i}", f"Film {i}", f"Film {i} is a film about a house and an architect.") for i in range(6)),
    ]
    bm25 = _bm25(tmp_path, docs)
    question = "Which firm builds the houses of the architect in the film Garbage Warrior?"
    ranked = bm25.search([question], tc.READ_LAST)[0]
    h = tc.heuristic_documents(question, ranked[:3], bm25.search, tc.TitleIndex.of(d.title for d in docs), k=3)
    assert "b" in {d.id for d in h.documents} and "c" not in {d.id for d in h.documents}
    cands = tc.read_candidates(h.documents, ranked)
    rank = {d.id: n for n, d in enumerate(ranked, 1)}
    rows = tc.ranker_rows(question, h.documents, cands, [rank[d.id] for d in cands], [0.0] * len(cands))
    named = {d.id for d, r in zip(cands, rows, strict=True) if r["named_in_found"]}
    assert named == {"c"}, [(d.id, r) for d, r in zip(cands, rows, strict=True)]
    assert all(r["named_in_question"] == 0 for r in rows)
    # a fit where the gold is the named page, at any rank, and the reader's score is noise
    fit = [{"reader": (i * 7 % 5) - 2.0, "log_rank": 1.0 + i % 3, "named_in_found": float(i % 4 == 0),
            "named_in_question": 0.0, "names_found": 0.0} for i in range(200)]
    weights = tc.fit_ranker(fit, [r["named_in_found"] > 0 for r in fit])
    assert set(weights) == {*tc.RANKER_FEATURES, "bias"} and weights["named_in_found"] > 2 > abs(weights["reader"])
    scores = [tc.ranker_score(weights, r) for r in rows]
    assert cands[tc.read_picks(scores, -float("inf"), 1)[0]].id == "c" != cands[0].id  # not bm25 order's best
    no_reading = tc.fit_ranker(fit, [r["named_in_found"] > 0 for r in fit], tc.NO_READING)
    assert set(no_reading) == {*tc.NO_READING, "bias"}  # no reader: it ranks the same page first without one
    assert cands[tc.read_picks([tc.ranker_score(no_reading, r) for r in rows], -float("inf"), 1)[0]].id == "c"
    with pytest.raises(ValueError, match="0 gold of 200"):
        tc.fit_ranker(fit, [False] * len(fit))
