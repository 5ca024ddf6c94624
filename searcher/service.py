"""`s3 serve`: the HTTP /search service that plugs a (trained) searcher into an existing RAG app.

    app = create_search_app(searcher, retriever, cfg.service, searcher_cfg=cfg.searcher, default_topk=cfg.retriever.k)
    uvicorn.run(app, host="127.0.0.1", port=8000)

Endpoints
- `POST /search {"question", "k"?, "max_turns"?}` -> the selected documents D_s3 (id, title, text, score, turn) and a
  trajectory summary (turns, queries, retrieved / selected ids per turn, seconds). `k` is the number of documents
  retrieved per search turn, `max_turns` the number of search turns after begin-with-search; both default to the
  searcher's configuration and are bounded by `[service]` limits (422 naming the limit).
- `POST /retrieve` the Search-R1 retrieval contract, served by the retrieval layer's own router.
- `GET /health` model, index, corpus size, limits.

Concurrent /search requests are gathered into lockstep batches by `searcher.batching` (one micro-batcher per
distinct (k, max_turns) setting, so a batch always runs with one setting); the searcher itself runs one batch at a
time in a worker thread. A request still waiting after `service.request_timeout_s` gets 504 (its batch keeps running;
its result is dropped).

The request / response models and `summarize_result` have no web-framework dependency: the HTTP client and the
LangChain / LlamaIndex integrations reuse them.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from s3core.errors import RetrievalError, S3Error, ServiceError
from s3core.types import SearchResult
from searcher.config import SearcherConfig, ServiceConfig
from searcher.retrieval.base import Retriever

__all__ = [
    "SearchRequest",
    "SearchResponse",
    "SearchSettings",
    "ServedDocument",
    "SettingsBatcher",
    "StepSummary",
    "TrajectorySummary",
    "check_request",
    "create_search_app",
    "document_turns",
    "run_search",
    "summarize_result",
    "with_settings",
]


# --------------------------------------------------------------------------------------------------- wire models


class SearchRequest(BaseModel):
    """Body of `POST /search`. Limits are checked against `[service]` by `check_request` (422 naming the limit)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="The user's question.")
    k: int | None = Field(default=None, description="Documents retrieved per search turn (default: searcher's k).")
    max_turns: int | None = Field(default=None, description="Search turns after begin-with-search (default: searcher's).")


class ServedDocument(BaseModel):
    """One document of D_s3 as returned by /search."""

    id: str
    title: str = ""
    text: str = ""
    score: float | None = None
    turn: int | None = Field(default=None, description="Turn in which the document was admitted (0 = begin-with-search).")


class StepSummary(BaseModel):
    turn: int
    query: str | None = None
    retrieved_ids: list[str] = Field(default_factory=list)
    selected_ids: list[str] = Field(default_factory=list)
    selection_fallback: bool = False
    search_complete: bool | None = None
    invalid_reason: str | None = None
    seconds: float = 0.0


class TrajectorySummary(BaseModel):
    turns: int = Field(description="Search turns after begin-with-search.")
    queries: list[str] = Field(default_factory=list, description="Queries searched, in order (turn 0 = the question).")
    steps: list[StepSummary] = Field(default_factory=list)
    seconds: float = 0.0


class SearchSettings(BaseModel):
    """The per-request settings a batch shares (requests are grouped by this key)."""

    model_config = ConfigDict(frozen=True)

    k: int
    max_turns: int


class SearchResponse(BaseModel):
    question: str
    documents: list[ServedDocument] = Field(default_factory=list)
    trajectory: TrajectorySummary
    settings: SearchSettings | None = None
    answer: str | None = Field(default=None, description="Only for end-to-end agents (Search-R1) that answer themselves.")


# ------------------------------------------------------------------------------------------------ pure functions


def document_turns(result: SearchResult) -> dict[str, int]:
    """The turn in which each document of D_s3 was admitted: first turn that selected it, else the first turn whose
    whole window was admitted by the Appendix A.5 fallback, else the first turn that retrieved it."""
    turns: dict[str, int] = {}
    for step in result.steps:
        for doc_id in step.selected_ids:
            turns.setdefault(doc_id, step.turn)
    for step in result.steps:
        if step.selection_fallback:
            for doc_id in step.retrieved_ids:
                turns.setdefault(doc_id, step.turn)
    for step in result.steps:
        for doc_id in step.retrieved_ids:
            turns.setdefault(doc_id, step.turn)
    return turns


