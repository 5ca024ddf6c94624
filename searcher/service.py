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
distinct (k, max_turns) setting, so a batch always runs with one setting); up to `service.batch_workers` batches run
at once in worker threads (capped by the policy: one for a local llama.cpp model), so one slow batch does not hold the
others. A request still running after `service.request_timeout_s` gets 504 and leaves its batch at the next turn (the
batch goes on without it); the policy's own per-call timeout (`searcher.timeout_s`) cuts a hung upstream call.

Failures (searcher/serving.py turns them into typed JSON): a policy call that fails for one question (rate limit, 5xx,
timeout, a rejected prompt) ends that question's search early and the answer is 200 with the documents it had, or D0
when it had none, `degraded: true` and `error: {code, message}`; credentials refused or an unknown model (every
question fails alike) are 502 `upstream_auth` / `upstream_model_not_found`; a retriever failure is 502
`retrieval_failed`; the deadline is 504 `deadline_exceeded`; the concurrency limit 503 `overloaded` + Retry-After.

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

from s3core.credentials import redact
from s3core.errors import DeadlineExceededError, S3Error
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
    """Body of `POST /search`. Limits are checked against `[service]` by `check_request` (422 naming the limit).
    Strict: unknown fields and wrong types (`"k": "5"`) are refused, never coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)

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


class SearchError(BaseModel):
    """Why a search ended early (a degraded answer)."""

    code: str = Field(description="Stable code (s3core.errors), e.g. 'upstream_rate_limited', 'upstream_timeout'.")
    message: str = Field(description="What failed, for people (redacted).")


class SearchResponse(BaseModel):
    question: str
    documents: list[ServedDocument] = Field(default_factory=list)
    trajectory: TrajectorySummary
    settings: SearchSettings | None = None
    answer: str | None = Field(default=None, description="Only for end-to-end agents (Search-R1) that answer themselves.")
    degraded: bool = Field(
        default=False,
        description="The search ended early (see `error`): `documents` are what it had admitted, or D0 (the "
        "begin-with-search top-k) when it had none.",
    )
    error: SearchError | None = None


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
            invalid_reason=redact(s.invalid_reason) if s.invalid_reason else s.invalid_reason,
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
    error = getattr(result, "error", None)
    failure = None
    if error is not None:
        failure = SearchError(code=getattr(result, "error_code", None) or "upstream_error", message=redact(error))
    return SearchResponse(question=result.question, documents=docs, trajectory=traj, settings=settings,
                          answer=result.answer, degraded=failure is not None, error=failure)


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


def run_search(
    searcher: Any,
    questions: Sequence[str],
    settings: SearchSettings | None = None,
    cancelled: Sequence[Callable[[], bool]] | None = None,
) -> list[SearchResult]:
    """Run the searcher on a batch of questions with one setting (None = its configured one).

    Per-call `k` / `max_turns` go in as keyword arguments when the searcher's `search` takes them; otherwise the
    searcher runs as a copy configured with them (`with_settings`). `cancelled` (one callable per question: has its
    caller gone?) is passed on when the searcher's `search` takes it (S3Searcher does)."""
    params = inspect.signature(searcher.search).parameters
    extra: dict[str, Any] = {"cancelled": list(cancelled)} if cancelled is not None and "cancelled" in params else {}
    if settings is None:
        results = searcher.search(list(questions), **extra)
    elif "k" in params and "max_turns" in params:
        results = searcher.search(list(questions), k=settings.k, max_turns=settings.max_turns, **extra)
    else:
        results = with_settings(searcher, settings).search(list(questions), **extra)
    results = list(results)
    if len(results) != len(questions):
        raise S3Error(f"searcher returned {len(results)} results for {len(questions)} questions")
    return results


# ------------------------------------------------------------------------------------------------------ batching


RECENT_BATCHES = 256


