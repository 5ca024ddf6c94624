"""The title-following searcher (searcher/title_following.py): which spans it searches, which pages it keeps, the
records it returns (the LLM searcher's SearchResult / SearchStep), its settings (cap, k, max_turns = 0), the
deadline hook the services use, one batched retrieval call per step, and the refusal of a corpus without titles.
Hand-made documents with hand-derived answers; the builder on a real bm25 index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.transfer import checks as tc
from experiments.transfer import methods as tm
from s3core.corpus import write_corpus
from s3core.errors import ConfigError, S3Error
from s3core.types import Document
from searcher.build import build_configured_searcher
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.retrieval import build_index, load_retriever
from searcher.service import summarize_result
from searcher.spans import TitleIndex
from searcher.title_following import ReadingSearcher, TitleFollowingSearcher, follow_titles, visible_spans
from searcher.title_following.links import LinkRanker, ranker_rows


def doc(i: str, title: str, text: str = "") -> Document:
    return Document(id=i, title=title, text=text)


class FakeRetriever:
    """A retriever with hand-written rankings: the question's top documents and each span's hits."""

    def __init__(self, table: dict[str, list[Document]]) -> None:
        self.table = table
        self.calls: list[tuple[list[str], int]] = []

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        self.calls.append((list(queries), k))
        return [self.table.get(q, [])[:k] for q in queries]


Q = "Did Erika Jayne star in Kiss and Tell?"
T1 = doc("t1", "Erika Jayne", "Erika Jayne is a singer from Atlanta who met Marco Da Silva in Los Angeles.")
KT = doc("k1", "Kiss and Tell (1945 film)", "Kiss and Tell is a film.")
TABLE = {
    Q: [T1],
    "Kiss and Tell": [doc("x", "Kiss Me"), KT],  # the exact title ranks 2nd: still kept; "Kiss Me" is not
    "Marco Da Silva": [doc("m1", "Marco Da Silva (dancer)"), doc("m2", "Marco da Silva (footballer)")],
    "Los Angeles": [doc("la", "Los Angeles")],
}


def test_spans_are_read_in_order_and_a_top_documents_own_title_is_skipped() -> None:
    assert visible_spans(Q, [T1]) == ["Kiss and Tell", "Marco Da Silva in Los Angeles", "Marco Da Silva", "Los Angeles"]
    assert visible_spans(Q, [T1], words=0) == ["Kiss and Tell"]  # only the title of t1 is read: its own, skipped
    # an index title variant makes a single word a span
    assert visible_spans("Was Macintosh first?", [], TitleIndex.of(["Macintosh"])) == ["Macintosh"]
    assert visible_spans("Was Macintosh first?", []) == []


def test_search_returns_the_llm_searchers_records_with_d0_kept_and_exact_titles_added() -> None:
    r = FakeRetriever(TABLE)
    s = TitleFollowingSearcher(r, SearcherConfig(k=8, context_cap=4), k0=1)
    (res,) = s.search([Q])
    assert [d.id for d in res.documents] == ["t1", "k1", "m1", "m2"]  # cap 4: Los Angeles does not fit
    assert r.calls == [([Q], 1), (["Kiss and Tell", "Marco Da Silva in Los Angeles", "Marco Da Silva", "Los Angeles"], 8)]
    d0, turn = res.steps
    assert (d0.turn, d0.query, d0.retrieved_ids, d0.selected_ids, d0.search_complete) == (0, Q, ["t1"], ["t1"], None)
    assert (turn.turn, turn.query, turn.search_complete) == (1, "Kiss and Tell", True)
    assert turn.queries == r.calls[1][0] and turn.selected_ids == ["k1", "m1", "m2"]
    assert turn.retrieved_ids == ["x", "k1", "m1", "m2", "la"]
    assert res.turns == 1 and res.error is None and res.trajectory is None
    # what /search and MCP answer with: every document's admission turn, no policy call, no cost
    out = summarize_result(res, max_turns=3)
    assert [(d.id, d.turn) for d in out.documents] == [("t1", 0), ("k1", 1), ("m1", 1), ("m2", 1)]
    assert out.cost is not None and out.cost.policy_calls == 0 and out.trajectory.stop == "search_complete"
    assert out.trajectory.queries == [Q, *turn.queries]  # begin-with-search is the question, as in the loop
    # the pure function agrees with the searcher, and the transfer checks' control is the same function
    f = follow_titles(Q, [T1], r.search, cap=4, k=8)
    h = tc.title_following_documents(Q, [T1], r.search, cap=4, k=8)
    assert [d.id for d in f.documents] == [d.id for d in h.documents] == [d.id for d in res.documents]
    assert f.added_by == {"k1": "Kiss and Tell", "m1": "Marco Da Silva", "m2": "Marco Da Silva"} == h.added_by


def test_the_cap_k_and_max_turns_are_the_searcher_settings() -> None:
    r = FakeRetriever(TABLE)
    s = TitleFollowingSearcher(r, SearcherConfig(k=1, context_cap=9), k0=1)
    (res,) = s.search([Q])
    assert [d.id for d in res.documents] == ["t1", "m1", "la"]  # k = 1 a span: KT (rank 2) is not retrieved
    (res,) = s.search([Q], cfg=SearcherConfig(k=8, max_turns=0, context_cap=9))
    assert [d.id for d in res.documents] == ["t1"] and res.turns == 0 and res.steps[0].search_complete is True
    (res,) = s.search([Q], cfg=SearcherConfig(k=8, context_cap=1))  # no room: no span is searched
    assert [d.id for d in res.documents] == ["t1"] and len(r.calls[-1][0]) == 1
    with pytest.raises(ConfigError, match="context_cap >= 3"):
        TitleFollowingSearcher(r, SearcherConfig(context_cap=2), k0=3)
    with pytest.raises(ConfigError, match="below"):
        follow_titles(Q, [T1, KT], r.search, cap=1, k=8)


def test_a_batch_makes_one_retrieval_call_per_step_and_keeps_question_order() -> None:
    q2 = "Who is Shirley Temple?"
    r = FakeRetriever({**TABLE, q2: [doc("s0", "Child actors")], "Shirley Temple": [doc("st", "Shirley Temple")]})
    s = TitleFollowingSearcher(r, SearcherConfig(k=8, context_cap=3), k0=1)
    a, b, c = s.search([Q, q2, "nothing named here"])
    assert len(r.calls) == 2  # D0 for all three, then every span of every question at once
    assert [d.id for d in a.documents] == ["t1", "k1", "m1"]
    assert [d.id for d in b.documents] == ["s0", "st"]
    assert c.documents == [] and c.turns == 0
    assert s.last_stats.questions == 3 and s.last_stats.retrieval_calls == 2


def test_a_cancelled_question_stops_at_d0_degraded_and_empty_questions_are_refused() -> None:
    r = FakeRetriever(TABLE)
    s = TitleFollowingSearcher(r, SearcherConfig(k=8, context_cap=5), k0=1)
    (res,) = s.search([Q], cancelled=[lambda: True])
    assert [d.id for d in res.documents] == ["t1"] and res.degraded and res.error_code == "deadline_exceeded"
    with pytest.raises(S3Error, match="question 1 is empty"):
        s.search([Q, "  "])


def _index(tmp_path: Path, docs: list[Document]) -> Path:
    write_corpus(tmp_path / "corpus.jsonl", docs)
    return build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index", RetrieverConfig(), overwrite=True)


REYNOLDS = [  # a film, its director, the house he is known for, and a name that only looks like his
    doc("a", "Garbage Warrior", "Garbage Warrior is a film about the architect Michael Reynolds."),
    doc("b", "Michael Reynolds", "Michael Reynolds is an architect known for the Earthship."),
    doc("c", "Earthship", "An Earthship is a kind of passive solar house."),
    doc("d", "Reynolds Wrap", "Reynolds Wrap is an aluminium foil brand."),
]


def test_built_from_the_config_on_a_real_bm25_index_and_a_corpus_without_titles_is_refused(tmp_path: Path) -> None:
    docs = REYNOLDS
    bm25 = load_retriever(RetrieverConfig(), _index(tmp_path / "titled", docs))
    cfg = SearcherConfig(kind="title_following", k=3, context_cap=3)
    s = build_configured_searcher(cfg, bm25, k0=1)
    assert isinstance(s, TitleFollowingSearcher) and s.titles is not None and "earthship" in s.titles.variants
    (res,) = s.search(["Who made the film Garbage Warrior?"])
    # "Michael Reynolds" (a capitalised run, an index title) adds b; "Reynolds Wrap" is retrieved, not its title
    assert [d.id for d in res.documents] == ["a", "b"] and res.steps[1].query == "Michael Reynolds"
    with pytest.raises(ConfigError, match="runs no model"):
        build_configured_searcher(cfg.model_copy(update={"policy_path": "runs/x"}), bm25, k0=1)
    with pytest.raises(ConfigError, match="not a Search-R1 agent"):
        build_configured_searcher(cfg, bm25, k0=1, agent="search_r1")
    untitled = [doc(d.id, "", d.text) for d in docs]
    plain = load_retriever(RetrieverConfig(), _index(tmp_path / "untitled", untitled))
    with pytest.raises(ConfigError, match="needs titled documents, and none of the index's 4 documents has a title"):
        build_configured_searcher(cfg, plain, k0=1)
    # what it would do there: naive RAG's top-k unchanged (no retrieved title can equal a span)
    (res,) = TitleFollowingSearcher(plain, cfg, k0=1).search(["Who made the film Garbage Warrior?"])
    assert [d.id for d in res.documents] == ["a"] and res.steps[1].selected_ids == []


def test_the_transfer_checks_pruned_control_keeps_top_k_and_only_gold_additions() -> None:
    f = follow_titles(Q, [T1], FakeRetriever(TABLE).search, cap=5, k=8)
    kept = tc.pruned_documents(f.documents, f.added_by, {"m2", "t1"})
    assert [d.id for d in kept] == ["t1", "m2"]
    row = tc.contexts_row("q", kept)
    assert json.loads(json.dumps(row))["documents"] == [{"id": "t1", "title": "Erika Jayne"},
                                                        {"id": "m2", "title": "Marco da Silva (footballer)"}]
    assert tm.eval_args("title_following_pruned", Path("c"))[0] == ["searcher", "--contexts", "c/heuristic_pruned.jsonl"]


def test_the_module_doctests() -> None:
    import doctest

    import searcher.spans
    import searcher.title_following.links
    import searcher.title_following.reader
    import searcher.title_following.script
    import searcher.titles

    for mod in (searcher.title_following.script, searcher.spans, searcher.title_following.links, searcher.titles,
                searcher.title_following.reader):
        res = doctest.testmod(mod, raise_on_error=False)
        assert res.failed == 0 and res.attempted > 0, mod.__name__


def test_read_last_adds_the_ranked_page_a_found_document_names_and_reports_it_as_a_step(tmp_path: Path) -> None:
    """searcher.read_last: after the span turn, the question's own list at ranks k0+1..read_last less what the script
    has is ranked by the shipped links ranker, and its one best page is added beyond the cap, as a last step (query:
    the question, retrieved: the candidates, selected: the page). The page a found document names (Atlanta, in Erika
    Jayne's page) beats better-ranked pages nobody names; one more batched retrieval call, none when read_last = 0."""
    atl = doc("at", "Atlanta", "Atlanta is a city in Georgia.")
    table = {**TABLE, Q: [T1, doc("q2", "Jayne Mansfield"), KT, doc("q4", "Erika Eleniak"), atl, doc("q6", "Tell Me")]}
    r = FakeRetriever(table)
    s = ReadingSearcher(r, reading(SearcherConfig(k=8, context_cap=4), read_last=6, ranker="links-hotpotqa"), k0=1)
    (res,) = s.search([Q])
    assert [d.id for d in res.documents] == ["t1", "k1", "m1", "m2", "at"]  # cap 4, then the read page
    assert r.calls[-1] == ([Q], 6) and s.last_stats.retrieval_calls == 3
    _, spans, read = res.steps
    assert spans.search_complete is None and read.search_complete is True
    assert (read.turn, read.query, read.retrieved_ids, read.selected_ids) == (2, Q, ["q2", "q4", "at", "q6"], ["at"])
    assert summarize_result(res, max_turns=3).documents[-1].turn == 2
    # the ranker's own reasons: named in a found document, at rank 5, against the unnamed rank 2
    ranker = LinkRanker.load("links-hotpotqa")
    rows = ranker_rows(Q, res.documents[:4], [table[Q][i] for i in (1, 4)], [2, 5])
    assert rows[1]["named_in_found"] == 1.0 and rows[0]["named_in_found"] == 0.0
    assert ranker.best(Q, res.documents[:4], [table[Q][i] for i in (1, 4)], [2, 5]) == 1
    # off by default, and per request
    (plain,) = TitleFollowingSearcher(FakeRetriever(table), SearcherConfig(k=8, context_cap=4), k0=1).search([Q])
    assert [d.id for d in plain.documents] == ["t1", "k1", "m1", "m2"] and len(plain.steps) == 2
    (res,) = s.search([Q], cfg=s.cfg.model_copy(update={"max_turns": 0}))  # D0 only, as documented
    assert [d.id for d in res.documents] == ["t1"] and res.steps[-1].search_complete is True
    # a cancelled question reads nothing further
    (gone,) = s.search([Q], cancelled=[lambda: True])
    assert [d.id for d in gone.documents] == ["t1"] and gone.steps[-1].search_complete is None


def test_a_ranker_over_a_reader_reads_each_candidate_with_it_and_needs_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """searcher.reader: a ranker that weighs a pointwise reader's score gets it for every candidate (one call a
    question, the candidates in order), and its pick follows the reader where the reader's weight dominates; the
    reader is loaded once, when the searcher is built. Without searcher.reader such a ranker is refused; a reader beside
    a ranker that would not read it is refused too; a reader other than the one the ranker was fitted with warns."""
    atl = doc("at", "Atlanta", "Atlanta is a city in Georgia.")
    table = {**TABLE, Q: [T1, doc("q2", "Jayne Mansfield"), KT, doc("q4", "Erika Eleniak"), atl, doc("q6", "Tell Me")]}

    class Reader:  # the reader likes "Tell Me", the last-ranked candidate nobody names
        calls: list[tuple[str, list[str]]] = []
        loads: list[str] = []

        def scores(self, question: str, docs: list[Document]) -> list[float]:
            self.calls.append((question, [d.id for d in docs]))
            return [9.0 if d.title == "Tell Me" else 0.0 for d in docs]

    def load(spec: str, **_: object) -> Reader:
        Reader.loads.append(spec)
        return Reader()

    monkeypatch.setattr("searcher.title_following.reading.PointwiseReader.load", load)
    ranker = tmp_path / "ranker1.json"
    ranker.write_text(json.dumps({"reader": "mine", "weights": {"reader": 1.0, "log_rank": -1.0, "named_in_found": 3.0,
                                                                "bias": -3.0}}))
    cfg = reading(SearcherConfig(k=8, context_cap=4), read_last=6, ranker=str(ranker), reader="/readers/mine")
    s = ReadingSearcher(FakeRetriever(table), cfg, k0=1)
    for _ in range(2):
        (res,) = s.search([Q])
        assert [d.id for d in res.documents] == ["t1", "k1", "m1", "m2", "q6"]  # not Atlanta: the reader outweighs
        assert res.steps[-1].selected_ids == ["q6"]
    assert Reader.calls == [(Q, ["q2", "q4", "at", "q6"])] * 2 and Reader.loads == ["/readers/mine"]
    with pytest.raises(ConfigError, match="weighs the reader's score: pass"):  # called without the scores
        LinkRanker.load(str(ranker), reader="x").best(Q, [T1], [atl], [4])
    with pytest.raises(ConfigError, match=r"reader's score \(mine\).*set searcher.reading.reader"):
        ReadingSearcher(FakeRetriever(table), reading(cfg, reader=None), k0=1)
    with pytest.raises(ConfigError, match=r"searcher.reading.reader is set but links-hotpotqa\.json does not weigh"):
        ReadingSearcher(FakeRetriever(table), reading(cfg, ranker="links-hotpotqa"), k0=1)
    with caplog.at_level("WARNING", logger="searcher.title_following"):
        ReadingSearcher(FakeRetriever(table), reading(cfg, reader="/readers/other"), k0=1)
    assert "fitted on the scores of reader mine" in caplog.text
    # a ranker whose reader ships beside it (searcher/policies/<reader>/) reads with that one when searcher.reader is unset
    shipped = tmp_path / "policies"
    (shipped / "mine").mkdir(parents=True)
    (shipped / "mine" / "adapter_config.json").write_text("{}")
    (shipped / "ranker1.json").write_text(ranker.read_text())
    monkeypatch.setattr("searcher.title_following.links.SHIPPED", shipped)
    s = ReadingSearcher(FakeRetriever(table), reading(cfg, reader=None, ranker="ranker1"), k0=1)
    assert Reader.loads[-1] == str(shipped / "mine") and s.search([Q])[0].documents[-1].id == "q6"


def test_a_ranker_that_cannot_run_is_refused_when_the_searcher_is_built(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    r = FakeRetriever(TABLE)
    with pytest.raises(ConfigError, match="reads nothing past naive RAG's top-3"):
        ReadingSearcher(r, reading(SearcherConfig(), read_last=3), k0=3)
    with pytest.raises(ConfigError, match=r"no such file or shipped ranker \(shipped: links-hotpotqa"):
        ReadingSearcher(r, reading(SearcherConfig(), ranker="links-wiki"), k0=3)
    reader = tmp_path / "reader.json"
    reader.write_text(json.dumps({"weights": {"reader": 0.2, "log_rank": -0.7, "bias": -3}}))
    with pytest.raises(ConfigError, match="the reader does not ship"):
        ReadingSearcher(r, reading(SearcherConfig(), ranker=str(reader)), k0=3)
    for bad, why in (({"weights": {"log_rank": -1}}, "no bias"), ({"weights": {"pagerank": 1, "bias": 0}}, "pagerank"),
                     ({"w": 1}, "not a ranker file"), ([], "not a ranker file")):
        reader.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=why):
            LinkRanker.load(str(reader))
    reader.write_text(json.dumps({"weights": {"log_rank": -1.0, "bias": 0.0}}))  # bm25 order, as a ranker file
    s = ReadingSearcher(r, reading(SearcherConfig(), ranker=str(reader)), k0=1)
    assert s._ranker(s.cfg) == LinkRanker("reader", {"log_rank": -1.0, "bias": 0.0})
    # a path is a path, with or without a suffix; a ranker fitted on other ranks is used, with a warning
    with pytest.raises(ConfigError, match="no such file"):
        LinkRanker.load(str(tmp_path / "mine" / "ranker"))
    reader.write_text(json.dumps({"weights": {"log_rank": -1.0, "bias": 0.0}, "ranks": [4, 16]}))
    assert LinkRanker.load(str(reader)).ranks == (4, 16)
    with caplog.at_level("WARNING", logger="searcher.title_following"):
        s = ReadingSearcher(r, reading(SearcherConfig(), read_last=20, ranker=str(reader)), k0=3)
    assert "fitted on ranks 4-16" in caplog.text and "reads ranks 4-20" in caplog.text
    caplog.clear()  # once for each span a request reads, not once a ranker
    with caplog.at_level("WARNING", logger="searcher.title_following"):
        for last in (24, 16, 24, 20):
            s._ranker(reading(s.cfg, read_last=last))
    assert caplog.text.count("may not carry") == 1 and "reads ranks 4-24" in caplog.text
    assert s.max_turns == 2 and TitleFollowingSearcher(r, SearcherConfig(), k0=3).max_turns == 1


def reading(cfg: SearcherConfig, **settings: object) -> SearcherConfig:
    """`cfg` as the reading searcher's, with these [searcher.reading] settings."""
    return cfg.model_copy(update={"kind": "reading", "reading": cfg.reading.model_copy(update=settings)})


def test_a_setting_of_another_kind_is_refused_with_the_kind_it_belongs_to() -> None:
    """searcher.reading.* under the script or the LLM searcher would be ignored: refused, naming the kind; the flat
    keys that moved say where they went."""
    r = FakeRetriever(TABLE)
    for kind in ("title_following", "llm"):
        with pytest.raises(ConfigError, match=rf"searcher.reading.read_last is a setting of searcher.kind = 'reading', "
                                              rf"and the searcher here is '{kind}'"):
            build_configured_searcher(SearcherConfig(kind=kind, reading={"read_last": 20}), r, k0=3)
    with pytest.raises(ConfigError, match=r"searcher.title_following.words is a setting of searcher.kind = "
                                          r"'title_following', and the searcher here is 'llm'"):
        build_configured_searcher(SearcherConfig(title_following={"words": 10}), r, k0=3)
    with pytest.raises(ValueError, match=r"searcher.read_last is a setting of the reading searcher: it is now "
                                         r"searcher.reading.read_last"):
        SearcherConfig.model_validate({"read_last": 16})
