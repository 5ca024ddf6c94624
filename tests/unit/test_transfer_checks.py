"""The zero-training checks' logic (experiments/transfer/checks.py): the copyable teacher's gold choice (A1), title-like
spans and the title-following control, the contexts rows `s3 eval --contexts` reads, max_tokens cap hits, the paired
table; the table of methods (experiments/transfer/methods.py). Hand-made data with hand-derived answers; one real BM25
index."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_title_following import REYNOLDS

from eval.contexts import read_contexts_file
from experiments.transfer import checks as tc
from experiments.transfer import methods as tm
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
    h = tc.title_following_documents(q, top, search, cap=4, k=8)
    # spans: the question's ("Erika Jayne" is t1's own title: skipped), then t1's window in order
    # t1's capitalised run "Marco Da Silva in Los Angeles" is queried whole, then its connector-free pieces
    assert h.queries == ["Kiss and Tell", "Marco Da Silva in Los Angeles", "Marco Da Silva", "Los Angeles"]
    assert search.queries == h.queries
    assert [d.id for d in h.documents] == ["t1", "k1", "m1", "m2"]  # cap 4: Los Angeles does not fit
    assert h.added_by == {"k1": "Kiss and Tell", "m1": "Marco Da Silva", "m2": "Marco Da Silva"}
    assert [d.id for d in tc.title_following_documents(q, top, search, cap=1).documents] == ["t1"]
    with pytest.raises(ConfigError, match="below"):
        tc.title_following_documents(q, [*top, kt], search, cap=1)


def _bm25(tmp_path: Path, docs: list[Document]) -> Any:
    """A real bm25s retriever over `docs`."""
    write_corpus(tmp_path / "corpus.jsonl", docs)
    build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index", RetrieverConfig(), overwrite=True)
    return load_retriever(RetrieverConfig(), tmp_path / "index")


def test_heuristic_on_a_real_bm25_index(tmp_path: Path) -> None:
    docs = [
        *REYNOLDS,
        doc("e", "Solar house", "A solar house uses the sun."),
    ]
    bm25 = _bm25(tmp_path, docs)
    top = bm25.search(["Who made the film Garbage Warrior?"], 1)[0]
    assert [d.id for d in top] == ["a"]
    titles = tc.TitleIndex.of(d.title for d in docs)
    h = tc.title_following_documents("Who made the film Garbage Warrior?", top, bm25.search, titles, cap=3, k=3)
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
    """`query_kind` (benchmarks/transfer3_heldout_modes.py's classes) and the doctests of the checks' logic, the table
    of methods, training/prep/oracle.py (the copyable teacher's helpers), training/run/evaluate.py and
    experiments/transfer/ablation.py (the held-out ablation's table)."""
    import doctest

    import experiments.transfer.ablation
    import training.prep.oracle
    import training.run.evaluate

    for mod in (tc, tm, training.prep.oracle, training.run.evaluate, experiments.transfer.ablation):
        res = doctest.testmod(mod, raise_on_error=False)
        assert res.failed == 0, mod.__name__
    top = [Document(id="a", title="Harrow (town)", text="Harrow lies near Ostmark.")]
    gold = [Document(id="g", title="Ostmark", text="")]
    assert tc.query_kind("Harrow", "Where?", top, gold) == "top3_title"  # a title without its parenthetical
    assert tc.query_kind("  ", "Where?", top, gold) == "stop"
    assert tc.query_kind("Ostmark", "Where?", top, []) == "other_visible"  # visible, but not a missing gold title


def test_each_check_runs_as_its_s3_eval_arguments_and_a_missing_piece_is_named(tmp_path: Path) -> None:
    """The METHODS table -> `s3 eval`: no_retrieval reads no index (`s3 eval` refuses an --index it would not use: the
    first no_retrieval run stopped there), the contexts files under the names the results keep, the live script
    elsewhere, a named method's settings fixed by the table, and errors that say what to pass."""
    for method, stem in (("title_following", "heuristic"), ("title_following_pruned", "heuristic_pruned"),
                         ("a2", "a2"), ("title_following_plus_gold", "heuristic_plus_gold"),
                         ("heuristic_plus_next", "heuristic_plus_next")):  # an old name is read as its method
        assert tm.eval_args(method, tmp_path) == (["searcher", "--contexts", str(tmp_path / f"{stem}.jsonl")], [], True)
    assert tm.eval_args("title_following", tmp_path, dataset="2wiki_dev200")[0] == ["title_following"]
    # a named method runs with the table's settings: repeating them (docs/transfer.md's commands) changes nothing
    assert tm.eval_args("untrained", tmp_path, None, ["searcher.policy=vllm"]) == (
        ["searcher"], ["searcher.policy_path=null", "searcher.policy=vllm"], True)
    assert tm.eval_args("a0", tmp_path, "p2", ["searcher.additive=true"])[1] == [
        "searcher.policy_path=p2", "searcher.additive=true", "searcher.context_cap=5"]
    assert tm.eval_args("policy_x", tmp_path, "p", ["searcher.k=16"])[1] == ["searcher.policy_path=p", "searcher.k=16"]
    assert tm.eval_args("trained_cap", tmp_path, "p", k=3)[1][-1] == "searcher.context_cap=3"
    for method, policy, extra, dataset, says in (
        ("naive_rag_topx", None, [], "hotpotqa_dev500", "N >= 1"), ("naive_rag_top0", None, [], "hotpotqa_dev500", "N >= 1"),
        ("a0", None, [], "hotpotqa_dev500", "--policy"), ("untrained", None, ["searcher.k=4"], "hotpotqa_dev500", "policy_NAME"),
        ("policy_", "p", [], "hotpotqa_dev500", "unknown method"), ("policy_x", None, [], "hotpotqa_dev500", "--policy DIR"),
        ("bm25", None, [], "hotpotqa_dev500", "unknown"), ("a1", None, [], "musique_dev200", "hotpotqa_dev500"),
        ("title_following_mine", None, [], "musique_dev200", "--additive"),
        ("title_following", None, ["searcher.k=4"], "hotpotqa_dev500", "contexts file"),
        ("title_following", None, ["searcher.k=4"], "musique_dev200", "title_following_NAME"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            tm.eval_args(method, tmp_path, policy, extra, dataset=dataset)


def test_every_method_of_the_table_is_a_valid_s3_eval_call(tmp_path: Path) -> None:
    """Every live entry's --method is an `s3 eval` method and its --sets load on the config it runs with, and pass the
    searcher kind's own check as `s3 eval` builds it (--method title_following runs the script alone: a reading
    setting there is refused) (a misspelt or moved setting stops a run halfway: the table is the one place to change
    it); the methods that read further are the reading searcher; every old name maps to a method whose files keep
    it."""
    from eval.methods import METHODS as EVAL_METHODS
    from s3.config import load_config
    from searcher.kinds import check_settings

    root = Path(__file__).resolve().parents[2]
    for name, m in tm.METHODS.items():
        if not m.method:
            continue
        assert m.method[0] in EVAL_METHODS, name
        config = root / "configs" / ("transfer.toml" if m.study == "attempt" else "transfer3.toml")
        sets = [s.format(policy=tmp_path, k=3, N=4, NAME="x") for s in m.sets]
        try:
            s = load_config(str(config), sets).searcher
            if m.method[0] == "title_following":  # what eval/build.py runs for that method: the script
                s = s.model_copy(update={"kind": "title_following", "policy_path": None})
            check_settings(s)
        except ConfigError as e:  # an unknown or moved key: the one place to change is the table
            pytest.fail(f"METHODS[{name!r}] (experiments/transfer/methods.py) no longer loads: {e}")
        assert tm.reads(m) == (s.kind == "reading"), name
    for name in ("title_following_links1", "title_following_ranker1", "title_following_reader"):
        assert tm.reads(tm.METHODS[name]) and tm.scripted(tm.METHODS[name]), name
    for old, new in tm.OLD_NAMES.items():
        assert tm.canonical(old) == new and tm.stored_name(new) == old


def test_help_prints_the_table_of_methods(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` of both command lines (and of `run`) prints every method of its study, and the checks' old names."""
    from experiments.transfer import attempt, checks_run

    for main, argv, study in ((checks_run.main, ["--help"], "checks"), (checks_run.main, ["run", "--help"], "checks"),
                              (attempt.main, ["--help"], "attempt")):
        monkeypatch.setattr("sys.argv", ["x", *argv])
        with pytest.raises(SystemExit):
            main()
        out = capsys.readouterr().out
        assert all(f"\n  {name}\n" in out for name, m in tm.METHODS.items() if m.study in (study, "both")), argv
        assert ("heuristic=title_following," in out) == ("trained_cap" not in out) == (study == "checks")


def test_a_check_runs_from_the_table_into_the_folder_its_results_keep(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`run METHOD`: an old name from docs/transfer.md's command lines resumes the same run (the same contexts file,
    the same folder); a live method on another dataset runs `s3 eval` with the table's settings; a contexts file is
    refused there, before anything is built."""
    from experiments.transfer import checks_run as cr

    work = tmp_path / "runs" / "hotpotqa_dev500"
    for d in (work / "index", work.parent / "musique_dev200" / "index", tmp_path / "checks" / "contexts"):
        d.mkdir(parents=True)
    (work.parent / "musique_dev200" / "data").mkdir()
    (work.parent / "musique_dev200" / "data" / "corpus.jsonl").write_text("")
    (tmp_path / "checks" / "contexts" / "a1.jsonl").write_text("")
    monkeypatch.setattr(cr, "WORK", work)
    monkeypatch.setattr(cr, "RESULTS", tmp_path / "checks")
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(cr, "run_s3", lambda *a: calls.append(a))
    for method in ("heuristic", "title_following"):  # the old name and the new: one run
        cr.run(method, "qwen15", 500, None, None, [])
    for call in calls:
        assert call[call.index("--out") + 1] == str(tmp_path / "checks" / "runs" / "qwen15" / "heuristic")
        assert call[call.index("--method") + 1:] == ("searcher", "--contexts",
                                                     str(tmp_path / "checks" / "contexts" / "heuristic.jsonl"))
    calls.clear()
    cr.run("title_following_links1", "qwen05", 200, None, None, ["searcher.reading.read_last=16"], "musique_dev200")
    (call,) = calls
    out = Path(call[call.index("--out") + 1])
    assert str(out).endswith("musique_dev200/runs/qwen05/title_following_links1")
    # the reading searcher: --method searcher with its kind and [searcher.reading] settings, none of the flat old keys
    assert call[call.index("--method") + 1:] == ("searcher",)
    sets = {call[i + 1] for i, a in enumerate(call) if a == "--set"}
    assert {"searcher.kind=reading", "searcher.reading.read_last=16", "searcher.reading.ranker=links-hotpotqa"} <= sets
    assert not any(x.split("=")[0] in ("searcher.read_last", "searcher.ranker", "searcher.reader") for x in sets)
    # a finished run (a committed one, made under --method title_following) is left as it is: no `s3 eval` call
    calls.clear()
    out.mkdir(parents=True)
    (out / "summary.json").write_text('{"n_scored": 200, "n_failed": 0, "n_missing": 0}')
    cr.run("title_following_links1", "qwen05", 200, None, None, [], "musique_dev200")
    assert calls == []
    with pytest.raises(SystemExit, match="hotpotqa_dev500"):
        cr.run("heuristic_plus_gold", "qwen15", 100, None, None, [], "2wiki_dev200")
    assert not (work.parent / "2wiki_dev200").exists()


def test_documents_from_replays_a_live_script_or_reading_run_and_refuses_a_policy(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`run METHOD --documents-from GEN`: the documents another generator's run of a script run live recorded (the
    reading searcher's too: title_following_ranker1 on 2wiki_dev200 with the 0.5B) become the contexts file of this
    run, read from its contexts.jsonl.gz; a policy searcher's run is refused (it samples)."""
    import gzip

    from experiments.transfer import checks_run as cr

    monkeypatch.setattr(cr, "WORK", tmp_path / "runs" / "hotpotqa_dev500")
    monkeypatch.setattr(cr, "RESULTS", tmp_path / "checks")
    src = tmp_path / "checks" / "2wiki_dev200" / "runs" / "qwen15" / "title_following_ranker1"
    src.mkdir(parents=True)
    rows = [{"id": "q1", "documents": [{"id": "d1"}], "turns": 2}, {"id": "q2", "documents": [{"id": "d2"}]}]
    (src / "contexts.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    out = cr._replay("title_following_ranker1", "qwen15", "qwen05", "2wiki_dev200")
    assert out == tmp_path / "runs" / "2wiki_dev200" / "replay" / "qwen15" / "title_following_ranker1.jsonl"
    assert [json.loads(x) for x in out.read_text().splitlines()] == [{"id": r["id"], "documents": r["documents"]}
                                                                      for r in rows]
    with pytest.raises(SystemExit, match="policy searcher samples"):
        cr._replay("policy_shipped", "qwen15", "qwen05", "2wiki_dev200")


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
    h = tc.title_following_documents(question, ranked[:3], bm25.search, tc.TitleIndex.of(d.title for d in docs), k=3)
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