def summarize_result(result: SearchResult, settings: SearchSettings | None = None) -> SearchResponse:
    """SearchResult -> the /search response (documents with their admission turn, trajectory summary)."""
    turns = document_turns(result)
    docs = [
        ServedDocument(id=d.id, title=d.title, text=d.text, score=d.score, turn=turns.get(d.id))
        for d in result.documents
    ]
    steps = [
        StepSummary(
            turn=s.turn,
            query=s.query,
            retrieved_ids=list(s.retrieved_ids),
            selected_ids=list(s.selected_ids),
            selection_fallback=s.selection_fallback,
            search_complete=s.search_complete,
            invalid_reason=s.invalid_reason,
            seconds=round(s.policy_seconds + s.retrieval_seconds, 4),
        )
        for s in result.steps
    ]
    traj = TrajectorySummary(
        turns=result.turns,
        queries=[s.query for s in result.steps if s.query],
        steps=steps,
        seconds=round(result.seconds, 4),
    )
    return SearchResponse(question=result.question, documents=docs, trajectory=traj, settings=settings,
                          answer=result.answer)


def default_settings(searcher_cfg: SearcherConfig) -> SearchSettings:
    return SearchSettings(k=searcher_cfg.k, max_turns=searcher_cfg.max_turns)


def check_request(req: SearchRequest, limits: ServiceConfig, searcher_cfg: SearcherConfig) -> SearchSettings:
    """Validate a request against the service limits; return the settings it runs with.

    Raises ValueError whose message names the field and the limit (the app turns it into a 422)."""
    question = req.question.strip()
    if not question:
        raise ValueError("question: must not be empty")
    if len(req.question) > limits.max_query_chars:
        raise ValueError(
            f"question: {len(req.question)} characters exceeds the limit service.max_query_chars={limits.max_query_chars}"
        )
    settings = default_settings(searcher_cfg)
    k = settings.k if req.k is None else req.k
    max_turns = settings.max_turns if req.max_turns is None else req.max_turns
    if k < 1 or k > limits.max_topk:
        raise ValueError(f"k: {k} is outside 1..service.max_topk={limits.max_topk}")
    if k < searcher_cfg.max_select:
        raise ValueError(f"k: {k} is below searcher.max_select={searcher_cfg.max_select} (a window must hold the selection)")
    if max_turns < 0 or max_turns > limits.max_search_turns:
        raise ValueError(f"max_turns: {max_turns} is outside 0..service.max_search_turns={limits.max_search_turns}")
    return SearchSettings(k=k, max_turns=max_turns)


def with_settings(searcher: Any, settings: SearchSettings) -> Any:
    """The searcher to run `settings` with: itself when they are its configured ones, else a shallow copy whose
    [searcher] config has the requested per-turn k and turn budget."""
    cfg = getattr(searcher, "cfg", None)
    if not isinstance(cfg, SearcherConfig):
        raise S3Error(f"{type(searcher).__name__} has no SearcherConfig .cfg: it cannot run per-request k / max_turns")
    if (cfg.k, cfg.max_turns) == (settings.k, settings.max_turns):
        return searcher
    clone = copy.copy(searcher)
    clone.cfg = cfg.model_copy(update={"k": settings.k, "max_turns": settings.max_turns})
    return clone


def run_search(searcher: Any, questions: Sequence[str], settings: SearchSettings | None = None) -> list[SearchResult]:
    """Run the searcher on a batch of questions with one setting (None = its configured one).

    Per-call `k` / `max_turns` go in as keyword arguments when the searcher's `search` takes them; otherwise the
    searcher runs as a copy configured with them (`with_settings`)."""
    if settings is None:
        results = searcher.search(list(questions))
    else:
        params = inspect.signature(searcher.search).parameters
        if "k" in params and "max_turns" in params:
            results = searcher.search(list(questions), k=settings.k, max_turns=settings.max_turns)
        else:
            results = with_settings(searcher, settings).search(list(questions))
    results = list(results)
    if len(results) != len(questions):
        raise S3Error(f"searcher returned {len(results)} results for {len(questions)} questions")
    return results


# ------------------------------------------------------------------------------------------------------ batching


RECENT_BATCHES = 256


