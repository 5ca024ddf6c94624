"""The retrieval service: a Search-R1 compatible `POST /retrieve`, `GET /health`, `POST /documents`.

    POST /retrieve {"queries": [...], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}
    POST /retrieve {..., "return_scores": false}
      -> {"result": [[{"id", "contents"}, ...], ...]}          (upstream's no-score shape; upstream crashes on it)
    GET  /health -> {"status": "ok", "backend", "documents"}
    POST /documents {"ids": [...]} -> {"documents": [{"id", "contents"}, ...]}   (lookup by id; our extension)

Queries from concurrent requests are gathered by a `MicroBatcher` into one batched backend call.
Limits (`[service]`: queries per request, query length, topk) are checked before anything runs: 422 naming the limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from s3core.errors import RetrievalError
from s3core.types import Document
from searcher.batching import MicroBatcher
from searcher.config import ServiceConfig
from searcher.retrieval.base import Retriever


class RetrieveRequest(BaseModel):
    queries: list[str] = Field(description="Queries to answer.")
    topk: int | None = Field(default=None, description="Documents per query (default: the server's default_topk).")
    return_scores: bool = Field(default=False, description="Wrap each hit as {document, score}.")


class DocumentsRequest(BaseModel):
    ids: list[str]


def _check_limits(req: RetrieveRequest, cfg: ServiceConfig) -> None:
    n = len(req.queries)
    if n == 0:
        raise HTTPException(422, "queries is empty: send at least one query")
    if n > cfg.max_queries_per_request:
        raise HTTPException(422, f"too many queries: {n} > service.max_queries_per_request={cfg.max_queries_per_request}")
    for i, q in enumerate(req.queries):
        if not q.strip():
            raise HTTPException(422, f"query {i} is empty")
        if len(q) > cfg.max_query_chars:
            raise HTTPException(422, f"query {i} is too long: {len(q)} chars > service.max_query_chars={cfg.max_query_chars}")
    if req.topk is not None and req.topk <= 0:
        raise HTTPException(422, f"topk must be positive, got {req.topk}")
    if req.topk is not None and req.topk > cfg.max_topk:
        raise HTTPException(422, f"topk too large: {req.topk} > service.max_topk={cfg.max_topk}")


def _hit(d: Document, with_score: bool) -> dict[str, Any]:
    doc = {"id": d.id, "contents": d.contents}
    return {"document": doc, "score": d.score} if with_score else doc


def make_search_batch_fn(retriever: Retriever) -> Any:
    """Batch function for a MicroBatcher over (query, k) items: one backend call at the largest k, then cut."""

    def run(items: list[tuple[str, int]]) -> list[list[Document]]:
        kmax = max(k for _, k in items)
        results = retriever.search([q for q, _ in items], kmax)
        return [docs[:k] for docs, (_, k) in zip(results, items, strict=True)]

    return run


def create_retrieve_app(retriever: Retriever, service_cfg: ServiceConfig | None = None, default_topk: int = 3) -> FastAPI:
    """FastAPI app serving `retriever` under the Search-R1 /retrieve contract."""
    cfg = service_cfg or ServiceConfig()
    batcher: MicroBatcher[tuple[str, int], list[Document]] = MicroBatcher(
        make_search_batch_fn(retriever), window_ms=cfg.batch_window_ms, max_batch=cfg.max_batch, name="retrieve"
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await batcher.aclose()

    app = FastAPI(title="s3 retrieval service", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.retriever = retriever

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest) -> JSONResponse:
        _check_limits(req, cfg)
        k = req.topk or min(default_topk, cfg.max_topk)
        try:
            results = await asyncio.wait_for(
                batcher.submit_many([(q, k) for q in req.queries]), timeout=cfg.request_timeout_s
            )
        except TimeoutError:
            raise HTTPException(504, f"retrieval took longer than service.request_timeout_s={cfg.request_timeout_s:g}") from None
        except RetrievalError as e:
            raise HTTPException(502, f"retriever failed: {e}") from None
        body = {"result": [[_hit(d, req.return_scores) for d in docs] for docs in results]}
        return JSONResponse(body)

    @app.post("/documents")
    async def documents(req: DocumentsRequest) -> JSONResponse:
        limit = cfg.max_queries_per_request * cfg.max_topk
        if len(req.ids) > limit:
            raise HTTPException(422, f"too many ids: {len(req.ids)} > {limit} (max_queries_per_request * max_topk)")
        try:
            docs = await asyncio.to_thread(retriever.get, req.ids)
        except RetrievalError as e:
            raise HTTPException(404, str(e)) from None
        return JSONResponse({"documents": [{"id": d.id, "contents": d.contents} for d in docs]})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        try:
            n: int | None = len(retriever)
        except RetrievalError:
            n = None
        return {"status": "ok", "backend": getattr(retriever, "backend", "?"), "documents": n}

    return app


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run `app` with uvicorn in a background thread (port 0 = a free one); yields the base URL.

    For tests, benchmarks and notebooks: the real server and HTTP stack, stopped cleanly on exit.
    """
    import socket
    import threading
    import time

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="uvicorn")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the uvicorn server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
