"""Unit tests of the /search service logic: request limits, trajectory summary, batching by settings, the app's
error mapping, and the contexts file of `s3 search --out`. A scripted fake searcher stands in for the policy loop
(OUR logic under test); the real searcher is driven in tests/integration/test_service*.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from s3core.errors import DataFormatError, RetrievalError, S3Error
from s3core.types import Document, SearchResult, SearchStep
from searcher.config import SearcherConfig, ServiceConfig
from searcher.service import (
    SearchRequest,
    SearchSettings,
    SettingsBatcher,
    check_request,
    document_turns,
    run_search,
    summarize_result,
)


def _doc(i: str, score: float = 1.0) -> Document:
    return Document(id=i, title=f"T{i}", text=f"text {i}", score=score)


def _result(question: str = "q?") -> SearchResult:
    # turn 0: D0 = [a, b, c], selected [b]; turn 1: window [d, e], no <important_info> -> A.5 admits both;
    # turn 2: window [b, f], selected [f], stop.
    steps = [
        SearchStep(turn=0, query=question, retrieved_ids=["a", "b", "c"], selected_ids=["b"], retrieval_seconds=0.5),
        SearchStep(turn=1, query="second", retrieved_ids=["d", "e"], selected_ids=["d", "e"], selection_fallback=True,
                   policy_seconds=1.0, retrieval_seconds=0.25, search_complete=False),
        SearchStep(turn=2, query="third", retrieved_ids=["b", "f"], selected_ids=["f"], search_complete=True,
                   policy_seconds=2.0),
    ]
    docs = [_doc("b", 3.0), _doc("d", 2.0), _doc("e", 1.5), _doc("f", 1.0)]
    return SearchResult(question=question, documents=docs, steps=steps, seconds=3.75)


class FakeSearcher:
    """Scripted searcher: one step per turn up to max_turns, documents named after question, k and turn."""

    def __init__(self, delay_s: float = 0.0, fail: Exception | None = None) -> None:
        self.cfg = SearcherConfig()
        self.calls: list[tuple[list[str], int, int]] = []
        self.delay_s = delay_s
        self.fail = fail
        self._lock = threading.Lock()

    def search(self, questions: Sequence[str], *, cfg: SearcherConfig | None = None,
               cancelled: Sequence[Callable[[], bool]] | None = None) -> list[SearchResult]:
        k, max_turns = (cfg or self.cfg).k, (cfg or self.cfg).max_turns
        with self._lock:
            self.calls.append((list(questions), k, max_turns))
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        out = []
        for q in questions:
            steps = [
                SearchStep(turn=t, query=q if t == 0 else f"{q} #{t}",
                           retrieved_ids=[f"{q}-{t}-{j}" for j in range(k)], selected_ids=[f"{q}-{t}-0"])
                for t in range(max_turns + 1)
            ]
            docs = [_doc(f"{q}-{t}-0") for t in range(max_turns + 1)]
            out.append(SearchResult(question=q, documents=docs, steps=steps, seconds=0.01))
        return out


LIMITS = ServiceConfig(max_query_chars=50, max_topk=20, max_search_turns=4)
SCFG = SearcherConfig()  # paper profile: k=8, max_select=3, max_turns=3


# ------------------------------------------------------------------------------------------ request validation


def _loop(cfg: SearcherConfig = SCFG) -> Any:
    """The real LLM searcher (a scripted policy): its kind's request fields and per-call rules."""
    from searcher.agent import S3Searcher
    from searcher.policy import ScriptedPolicy

    return S3Searcher(ScriptedPolicy(lambda p, i: "<search_complete>True</search_complete>"), FakeRetriever(), cfg)


