"""The retrieval service: a Search-R1 compatible `POST /retrieve`, `GET /health`, `POST /documents`.

    POST /retrieve {"queries": [...], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}
    POST /retrieve {..., "return_scores": false}
      -> {"result": [[{"id", "contents"}, ...], ...]}          (upstream's no-score shape; upstream crashes on it)
    GET  /health -> {"status": "ok", "backend", "documents"}
    POST /documents {"ids": [...]} -> {"documents": [{"id", "contents"}, ...]}   (lookup by id; our extension)

Bodies are written with orjson from the doc store's trusted documents (no per-hit model validation).
Queries from concurrent requests are gathered by a `MicroBatcher` into one batched backend call.
Limits (`[service]`: queries per request, query length, topk) are checked before anything runs: 422 naming the limit;
so is the response-size budget (queries x topk x the index's mean passage bytes, then the real bytes, against
service.max_response_bytes). Request bodies are strict, like /search's: unknown fields and wrong types (`"topk": "5"`,
`"return_scores": 1`) are 422, never coerced. Body size, header / body / keep-alive timeouts, concurrency, bearer auth
and the typed JSON errors come from searcher/serving.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette

from s3core.errors import DeadlineExceededError, RetrievalError
from s3core.types import Document
from searcher.batching import MicroBatcher
from searcher.config import ServiceConfig
from searcher.retrieval.base import Retriever
from searcher.serving import (
    ERROR_RESPONSES,
    ApiError,
    ErrorBody,
    app_kwargs,
    check_queries,
    check_response_budget,
    protect,
)

HIT_OVERHEAD_BYTES = 64  # JSON around one hit: {"document": {"id": , "contents": }, "score": }


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    queries: list[str] = Field(description="Queries to answer.")
    topk: int | None = Field(default=None, description="Documents per query (default: the server's default_topk).")
    return_scores: bool = Field(default=False, description="Wrap each hit as {document, score}.")


class DocumentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[str]


class DocumentOut(BaseModel):
    id: str
    contents: str = Field(description='"Title"\ntext')


class ScoredHit(BaseModel):
    document: DocumentOut
    score: float | None = None


class RetrieveResponse(BaseModel):
    """`result[i]`: the hits of query i, `{document, score}` with return_scores, bare documents without."""

    result: list[list[ScoredHit | DocumentOut]]


class DocumentsResponse(BaseModel):
    documents: list[DocumentOut]


class RetrieverHealth(BaseModel):
    status: str
    backend: str
    documents: int | None


def _invalid(detail: str) -> ApiError:
    return ApiError(422, "invalid_request", detail)


def mean_passage_bytes(retriever: Retriever) -> float | None:
    """Mean bytes of one stored passage (the doc store's size over its rows), None when the retriever cannot say
    (a remote or prebuilt index: then only the real bytes are checked, after retrieval)."""
    store = getattr(retriever, "store", None)
    offsets = getattr(store, "offsets", None)
    try:
        n = len(store) if store is not None else 0
        return float(offsets[-1]) / n if offsets is not None and n > 0 else None
    except (TypeError, IndexError):
        return None


def hits_bytes(results: list[list[Document]]) -> int:
    """About the bytes the documents of a response take on the wire."""
    return sum(len(d.id) + len(d.contents.encode()) + HIT_OVERHEAD_BYTES for docs in results for d in docs)


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
        make_search_batch_fn(retriever), window_ms=cfg.batch_window_ms, max_batch=cfg.max_batch, name="retrieve",
        full_at=cfg.batch_full_at,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await batcher.aclose()

    app = FastAPI(title="s3 retrieval service", lifespan=lifespan, **app_kwargs(cfg))
    app.state.batcher = batcher
    app.state.retriever = retriever
    passage_bytes = mean_passage_bytes(retriever)

    @app.post("/retrieve", responses={200: {"model": RetrieveResponse}, **ERROR_RESPONSES})
    async def retrieve(req: RetrieveRequest) -> Response:
        try:
            check_queries(req.queries, req.topk, cfg)
        except ValueError as e:
            raise _invalid(str(e)) from None
        k = req.topk or min(default_topk, cfg.max_topk)
        if passage_bytes is not None:  # refuse before the work: queries x topk x passage bytes
            estimate = int(len(req.queries) * k * (passage_bytes + HIT_OVERHEAD_BYTES))
            check_response_budget(estimate, cfg, f"{len(req.queries)} queries x topk {k}")
        try:
            results = await asyncio.wait_for(
                batcher.submit_many([(q, k) for q in req.queries]), timeout=cfg.request_timeout_s
            )
        except TimeoutError:
            raise DeadlineExceededError(
                f"retrieval took longer than service.request_timeout_s={cfg.request_timeout_s:g}") from None
        check_response_budget(hits_bytes(results), cfg, f"{len(req.queries)} queries x topk {k}")
        body = {"result": [[_hit(d, req.return_scores) for d in docs] for docs in results]}
        return Response(orjson.dumps(body), media_type="application/json")

    @app.post("/documents", responses={200: {"model": DocumentsResponse}, 404: {"model": ErrorBody},
                                       **ERROR_RESPONSES})
    async def documents(req: DocumentsRequest) -> Response:
        limit = cfg.max_queries_per_request * cfg.max_topk
        if len(req.ids) > limit:
            raise _invalid(f"too many ids: {len(req.ids)} > {limit} (max_queries_per_request * max_topk)")
        try:
            docs = await asyncio.to_thread(retriever.get, req.ids)
        except RetrievalError as e:
            raise ApiError(404, "not_found", str(e)) from None
        check_response_budget(hits_bytes([docs]), cfg, f"{len(req.ids)} documents")
        return Response(orjson.dumps({"documents": [{"id": d.id, "contents": d.contents} for d in docs]}),
                        media_type="application/json")

    @app.get("/health")
    async def health() -> RetrieverHealth:
        try:
            n: int | None = len(retriever)
        except RetrievalError:
            n = None
        return RetrieverHealth(status="ok", backend=str(getattr(retriever, "backend", "?")), documents=n)

    protect(app, cfg)
    return app


@contextmanager
def serve_in_thread(
    app: Starlette, host: str = "127.0.0.1", port: int = 0, service_cfg: ServiceConfig | None = None
) -> Iterator[str]:
    """Run `app` (any Starlette app, FastAPI ones included) with uvicorn in a background thread (port 0 = a free
    one); yields the base URL.

    For tests, benchmarks and notebooks: the real server and HTTP stack with the [service] limits (`service_cfg`,
    default ServiceConfig()), stopped cleanly on exit.
    """
    import socket
    import threading
    import time

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    from searcher.serving import uvicorn_config

    server = uvicorn.Server(uvicorn_config(app, service_cfg or ServiceConfig()))
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