class SettingsBatcher:
    """Gathers concurrent searches into lockstep batches, one micro-batcher per distinct SearchSettings.

    `run(questions, settings)` (or `run(questions, settings, cancelled)` when it takes a `cancelled` parameter: one
    callable per question, True once its caller has gone) is called in a worker thread; at most `workers` batches run
    at once over all settings (the policy and the CPU are shared), so with workers > 1 a slow batch does not hold the
    others."""

    def __init__(
        self,
        run: Callable[..., list[SearchResult]],
        window_ms: float,
        max_batch: int,
        workers: int = 1,
    ) -> None:
        self._run = run
        self._pass_cancel = "cancelled" in inspect.signature(run).parameters
        self._window_ms = window_ms
        self._max_batch = max_batch
        self.workers = workers
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._batchers: dict[SearchSettings, Any] = {}
        # (settings, size) of the most recent batches, for tests and stats: bounded, a server runs for months
        self.batches: deque[tuple[SearchSettings, int]] = deque(maxlen=RECENT_BATCHES)
        self.batches_run = 0

    def _make(self, settings: SearchSettings) -> Any:
        from searcher.batching import MicroBatcher

        def run_batch(questions: list[str], gone: list[Callable[[], bool]]) -> list[SearchResult]:
            with self._slots:
                with self._lock:
                    self.batches.append((settings, len(questions)))
                    self.batches_run += 1
                if self._pass_cancel:
                    return self._run(list(questions), settings, cancelled=gone)
                return self._run(list(questions), settings)

        return MicroBatcher(
            run_batch, window_ms=self._window_ms, max_batch=self._max_batch,
            name=f"search-k{settings.k}-t{settings.max_turns}", workers=self.workers, cancel_aware=True,
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
    from pathlib import PurePath

    from fastapi import FastAPI

    from searcher.serving import ERROR_RESPONSES, ApiError, app_kwargs, check_response_budget, protect

    own_cfg = getattr(searcher, "cfg", None)
    if isinstance(own_cfg, SearcherConfig):  # defaults and limits follow the searcher actually served
        searcher_cfg = own_cfg
    searcher_cfg = searcher_cfg or SearcherConfig()
    if model is None:
        model = searcher_cfg.policy_path or searcher_cfg.model
    if index is not None:
        index = PurePath(index).name  # /health names the index, never a path of the serving machine

    # batches at once: the service's setting, capped by what the policy can take (one llama.cpp context: 1; a policy
    # that says nothing is assumed to take one at a time)
    policy = getattr(searcher, "policy", None)
    cap = getattr(policy, "max_concurrent_batches", 1) if policy is not None else service_cfg.batch_workers
    workers = max(1, min(service_cfg.batch_workers, cap if isinstance(cap, int) else service_cfg.batch_workers))

    def run(questions: list[str], settings: SearchSettings, cancelled: list[Callable[[], bool]]) -> list[SearchResult]:
        # a shallow copy per batch: batches may run at once, and the loop keeps per-batch state on the instance
        own = copy.copy(searcher) if workers > 1 else searcher
        return run_search(own, questions, settings, cancelled)

    batcher = SettingsBatcher(run, window_ms=service_cfg.batch_window_ms, max_batch=service_cfg.max_batch,
                              workers=workers)

    from searcher.retrieval.server import create_retrieve_app

    retrieve_app = create_retrieve_app(retriever, service_cfg, default_topk=default_topk)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with retrieve_app.router.lifespan_context(retrieve_app):
            try:
                yield
            finally:
                await batcher.aclose()

    app = FastAPI(title="s3 search service", lifespan=lifespan, **app_kwargs(service_cfg))
    app.state.batcher = batcher
    app.state.searcher = searcher

    @app.post("/search", response_model=SearchResponse, responses=ERROR_RESPONSES)
    async def search(req: SearchRequest) -> SearchResponse:
        try:
            settings = check_request(req, service_cfg, searcher_cfg)
        except ValueError as e:
            raise ApiError(422, "invalid_request", str(e)) from None
        t0 = time.perf_counter()
        try:
            result = await asyncio.wait_for(
                batcher.submit(req.question.strip(), settings), timeout=service_cfg.request_timeout_s
            )
        except TimeoutError:
            raise DeadlineExceededError(
                f"search did not finish within service.request_timeout_s={service_cfg.request_timeout_s}"
            ) from None
        # S3Errors (retrieval failed, credentials refused, ...) go to the typed handler: 502 / 503 / 504 as fits
        response = summarize_result(result, settings)
        check_response_budget(sum(len(d.text.encode()) + len(d.title.encode()) + len(d.id) + 64
                                  for d in response.documents), service_cfg, "this search")
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
    protect(app, service_cfg)
    return app