def test_check_request_defaults_to_the_searcher_config() -> None:
    assert check_request(SearchRequest(question="who?"), LIMITS, _loop()) == SearchSettings(k=8, max_turns=3)
    cpu = SearcherConfig(k=4, max_turns=1)
    assert check_request(SearchRequest(question="who?"), LIMITS, _loop(), cpu) == SearchSettings(k=4, max_turns=1)
    assert check_request(SearchRequest(question="who?", k=5, max_turns=0), LIMITS, _loop()) == SearchSettings(
        k=5, max_turns=0)


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        ({"question": "   "}, "question: must not be empty"),
        ({"question": "x" * 51}, "service.max_query_chars=50"),
        ({"question": "q", "k": 21}, "service.max_topk=20"),
        ({"question": "q", "k": 0}, "service.max_topk=20"),
        ({"question": "q", "k": 2}, "searcher.max_select=3"),
        ({"question": "q", "max_turns": 5}, "service.max_search_turns=4"),
        ({"question": "q", "max_turns": -1}, "service.max_search_turns=4"),
    ],
)
def test_check_request_names_the_broken_limit(req: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        check_request(SearchRequest(**req), LIMITS, _loop())


# -------------------------------------------------------------------------------------------- trajectory summary


def test_document_turns_prefers_selection_then_fallback_window() -> None:
    assert document_turns(_result()) == {"b": 0, "d": 1, "e": 1, "f": 2, "a": 0, "c": 0}


def test_an_additive_searchs_top_k_selected_again_later_keeps_its_admission_turn() -> None:
    """Additive (the shipped searcher): naive RAG's top-3 [a, b, c] is D_s3 from turn 0, unselected; the policy's
    turn 1 selects b again (it is in its window) and adds d. b was admitted at turn 0, not 1: the turns follow D_s3's
    order (seen in the README's RAG flow re-run, benchmarks/results/rag_flow)."""
    steps = [SearchStep(turn=0, query="q", retrieved_ids=["a", "b", "c"]),
             SearchStep(turn=1, query="second", retrieved_ids=["b", "d"], selected_ids=["b", "d"])]
    docs = [_doc("a", 3.0), _doc("b", 2.0), _doc("c", 1.5), _doc("d", 1.0)]
    turns = document_turns(SearchResult(question="q", documents=docs, steps=steps))
    assert [turns[d.id] for d in docs] == [0, 0, 0, 1]


def test_summarize_result_documents_and_trajectory() -> None:
    resp = summarize_result(_result("who?"), SearchSettings(k=3, max_turns=2))
    assert [(d.id, d.title, d.text, d.score, d.turn) for d in resp.documents] == [
        ("b", "Tb", "text b", 3.0, 0), ("d", "Td", "text d", 2.0, 1), ("e", "Te", "text e", 1.5, 1),
        ("f", "Tf", "text f", 1.0, 2),
    ]
    t = resp.trajectory
    assert t.turns == 2
    assert t.queries == ["who?", "second", "third"]
    assert [s.selected_ids for s in t.steps] == [["b"], ["d", "e"], ["f"]]
    assert [s.selection_fallback for s in t.steps] == [False, True, False]
    assert [s.search_complete for s in t.steps] == [None, False, True]
    assert [s.seconds for s in t.steps] == [0.5, 1.25, 2.0]
    assert t.seconds == 3.75
    assert resp.settings == {"k": 3, "max_turns": 2}
    # the wire form round-trips (the HTTP client parses it back)
    assert type(resp).model_validate_json(resp.model_dump_json()) == resp


def test_run_search_passes_settings_and_checks_result_count() -> None:
    fake = FakeSearcher()
    results = run_search(fake, ["a", "b"], SearchSettings(k=5, max_turns=1))
    assert fake.calls == [(["a", "b"], 5, 1)]
    assert [r.question for r in results] == ["a", "b"]
    assert len(results[0].steps) == 2 and len(results[0].steps[0].retrieved_ids) == 5

    class Short(FakeSearcher):
        def search(self, questions: Sequence[str], *, cfg: SearcherConfig | None = None,
                   cancelled: Sequence[Callable[[], bool]] | None = None) -> list[SearchResult]:
            return super().search(questions, cfg=cfg)[:1]

    with pytest.raises(S3Error, match="returned 1 results for 2 questions"):
        run_search(Short(), ["a", "b"], SearchSettings(k=5, max_turns=1))


def test_run_search_passes_the_served_settings_per_call_and_leaves_the_searcher_alone() -> None:
    fake = FakeSearcher()
    before = fake.cfg.model_copy()
    served = SearcherConfig(k=4, max_turns=2, doc_token_budget=64)
    (r,) = run_search(fake, ["a"], SearchSettings(k=5, max_turns=1), cfg=served)  # the request's k / turns on top
    assert (r.turns, len(r.steps[0].retrieved_ids)) == (1, 5)
    (r,) = run_search(fake, ["a"], cfg=served)  # no per-request settings: the served ones
    assert (r.turns, len(r.steps[0].retrieved_ids)) == (2, 4)
    (r,) = run_search(fake, ["a"])  # nothing given: the searcher's own
    assert (r.turns, len(r.steps[0].retrieved_ids)) == (before.max_turns, before.k)
    assert fake.cfg == before and served.k == 4  # nobody's config was changed
    same = SearchSettings(k=served.k, max_turns=served.max_turns)
    assert same.applied_to(served) is served


# ------------------------------------------------------------------------------------------ batching by settings


def test_settings_batcher_groups_concurrent_requests_by_settings() -> None:
    fake = FakeSearcher(delay_s=0.05)
    batcher = SettingsBatcher(fake, ServiceConfig(batch_window_ms=50, max_batch=16))
    s1, s2 = SearchSettings(k=4, max_turns=1), SearchSettings(k=6, max_turns=2)
    plan = [("q0", s1), ("q1", s2), ("q2", s1), ("q3", s1), ("q4", s2)]

    async def go() -> list[SearchResult]:
        try:
            return list(await asyncio.gather(*(batcher.submit(q, s) for q, s in plan)))
        finally:
            await batcher.aclose()

    results = asyncio.run(go())
    # every request got its own answer, computed with its own settings
    for (q, s), r in zip(plan, results, strict=True):
        assert r.question == q
        assert r.turns == s.max_turns
        assert len(r.steps[0].retrieved_ids) == s.k
    # one lockstep batch per setting, never mixed
    by_settings = sorted((tuple(sorted(qs)), k, t) for qs, k, t in fake.calls)
    assert by_settings == [(("q0", "q2", "q3"), 4, 1), (("q1", "q4"), 6, 2)]
    assert sorted(n for _, n in batcher.batches) == [2, 3]


def test_settings_batcher_history_stays_bounded_in_a_long_running_server() -> None:
    from searcher.service import RECENT_BATCHES

    fake = FakeSearcher()
    batcher = SettingsBatcher(fake, ServiceConfig(batch_window_ms=0, max_batch=1))
    n = RECENT_BATCHES + 40

    async def go() -> None:
        try:
            for i in range(n):  # one at a time: one batch each
                await batcher.submit(f"q{i}", SearchSettings(k=4, max_turns=1))
        finally:
            await batcher.aclose()

    asyncio.run(go())
    assert batcher.batches_run == n and len(batcher.batches) == RECENT_BATCHES


def test_settings_batcher_respects_max_batch() -> None:
    fake = FakeSearcher()
    batcher = SettingsBatcher(fake, ServiceConfig(batch_window_ms=30, max_batch=2))
    s = SearchSettings(k=4, max_turns=0)

    async def go() -> list[SearchResult]:
        try:
            return list(await asyncio.gather(*(batcher.submit(f"q{i}", s) for i in range(5))))
        finally:
            await batcher.aclose()

    results = asyncio.run(go())
    assert [r.question for r in results] == [f"q{i}" for i in range(5)]
    assert all(len(qs) <= 2 for qs, _, _ in fake.calls)
    assert sum(len(qs) for qs, _, _ in fake.calls) == 5


def test_settings_batcher_propagates_errors_to_every_waiter() -> None:
    fake = FakeSearcher(fail=RetrievalError("index gone"))
    batcher = SettingsBatcher(fake, ServiceConfig(batch_window_ms=20, max_batch=8))
    s = SearchSettings(k=4, max_turns=0)

    async def go() -> list[Any]:
        try:
            return list(await asyncio.gather(*(batcher.submit(f"q{i}", s) for i in range(3)), return_exceptions=True))
        finally:
            await batcher.aclose()

    outs = asyncio.run(go())
    assert all(isinstance(o, RetrievalError) and "index gone" in str(o) for o in outs)


# --------------------------------------------------------------------------------------- the app (in process)


class FakeRetriever:
    backend = "fake"

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        return [[_doc(f"{q}-{j}", float(k - j)) for j in range(k)] for q in queries]

    def get(self, ids: list[str]) -> list[Document]:
        return [_doc(i) for i in ids]

    def __len__(self) -> int:
        return 42


def _client(searcher: Any, service: ServiceConfig) -> Any:
    from fastapi.testclient import TestClient

    from searcher.service import create_search_app

    return TestClient(create_search_app(searcher, FakeRetriever(), service, model="fake-model", index="idx"))


def test_app_search_health_and_limits() -> None:
    fake = FakeSearcher()
    with _client(fake, ServiceConfig(max_topk=10, max_search_turns=2, batch_window_ms=1)) as client:
        r = client.post("/search", json={"question": "who", "k": 4, "max_turns": 1})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [d["id"] for d in body["documents"]] == ["who-0-0", "who-1-0"]
        assert body["trajectory"]["turns"] == 1 and body["settings"] == {"k": 4, "max_turns": 1}
        assert fake.calls == [(["who"], 4, 1)]

        r = client.post("/search", json={"question": "who", "k": 11})
        assert r.status_code == 422 and "service.max_topk=10" in r.json()["detail"]
        r = client.post("/search", json={"question": "who", "max_turns": 3})
        assert r.status_code == 422 and "service.max_search_turns=2" in r.json()["detail"]
        r = client.post("/search", json={"question": "who", "topk": 3})  # unknown field
        assert r.status_code == 422 and "topk" in r.text
        r = client.post("/search", json={"k": 3})
        assert r.status_code == 422 and "question" in r.text

        h = client.get("/health").json()
        assert h["model"] == "fake-model" and h["index"] == "idx" and h["corpus_size"] == 42

        r = client.post("/retrieve", json={"queries": ["x"], "topk": 2, "return_scores": True})
        assert r.status_code == 200, r.text
        hits = r.json()["result"][0]
        assert [h["document"]["id"] for h in hits] == ["x-0", "x-1"]


def test_app_timeout_is_504_and_errors_are_mapped() -> None:
    slow = FakeSearcher(delay_s=0.5)
    with _client(slow, ServiceConfig(request_timeout_s=0.1, batch_window_ms=1)) as client:
        r = client.post("/search", json={"question": "slow"})
        assert r.status_code == 504 and "service.request_timeout_s=0.1" in r.json()["detail"]
        assert r.json()["code"] == "deadline_exceeded"
    broken = FakeSearcher(fail=RetrievalError("index gone"))
    with _client(broken, ServiceConfig(batch_window_ms=1)) as client:
        r = client.post("/search", json={"question": "q"})
        assert r.status_code == 502 and "index gone" in r.json()["detail"]
        assert r.json()["code"] == "retrieval_failed"


# ------------------------------------------------------------------------------------- contexts file (s3 search)


def test_contexts_row_shape() -> None:
    from eval.contexts import contexts_row

    row = contexts_row(_result("who?"), "q7")
    assert row["id"] == "q7" and row["question"] == "who?"
    assert row["documents"] == [
        {"id": "b", "title": "Tb", "score": 3.0, "turn": 0}, {"id": "d", "title": "Td", "score": 2.0, "turn": 1},
        {"id": "e", "title": "Te", "score": 1.5, "turn": 1}, {"id": "f", "title": "Tf", "score": 1.0, "turn": 2},
    ]
    assert row["turns"] == 2 and row["queries"] == ["who?", "second", "third"]
    assert [s["selection_fallback"] for s in row["steps"]] == [False, True, False]
    json.dumps(row)  # serialisable


def test_read_done_ids_drops_a_torn_tail_and_rejects_bad_lines(tmp_path: Path) -> None:
    from eval.contexts import read_done_ids

    assert read_done_ids(tmp_path / "missing.jsonl") == set()
    p = tmp_path / "ctx.jsonl"
    p.write_text('{"id": "a", "documents": []}\n{"id": "b", "documents": []}\n{"id": "c", "docu', encoding="utf-8")
    assert read_done_ids(p) == {"a", "b"}
    assert p.read_text(encoding="utf-8").endswith('"documents": []}\n')  # torn line cut off, ready to append
    p.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"ctx\.jsonl:2"):
        read_done_ids(p)


