"""The real /retrieve server (uvicorn on a free loopback port) over a real bm25s index."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from searcher.config import RetrieverConfig, ServiceConfig
from searcher.retrieval import build_index, load_retriever
from searcher.retrieval.server import create_retrieve_app, serve_in_thread

pytestmark = pytest.mark.integration

FLASHRAG = Path(os.environ.get("S3_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")) / "flashrag_sample" / "sample_data.jsonl"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object, object]]:
    if not FLASHRAG.is_file():
        pytest.skip(f"shared data missing: {FLASHRAG}")
    index = build_index(FLASHRAG, "bm25", tmp_path_factory.mktemp("srv") / "bm25", RetrieverConfig())
    retriever = load_retriever(RetrieverConfig(), index)
    cfg = ServiceConfig(max_queries_per_request=64, max_query_chars=200, max_topk=20, batch_window_ms=30, max_batch=256)
    app = create_retrieve_app(retriever, cfg, default_topk=3)
    with serve_in_thread(app) as url:
        yield url, retriever, app


QUERIES = ["who was the first president of the united states", "capital city of france", "theory of relativity"]


def test_retrieve_matches_in_process_search_with_scores(served) -> None:  # type: ignore[no-untyped-def]
    url, retriever, _ = served
    r = httpx.post(f"{url}/retrieve", json={"queries": QUERIES, "topk": 5, "return_scores": True}, timeout=30)
    assert r.status_code == 200
    result = r.json()["result"]
    local = retriever.search(QUERIES, 5)
    assert len(result) == len(QUERIES)
    for hits, docs in zip(result, local, strict=True):
        assert [h["document"]["id"] for h in hits] == [d.id for d in docs]
        assert [h["score"] for h in hits] == pytest.approx([d.score for d in docs])
        assert hits[0]["document"]["contents"] == docs[0].contents  # '"Title"\ntext'


def test_return_scores_false_gives_upstream_no_score_shape(served) -> None:  # type: ignore[no-untyped-def]
    url, retriever, _ = served
    r = httpx.post(f"{url}/retrieve", json={"queries": QUERIES[:1], "return_scores": False}, timeout=30)
    assert r.status_code == 200
    (hits,) = r.json()["result"]
    assert len(hits) == 3  # the server's default topk
    assert set(hits[0]) == {"id", "contents"}
    assert [h["id"] for h in hits] == [d.id for d in retriever.search(QUERIES[:1], 3)[0]]


def test_concurrent_requests_are_batched(served) -> None:  # type: ignore[no-untyped-def]
    url, retriever, app = served
    batcher = app.state.batcher
    b0, i0 = batcher.batches, batcher.items
    n_requests = 16

    def one(i: int) -> list[str]:
        q = QUERIES[i % len(QUERIES)]
        r = httpx.post(f"{url}/retrieve", json={"queries": [q], "topk": 2, "return_scores": True}, timeout=30)
        r.raise_for_status()
        return [h["document"]["id"] for h in r.json()["result"][0]]

    with ThreadPoolExecutor(n_requests) as pool:
        got = list(pool.map(one, range(n_requests)))
    expect = {q: [d.id for d in docs] for q, docs in zip(QUERIES, retriever.search(QUERIES, 2), strict=True)}
    assert got == [expect[QUERIES[i % len(QUERIES)]] for i in range(n_requests)]
    assert batcher.items - i0 == n_requests
    assert batcher.batches - b0 < n_requests  # some requests shared a backend call


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"queries": ["q"] * 65}, "max_queries_per_request=64"),
        ({"queries": ["x" * 201]}, "max_query_chars=200"),
        ({"queries": ["q"], "topk": 21}, "max_topk=20"),
        ({"queries": []}, "queries is empty"),
    ],
)
def test_oversize_requests_are_422_naming_the_limit(served, body, needle) -> None:  # type: ignore[no-untyped-def]
    url, _, _ = served
    r = httpx.post(f"{url}/retrieve", json=body, timeout=30)
    assert r.status_code == 422
    assert needle in json.dumps(r.json())


def test_health_and_document_lookup(served) -> None:  # type: ignore[no-untyped-def]
    url, retriever, _ = served
    h = httpx.get(f"{url}/health", timeout=10).json()
    assert h == {"status": "ok", "backend": "bm25", "documents": len(retriever)}
    first = retriever.search(QUERIES[:1], 1)[0][0]
    r = httpx.post(f"{url}/documents", json={"ids": [first.id]}, timeout=10)
    assert r.json() == {"documents": [{"id": first.id, "contents": first.contents}]}
    assert httpx.post(f"{url}/documents", json={"ids": ["no-such-id"]}, timeout=10).status_code == 404


def test_remote_client_reports_a_dead_server_after_retries() -> None:
    import socket

    from s3core.errors import RetrievalError
    from searcher.config import RemoteConfig
    from searcher.retrieval.remote import RemoteRetriever

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = RemoteRetriever(RemoteConfig(url=f"http://127.0.0.1:{port}", max_retries=1, backoff_s=0.01, timeout_s=2))
    with pytest.raises(RetrievalError, match="failed after 2 tries: connection error"):
        r.search(["q"], 3)
    r.close()