class SettingsBatcher:
    """Gathers concurrent searches into lockstep batches, one micro-batcher per distinct SearchSettings.

    `run(questions, settings)` is called in a worker thread, one batch at a time (a lock serialises batches of
    different settings: the policy and the CPU are shared)."""

    def __init__(
        self,
        run: Callable[[list[str], SearchSettings], list[SearchResult]],
        window_ms: float,
        max_batch: int,
    ) -> None:
        self._run = run
        self._window_ms = window_ms
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._batchers: dict[SearchSettings, Any] = {}
        # (settings, size) of the most recent batches, for tests and stats: bounded, a server runs for months
        self.batches: deque[tuple[SearchSettings, int]] = deque(maxlen=RECENT_BATCHES)
        self.batches_run = 0

    def _make(self, settings: SearchSettings) -> Any:
        from searcher.batching import MicroBatcher

        def run_batch(questions: list[str]) -> list[SearchResult]:
            with self._lock:
                self.batches.append((settings, len(questions)))
                self.batches_run += 1
                return self._run(list(questions), settings)

        return MicroBatcher(
            run_batch, window_ms=self._window_ms, max_batch=self._max_batch, name=f"search-k{settings.k}-t{settings.max_turns}"
        )

    async def submit(self, question: str, settings: SearchSettings) -> SearchResult:
        batcher = self._batchers.get(settings)
        if batcher is None:
            batcher = self._batchers[settings] = self._make(settings)
        result: SearchResult = await batcher.submit(question)
        return result

    async def aclose(self) -> None:
        for b in self._batchers.values():
            close = getattr(b, "aclose", None)
            if close is not None:
                await close()
        self._batchers.clear()


# ----------------------------------------------------------------------------------------------------------- app


def _corpus_size(retriever: Any) -> int | None:
    for name in ("corpus_size", "num_docs", "n_docs"):
        v = getattr(retriever, name, None)
        if callable(v):
            try:
                v = v()
            except Exception:
                v = None
        if isinstance(v, int):
            return v
    try:
        return len(retriever)
    except TypeError:
        return None


def create_search_app(
    searcher: Any,
    retriever: Retriever,
    service_cfg: ServiceConfig,
    *,
    searcher_cfg: SearcherConfig | None = None,
    default_topk: int = 3,
    model: str | None = None,
    index: str | None = None,
) -> Any:
    """Build the FastAPI app (`/search`, `/retrieve`, `/health`).

    searcher: an S3Searcher (per-request k / max_turns run on a reconfigured copy, see `with_settings`), or anything
        with `search(questions, k=, max_turns=) -> list[SearchResult]`;
    retriever: the searcher's retriever (for /retrieve and the corpus size); service_cfg: limits, timeouts, batching;
    searcher_cfg: request defaults when the searcher has no SearcherConfig of its own; default_topk: /retrieve's topk;
    model / index: names reported by /health (default: the searcher's model)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, HTTPException

    own_cfg = getattr(searcher, "cfg", None)
    if isinstance(own_cfg, SearcherConfig):  # defaults and limits follow the searcher actually served
        searcher_cfg = own_cfg
    searcher_cfg = searcher_cfg or SearcherConfig()
    if model is None:
        model = searcher_cfg.policy_path or searcher_cfg.model

    batcher = SettingsBatcher(
        lambda qs, st: run_search(searcher, qs, st), window_ms=service_cfg.batch_window_ms, max_batch=service_cfg.max_batch
    )

    from searcher.retrieval.server import create_retrieve_app

    retrieve_app = create_retrieve_app(retriever, service_cfg, default_topk=default_topk)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with retrieve_app.router.lifespan_context(retrieve_app):
            try:
                yield
            finally:
                await batcher.aclose()

    app = FastAPI(title="s3 search service", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.searcher = searcher

    @app.post("/search", response_model=SearchResponse)
    async def search(req: SearchRequest) -> SearchResponse:
        try:
            settings = check_request(req, service_cfg, searcher_cfg)
        except ValueError as e:
            raise HTTPException(status_code=422, detail=str(e)) from None
        t0 = time.perf_counter()
        try:
            result = await asyncio.wait_for(
                batcher.submit(req.question.strip(), settings), timeout=service_cfg.request_timeout_s
            )
        except TimeoutError:
            raise HTTPException(
                status_code=504,
                detail=f"search did not finish within service.request_timeout_s={service_cfg.request_timeout_s}",
            ) from None
        except (RetrievalError, ServiceError) as e:
            raise HTTPException(status_code=503, detail=f"search failed: {e}") from None
        except S3Error as e:
            raise HTTPException(status_code=500, detail=f"search failed: {e}") from None
        response = summarize_result(result, settings)
        if response.trajectory.seconds == 0.0:
            response.trajectory.seconds = round(time.perf_counter() - t0, 4)
        return response

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": model,
            "index": index,
            "corpus_size": _corpus_size(retriever),
            "defaults": default_settings(searcher_cfg).model_dump(),
            "limits": {
                "max_query_chars": service_cfg.max_query_chars,
                "max_topk": service_cfg.max_topk,
                "max_search_turns": service_cfg.max_search_turns,
                "request_timeout_s": service_cfg.request_timeout_s,
            },
        }

    # /retrieve (Search-R1 contract) and /documents come from the retrieval layer's own app: one implementation.
    for route in retrieve_app.router.routes:
        if getattr(route, "path", None) in ("/retrieve", "/documents"):
            app.router.routes.append(route)
    return app
