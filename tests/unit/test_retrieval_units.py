"""Unit tests of the retrieval layer's own logic: validation, top-k with ties, recall, micro-batcher,
remote client retries (httpx MockTransport) and the /retrieve app's limits (in-process, fake retriever)."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest

from s3core.errors import RetrievalError
from s3core.types import Document
from searcher.batching import MicroBatcher
from searcher.config import RemoteConfig, ServiceConfig
from searcher.retrieval import check_k, check_queries, recall_at_k, support_recall, top_k_rows
from searcher.retrieval.remote import RemoteRetriever

# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("queries", "msg"),
    [([], "empty query list"), ([""], "query 0 is empty"), (["ok", "  "], "query 1 is empty"),
     ("a string", "single string"), ([1], "not a string"), (None, "list of strings")],
)
def test_check_queries_rejects(queries: object, msg: str) -> None:
    with pytest.raises(RetrievalError, match=msg):
        check_queries(queries)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "3"])
def test_check_k_rejects(k: object) -> None:
    with pytest.raises(RetrievalError, match="k must be a positive integer"):
        check_k(k)


def test_check_k_accepts_numpy_int() -> None:
    assert check_k(np.int64(4)) == 4


# ---------------------------------------------------------------- top-k


def _naive_topk(scores: np.ndarray, k: int, positive_only: bool) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if positive_only:
        order = [i for i in order if scores[i] > 0]
    return order[:k]


@pytest.mark.parametrize("seed", range(30))
def test_top_k_rows_matches_a_plain_sort_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    scores = rng.integers(0, 4, size=n).astype(np.float32)  # many ties, many zeros
    for k in (1, 2, 5, n, n + 3):
        for pos in (True, False):
            rows, sel = top_k_rows(scores, k, pos)
            assert rows.tolist() == _naive_topk(scores, k, pos)
            assert sel.tolist() == scores[rows].tolist()


# ---------------------------------------------------------------- recall


def test_support_recall_of_one_context() -> None:
    assert support_recall(["a", "b", "c"], ["b", "d"]) == 0.5
    assert support_recall(["b", "d", "b"], ("d", "b", "d")) == 1.0  # sets: repeats count once
    assert support_recall([], ["x"]) == 0.0
    assert support_recall(["a"], []) is None  # no gold ids: nothing to recall, not 0


def test_recall_at_k_values_and_skips_questions_without_gold() -> None:
    ranked = [["a", "b", "c"], ["x", "y", "z"], ["q"]]
    gold = [["b", "c"], ["z"], []]
    r = recall_at_k(ranked, gold, ks=(1, 2, 3))
    assert r[1].questions == 2
    assert (r[1].any_gold, r[1].all_gold, r[1].mean_recall) == (0.0, 0.0, 0.0)
    assert (r[2].any_gold, r[2].all_gold, r[2].mean_recall) == (0.5, 0.0, 0.25)
    assert (r[3].any_gold, r[3].all_gold, r[3].mean_recall) == (1.0, 1.0, 1.0)
    assert recall_at_k([["a"]], [[]]) == {}
    with pytest.raises(ValueError, match="rankings"):
        recall_at_k([["a"]], [])


# ---------------------------------------------------------------- micro-batcher


def test_microbatcher_gathers_concurrent_submits_into_one_call() -> None:
    calls: list[list[int]] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(list(items))
        return [i * 10 for i in items]

    async def main() -> list[int]:
        b: MicroBatcher[int, int] = MicroBatcher(fn, window_ms=50, max_batch=100)
        try:
            return list(await asyncio.gather(*(b.submit(i) for i in range(20))))
        finally:
            await b.aclose()

    assert asyncio.run(main()) == [i * 10 for i in range(20)]
    assert len(calls) == 1 and sorted(calls[0]) == list(range(20))


def test_microbatcher_respects_max_batch_and_keeps_order() -> None:
    calls: list[int] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(len(items))
        return [-i for i in items]

    async def main() -> list[int]:
        b: MicroBatcher[int, int] = MicroBatcher(fn, window_ms=20, max_batch=8)
        try:
            return await b.submit_many(list(range(30)))
        finally:
            await b.aclose()

    assert asyncio.run(main()) == [-i for i in range(30)]
    assert max(calls) <= 8 and sum(calls) == 30


def test_microbatcher_raises_batch_errors_to_every_caller_and_recovers() -> None:
    def fn(items: list[int]) -> list[int]:
        if 13 in items:
            raise ValueError("unlucky")
        return items

    async def main() -> None:
        b: MicroBatcher[int, int] = MicroBatcher(fn, window_ms=20, max_batch=10)
        try:
            res = await asyncio.gather(b.submit(1), b.submit(13), return_exceptions=True)
            assert all(isinstance(r, ValueError) for r in res)
            assert await b.submit(2) == 2  # the worker survives
        finally:
            await b.aclose()

    asyncio.run(main())


def test_microbatcher_wrong_result_count_is_an_error() -> None:
    async def main() -> None:
        b: MicroBatcher[int, int] = MicroBatcher(lambda items: [], window_ms=0)
        try:
            with pytest.raises(RuntimeError, match="0 results for 1 items"):
                await b.submit(1)
        finally:
            await b.aclose()

    asyncio.run(main())


# ---------------------------------------------------------------- remote client


def _ok_body(queries: list[str]) -> dict[str, object]:
    return {"result": [[{"document": {"id": "d1", "contents": '"T"\nbody'}, "score": 1.5}] for _ in queries]}


def test_remote_retries_5xx_then_succeeds() -> None:
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        if len(seen) < 3:
            return httpx.Response(503, text="busy")
        import json

        return httpx.Response(200, json=_ok_body(json.loads(request.content)["queries"]))

    r = RemoteRetriever(RemoteConfig(url="http://x", max_retries=3, backoff_s=0), transport=httpx.MockTransport(handler))
    (docs,) = r.search(["q"], 3)
    assert len(seen) == 3
    assert docs == [Document(id="d1", title="T", text="body", score=1.5)]


def test_remote_gives_one_clear_error_after_last_try() -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        raise httpx.ConnectError("refused", request=request)

    r = RemoteRetriever(RemoteConfig(url="http://x", max_retries=2, backoff_s=0.01), transport=httpx.MockTransport(handler))
    with pytest.raises(RetrievalError, match=r"failed after 3 tries: connection error"):
        r.search(["q"], 3)
    assert len(calls) == 3
    assert calls[2] - calls[0] >= 0.01 + 0.02  # backoff: 0.01 s, then doubled


def test_remote_does_not_retry_4xx_and_reports_detail() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(422, json={"detail": "topk too large: 500 > service.max_topk=100"})

    r = RemoteRetriever(RemoteConfig(url="http://x", max_retries=3, backoff_s=0), transport=httpx.MockTransport(handler))
    with pytest.raises(RetrievalError, match="max_topk=100"):
        r.search(["q"], 500)
    assert calls == [1]


def test_remote_validates_before_sending() -> None:
    r = RemoteRetriever(RemoteConfig(url="http://x"), transport=httpx.MockTransport(lambda req: httpx.Response(500)))
    with pytest.raises(RetrievalError, match="empty query list"):
        r.search([], 3)
    with pytest.raises(RetrievalError, match="url is not set"):
        RemoteRetriever(RemoteConfig())


# ---------------------------------------------------------------- /retrieve app (in-process, fake backend)


class _FakeRetriever:
    backend = "fake"

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        self.calls.append((len(queries), k))
        return [[Document(id=f"{q}-{i}", title=q, text="t", score=float(k - i)) for i in range(k)] for q in queries]

    def get(self, ids: list[str]) -> list[Document]:
        if "missing" in ids:
            raise RetrievalError("1 unknown document id(s): 'missing'")
        return [Document(id=i, title="T", text="x") for i in ids]

    def __len__(self) -> int:
        return 7


@pytest.fixture
def client():  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from searcher.retrieval.server import create_retrieve_app

    fake = _FakeRetriever()
    app = create_retrieve_app(fake, ServiceConfig(max_queries_per_request=4, max_query_chars=20, max_topk=5), default_topk=2)
    with TestClient(app) as c:
        c.fake = fake  # type: ignore[attr-defined]
        yield c


def test_app_shapes_with_and_without_scores(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/retrieve", json={"queries": ["a", "b"], "topk": 3, "return_scores": True})
    assert r.status_code == 200
    res = r.json()["result"]
    assert [len(x) for x in res] == [3, 3]
    assert res[0][0] == {"document": {"id": "a-0", "contents": '"a"\nt'}, "score": 3.0}
    r = client.post("/retrieve", json={"queries": ["a"], "return_scores": False})
    assert r.json() == {"result": [[{"id": "a-0", "contents": '"a"\nt'}, {"id": "a-1", "contents": '"a"\nt'}]]}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"queries": ["a"] * 5}, "max_queries_per_request=4"),
        ({"queries": ["x" * 21]}, "max_query_chars=20"),
        ({"queries": ["a"], "topk": 6}, "max_topk=5"),
        ({"queries": ["a"], "topk": 0}, "topk must be positive"),
        ({"queries": []}, "queries is empty"),
        ({"queries": [" "]}, "query 0 is empty"),
    ],
)
def test_app_limits_are_422_naming_the_limit(client, body: dict[str, object], needle: str) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/retrieve", json=body)
    assert r.status_code == 422
    assert needle in r.json()["detail"]
    assert client.fake.calls == []


def test_app_health_and_documents(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/health").json() == {"status": "ok", "backend": "fake", "documents": 7}
    assert client.post("/documents", json={"ids": ["z"]}).json() == {"documents": [{"id": "z", "contents": '"T"\nx'}]}
    r = client.post("/documents", json={"ids": ["missing"]})
    assert r.status_code == 404 and "missing" in r.json()["detail"]