def test_search_file_is_resumable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import s3.build as build
    from s3.cli import main

    qfile = tmp_path / "q.jsonl"
    qfile.write_text(
        "".join(json.dumps({"id": f"id{i}", "question": f"question {i}", "golden_answers": ["x"]}) + "\n" for i in range(5)),
        encoding="utf-8",
    )
    fake = FakeSearcher()
    monkeypatch.setattr(build, "build_searcher", lambda cfg, index=None, policy=None: (fake, FakeRetriever(), "idx", cfg, "a fake"))
    out = tmp_path / "ctx.jsonl"
    assert main(["search", "--questions", str(qfile), "--out", str(out), "--limit", "3", "--batch-size", "2"]) == 0
    assert [len(qs) for qs, _, _ in fake.calls] == [2, 1]
    assert main(["search", "--questions", str(qfile), "--out", str(out), "--batch-size", "2"]) == 0
    assert [qs for qs, _, _ in fake.calls[2:]] == [["question 3", "question 4"]]  # only the new ones
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [f"id{i}" for i in range(5)]
    assert rows[4]["documents"][0]["id"] == "question 4-0-0"
    # a third run has nothing to do and does not load the searcher
    monkeypatch.setattr(build, "build_searcher", lambda *a, **k: pytest.fail("searcher loaded for nothing"))
    assert main(["search", "--questions", str(qfile), "--out", str(out)]) == 0


