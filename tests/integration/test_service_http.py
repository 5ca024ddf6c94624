"""The REAL /search service: uvicorn on a free loopback port, a real bm25s index over the 1,000 FlashRAG Wikipedia
passages in ../shared/data/flashrag_sample, and the real SmolLM2-135M searcher policy (llama.cpp through the local
litellm provider) with begin-with-search only (max_turns 0) and short replies, so each call takes about a second.

The same question is used throughout: llama.cpp reuses the cached prompt prefix of the previous call, which keeps
the module fast on 2 cores. Assertions check the service contract, never the (weak) model's choices.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

QUESTION = "who got the first nobel prize in physics"


@functools.lru_cache(maxsize=1)
def shared_index(shared_data: Path) -> Path:
    """bm25s index over flashrag_sample, built once per test process (shared with test_integrations.py)."""
    from searcher.retrieval import build_index

    tmp = Path(tempfile.mkdtemp(prefix="s3-test-search-index-"))
    atexit.register(shutil.rmtree, tmp, True)
    return build_index(shared_data / "flashrag_sample" / "sample_data.jsonl", "bm25", tmp / "bm25")


def small_config(index: Path, **service: Any) -> Any:
    from s3.config import S3Config

    return S3Config.model_validate(
        {
            "retriever": {"index": str(index), "k": 3},
            "searcher": {
                "policy": "litellm", "model": "local/smollm2-135m-instruct", "k": 3,
                "max_turns": 0, "doc_token_budget": 24, "max_new_tokens": 24,
            },
            "service": {"batch_window_ms": 300, "request_timeout_s": 600, "max_search_turns": 2, **service},
        }
    )


@functools.lru_cache(maxsize=1)
def shared_searcher(shared_data: Path) -> Any:
    """The real S3Searcher (SmolLM2 through litellm's local provider + bm25s), built once per test process."""
    from searcher.build import build_policy, build_retriever, build_searcher

    index = shared_index(shared_data)
    cfg = small_config(index)
    retriever = build_retriever(cfg.retriever, index)
    return build_searcher(cfg.searcher, retriever, build_policy(cfg.searcher), k0=cfg.retriever.k)


@pytest.fixture(scope="module")
def flashrag_index(shared_data: Path) -> Path:
    return shared_index(shared_data)


@pytest.fixture(scope="module")
def real_searcher(shared_data: Path) -> Any:
    return shared_searcher(shared_data)


class LiveServer:
    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture(scope="module")
def live_server(real_searcher: Any, flashrag_index: Path) -> Iterator[LiveServer]:
    from searcher.service import create_search_app

    cfg = small_config(flashrag_index)
    app = create_search_app(real_searcher, real_searcher.retriever, cfg.service, searcher_cfg=cfg.searcher)
    with LiveServer(app) as srv:
        yield srv


def test_search_endpoint_returns_selected_documents_and_trajectory(live_server: LiveServer, real_searcher: Any) -> None:
    r = httpx.post(f"{live_server.url}/search", json={"question": QUESTION}, timeout=600)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["question"] == QUESTION
    # the settings the LLM searcher runs with, as it describes them (GET /health: searcher.settings)
    assert body["settings"] == {"k": 3, "max_turns": 0, "max_select": 3, "context_cap": 3, "start": "top_k",
                                "additive": False}
    traj = body["trajectory"]
    assert traj["turns"] == 0 and traj["queries"] == [QUESTION] and traj["seconds"] > 0
    (step,) = traj["steps"]
    assert step["turn"] == 0 and len(step["retrieved_ids"]) == 3
    # D_s3 comes from the begin-with-search window, with full documents, bm25 scores and the admitting turn
    assert 1 <= len(body["documents"]) <= 3
    for d in body["documents"]:
        assert d["id"] in step["retrieved_ids"] and d["id"] in step["selected_ids"]
        assert d["text"] and d["title"] and d["score"] > 0 and d["turn"] == 0
    # the same documents the retriever ranks for the question
    top3 = real_searcher.retriever.search([QUESTION], 3)[0]
    assert step["retrieved_ids"] == [d.id for d in top3]


def test_health_and_retrieve_contract(live_server: LiveServer) -> None:
    h = httpx.get(f"{live_server.url}/health", timeout=30).json()
    assert h["status"] == "ok" and h["model"] == "local/smollm2-135m-instruct" and h["corpus_size"] == 1000
    r = httpx.post(f"{live_server.url}/retrieve", json={"queries": [QUESTION, "Horatio Hale"], "topk": 2,
                                                        "return_scores": True}, timeout=30)
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert len(result) == 2 and len(result[0]) == 2  # "Horatio Hale" matches one passage only
    assert result[1][0]["document"]["contents"].startswith('"Horatio Hale"\n') and result[1][0]["score"] > 0


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"question": "x" * 2001}, "service.max_query_chars=2000"),
        ({"question": QUESTION, "k": 101}, "service.max_topk=100"),
        ({"question": QUESTION, "max_turns": 3}, "service.max_search_turns=2"),
        ({"question": " "}, "must not be empty"),
    ],
)
def test_limits_are_422_naming_the_limit(live_server: LiveServer, body: dict[str, Any], needle: str) -> None:
    r = httpx.post(f"{live_server.url}/search", json=body, timeout=30)
    assert r.status_code == 422 and needle in r.json()["detail"]


def test_concurrent_requests_are_gathered_into_one_lockstep_batch(live_server: LiveServer) -> None:
    batcher = live_server.app.state.batcher
    before = batcher.batches_run

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=600) as client:
            return list(await asyncio.gather(*(client.post(f"{live_server.url}/search", json={"question": QUESTION})
                                               for _ in range(3))))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [200, 200, 200]
    new = list(batcher.batches)[before - batcher.batches_run:] if batcher.batches_run > before else []
    assert [n for _, n in new] == [3], new  # one searcher call answered all three
    ids = [[d["id"] for d in r.json()["documents"]] for r in responses]
    assert ids[0] == ids[1] == ids[2]  # same question, greedy decoding: same context


def test_timeout_is_504(real_searcher: Any, flashrag_index: Path) -> None:
    from searcher.service import create_search_app

    cfg = small_config(flashrag_index, request_timeout_s=0.01)
    app = create_search_app(real_searcher, real_searcher.retriever, cfg.service, searcher_cfg=cfg.searcher)
    with LiveServer(app) as srv:
        r = httpx.post(f"{srv.url}/search", json={"question": QUESTION}, timeout=600)
    assert r.status_code == 504 and "request_timeout_s=0.01" in r.json()["detail"]