def test_search_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from s3.cli import main

    assert main(["search"]) == 2
    assert "give a question" in capsys.readouterr().err
    assert main(["search", "--questions", str(tmp_path / "q.jsonl")]) == 2
    assert "--questions needs --out" in capsys.readouterr().err
    assert main(["search", "--questions", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "questions file not found" in capsys.readouterr().err
    assert main(["search", "who?", "--policy", str(tmp_path / "no-ckpt")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_print_trajectory_shows_turns_titles_and_selection() -> None:
    import io

    from s3.commands.search import print_trajectory

    buf = io.StringIO()
    print_trajectory(_result("who?"), FakeRetriever(), file=buf)
    text = buf.getvalue()
    for needle in ("begin-with-search", "turn 1", "turn 2", "'second'", "Ta", "Tc", "the reply selected none: all", "search_complete: True",
                   "Final documents (4)", "[f] Tf"):
        assert needle in text, needle


@pytest.mark.parametrize(
    ("module", "blocked", "package"),
    [
        ("searcher.integrations.langchain", "langchain_core", "langchain-core"),
        ("searcher.integrations.llamaindex", "llama_index.core", "llama-index-core"),
    ],
)
def test_integrations_without_their_extra_fail_with_an_install_hint(
    module: str, blocked: str, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import sys

    from searcher.integrations import MissingExtraError

    # `import blocked` (and any of its submodules another test already imported) must raise ImportError
    for name in [blocked, *(n for n in list(sys.modules) if n.startswith(blocked + "."))]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingExtraError, match=rf"needs {package}.*pip install 's3-search-agents\[serve\]'"):
        importlib.import_module(module)
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_freeze_loaded_heap_moves_live_objects_out_of_the_gc_and_keeps_refcounting() -> None:
    import gc
    import weakref

    from searcher.heap import freeze_loaded_heap

    class Node:
        pass

    kept = [Node() for _ in range(100)]
    try:
        n = freeze_loaded_heap()
        assert n >= len(kept)  # every object alive at the call, ours included (the count can only fall after:
        # a frozen object other code drops, e.g. in another thread, leaves the permanent generation when freed)

        def tracked_ids() -> set[int]:  # what the collector scans: generations 0-2, not the permanent one
            return {id(o) for o in gc.get_objects()}

        assert not {id(k) for k in kept} & tracked_ids()
        later = Node()
        ref = weakref.ref(later)
        del later  # objects made after the freeze are freed as usual
        assert ref() is None
        cyclic = Node()
        cyclic.me = cyclic  # type: ignore[attr-defined]
        cref = weakref.ref(cyclic)
        del cyclic
        gc.collect()  # cyclic garbage made after the freeze is still collected; the frozen objects are left alone
        assert cref() is None and not {id(k) for k in kept} & tracked_ids()
    finally:
        gc.unfreeze()  # the test process builds and drops many searchers: give the GC its objects back
    assert gc.get_freeze_count() == 0


def test_every_invalid_body_is_one_typed_error_whose_detail_is_a_line_of_text() -> None:
    # it used to be a list of pydantic dicts for a body that failed validation and a string for a broken limit
    cases = [("/retrieve", b"{not json", "JSON decode error"), ("/retrieve", b'{"queries": "x"}', "queries: "),
             ("/retrieve", b'{"queries": []}', "queries is empty"), ("/search", b"[1]", "Input should be"),
             ("/search", b'{"question": 3}', "question: Input should be a valid string"),
             ("/retrieve", b'{"queries": ["a"], "topk": "5"}', "topk: Input should be a valid integer")]
    with _client(FakeSearcher(), ServiceConfig(batch_window_ms=1)) as client:
        for path, body, needle in cases:
            r = client.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (path, body)
            err = r.json()
            assert set(err) == {"code", "detail"} and err["code"] == "invalid_request", err
            assert isinstance(err["detail"], str) and needle in err["detail"], err
            assert "errors.pydantic.dev" not in err["detail"] and "\n" not in err["detail"]


def test_a_body_that_is_not_sent_as_json_says_which_content_type_to_send() -> None:
    """`curl -d '{"question": ...}'` sends application/x-www-form-urlencoded: the answer names the Content-Type to
    send (415), not "Input should be a valid dictionary" (issue 61 item 8). A body with no Content-Type at all gets
    the same answer (FastAPI's strict content type: no CSRF from a browser page to a service on localhost)."""
    body = json.dumps({"question": "who"}).encode()
    with _client(FakeSearcher(), ServiceConfig(batch_window_ms=1)) as client:
        for path, payload in (("/search", body), ("/retrieve", json.dumps({"queries": ["x"]}).encode())):
            for ctype in ("application/x-www-form-urlencoded", "text/plain"):
                r = client.post(path, content=payload, headers={"content-type": ctype})
                assert r.status_code == 415, (path, ctype, r.text)
                err = r.json()
                assert err["code"] == "unsupported_media_type" and "valid dictionary" not in err["detail"], err
                assert err["detail"].startswith("the body must be JSON sent with Content-Type: application/json, "
                                                f"not '{ctype}'"), err
        r = client.post("/search", content=body)  # no Content-Type header at all
        assert "content-type" not in {k.lower() for k in r.request.headers}
        assert r.status_code == 415 and r.json()["detail"].startswith(
            "the body must be JSON sent with Content-Type: application/json, and this request had none"), r.text
        r = client.post("/search", content=body, headers={"content-type": "application/json; charset=utf-8"})
        assert r.status_code == 200, r.text


def test_search_json_prints_the_search_record_and_one_turn_is_singular(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import s3.build as build
    from s3.cli import main
    from searcher.service import SearchResponse

    fake = FakeSearcher()
    fake.cfg = SearcherConfig(max_turns=1)
    monkeypatch.setattr(build, "build_searcher", lambda cfg, index=None, policy=None: (fake, FakeRetriever(), "idx", cfg, "a fake"))
    assert main(["search", "--json", "who?"]) == 0
    record = SearchResponse.model_validate_json(capsys.readouterr().out)  # the record /search and MCP answer with
    assert record.trajectory.turns == 1 and record.trajectory.stop == "max_turns" and record.cost is not None
    assert [d.id for d in record.documents] == ["who?-0-0", "who?-1-0"]
    # settings: what /search fills for a request without k / max_turns, never null (issue 61 item 8)
    with _client(fake, ServiceConfig(batch_window_ms=1)) as client:
        served = client.post("/search", json={"question": "who?"}).json()
    assert record.settings == {"k": fake.cfg.k, "max_turns": 1}
    assert record.model_dump(mode="json")["settings"] == served["settings"] == {"k": fake.cfg.k, "max_turns": 1}
    assert main(["search", "who?"]) == 0
    assert "1 turn," in capsys.readouterr().out
