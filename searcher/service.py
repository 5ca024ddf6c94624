"""`s3 serve`: the HTTP /search service that plugs a (trained) searcher into an existing RAG app.

    app = create_search_app(searcher, retriever, cfg.service, searcher_cfg=cfg.searcher, default_topk=cfg.retriever.k)
    uvicorn.run(app, host="127.0.0.1", port=8000)

Endpoints
- `POST /search {"question", <the searcher's request fields>?, "max_documents"?}` -> `SearchResponse`: the selected
  documents D_s3 (id, title, text, score, turn), a trajectory summary (turns, queries, retrieved / selected ids per
  turn, how it stopped, and the seconds of each model: policy, reader, retrieval), the cost (policy and reader calls,
  tokens, dollars) and the settings it ran with (the searcher's `describe()` settings, the request's applied). The
  same record is MCP `gather_context`'s answer and `s3 search --json`'s output. Which per-call fields a request may
  set is the served searcher's own (`request_fields`: the LLM searcher's `k`, documents retrieved per search turn, and
  `max_turns`, search turns after begin-with-search; the title-following scripts' `k`, documents per name searched);
  each defaults to the searcher's configuration, is bounded by `[service]` limits and checked by the searcher's own
  rules (`check_call`): 422 naming the field. `max_documents` caps the documents returned, for every searcher.
- `POST /retrieve` the Search-R1 retrieval contract, served by the retrieval layer's own router.
- `GET /health` the searcher's `describe()` (kind, what it does, model, reader, ranker, settings, request fields),
  index, corpus size, limits.

Concurrent /search requests (and MCP `gather_context` calls) are gathered into lockstep batches by `SettingsBatcher`
(one micro-batcher per distinct (k, max_turns) setting, so a batch always runs with one setting, passed to the
searcher per call); up to `service.batch_workers` batches run at once in worker threads (capped by the policy: one for
a local llama.cpp model), so one slow batch does not hold the others. A request still running after `service.request_timeout_s` gets 504 and leaves its batch at the next turn (the
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
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from s3core.credentials import redact
from s3core.errors import DeadlineExceededError, S3Error
from s3core.pricing import Price
from s3core.types import SearchResult
from searcher.batching import MicroBatcher
from searcher.config import SearcherConfig, ServiceConfig
from searcher.retrieval.base import Retriever

__all__ = [
    "SearchCost",
    "SearchError",
    "SearchRequest",
    "SearchResponse",
    "SearchSettings",
    "ServedDocument",
    "ServedSearcher",
    "SettingsBatcher",
    "StepSummary",
    "TrajectorySummary",
    "batch_workers",
    "check_request",
    "create_search_app",
    "describe",
    "described_settings",
    "document_turns",
    "policy_price",
    "request_fields",
    "run_search",
    "search_cost",
    "summarize_result",
]


# --------------------------------------------------------------------------------------------------- wire models


class SearchRequest(BaseModel):
    """Body of `POST /search`. Limits are checked against `[service]` by `check_request` (422 naming the limit).
    Strict: unknown fields and wrong types (`"k": "5"`) are refused, never coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question: str = Field(description="The user's question.")
    k: int | None = Field(default=None, description="Documents retrieved per search turn (the LLM searcher's) or per "
                          "name searched (the title-following scripts'); default: the searcher's k. A request field "
                          "of every served kind but Search-R1 (GET /health: searcher.request_fields).")
    max_turns: int | None = Field(default=None, description="Search turns after begin-with-search (default: the "
                                  "searcher's). A request field of the policy searchers only (GET /health).")
    max_documents: int | None = Field(default=None, description="Return at most this many of the documents "
                                      "(default: all of them; at least 1); MCP gather_context's max_documents.")


class ServedDocument(BaseModel):
    """One document of D_s3 as returned by /search."""

    id: str
    title: str = ""
    text: str = ""
    score: float | None = None
    turn: int | None = Field(default=None, description="Turn in which the document was admitted (0 = begin-with-search).")
    original_id: str | None = Field(
        default=None, description="The id the user's corpus gave the document, where `s3 data prepare` had to change it "
        "(its manifest's renamed_ids); null when `id` is the corpus's own.")


class StepSummary(BaseModel):
    turn: int
    query: str | None = None
    retrieved_ids: list[str] = Field(default_factory=list)
    selected_ids: list[str] = Field(default_factory=list)
    selection_fallback: bool = False
    search_complete: bool | None = None
    invalid_reason: str | None = None
    seconds: float = Field(0.0, description="The turn's seconds: its policy, reader and retrieval seconds together.")
    policy_seconds: float = Field(0.0, description="The policy model's share (0 for a searcher without one).")
    reader_seconds: float = Field(0.0, description="The reader model's share (the reading searcher's read).")
    retrieval_seconds: float = Field(0.0, description="The retriever's share.")


class TrajectorySummary(BaseModel):
    turns: int = Field(description="Search turns after begin-with-search.")
    queries: list[str] = Field(default_factory=list, description="Queries searched, in order (turn 0 = the question; every query of a turn that gave several).")
    steps: list[StepSummary] = Field(default_factory=list)
    seconds: float = Field(0.0, description="Wall time of the search (its models' shares below, and the loop's own).")
    policy_seconds: float = Field(0.0, description="The policy model's seconds over the turns (0 without one).")
    reader_seconds: float = Field(0.0, description="The reader model's seconds over the turns (0 without one).")
    retrieval_seconds: float = Field(0.0, description="The retriever's seconds over the turns.")
    stop: Literal["search_complete", "max_turns", "error"] = Field(
        "search_complete", description="How the search ended: 'search_complete' (the searcher said it had enough), "
        "'max_turns' (the turn budget was spent) or 'error' (it ended early: see `error`).")


class SearchSettings(BaseModel):
    """The per-request settings a batch shares (requests are grouped by this key): the loop settings a request may
    change. What a response reports is the searcher's own description of them (`described_settings`)."""

    model_config = ConfigDict(frozen=True)

    k: int
    max_turns: int

    def applied_to(self, cfg: SearcherConfig) -> SearcherConfig:
        """`cfg` (the loop settings served) with this request's per-turn k and turn budget."""
        if (cfg.k, cfg.max_turns) == (self.k, self.max_turns):
            return cfg
        return cfg.model_copy(update={"k": self.k, "max_turns": self.max_turns})


class SearchError(BaseModel):
    """Why a search ended early (a degraded answer)."""

    code: str = Field(description="Stable code (s3core.errors), e.g. 'upstream_rate_limited', 'upstream_timeout'.")
    message: str = Field(description="What failed, for people (redacted).")


class SearchCost(BaseModel):
    """What the search cost."""

    policy_calls: int = Field(description="Searcher LLM calls (one per reply, the reply to the first retrieval "
                              "included); 0 for a searcher that runs no policy.")
    reader_calls: int = Field(0, description="Reader passes (the reading searcher's: one per question it read "
                              "further); 0 for a searcher without a reader.")
    prompt_tokens: int = Field(description="Prompt tokens over those calls.")
    completion_tokens: int = Field(description="Completion tokens over those calls.")
    usd: float | None = Field(description="Dollars (0 for a local model); null when the policy model's price is "
                              "unknown (set searcher.input_cost_per_mtok / output_cost_per_mtok).")
    seconds: float = Field(description="Wall time of the search.")


class SearchResponse(BaseModel):
    """A searcher's answer for one question: the one result shape of `/search`, MCP `gather_context`, `s3 search
    --json` and the Python clients (searcher/integrations); a contexts.jsonl row (`s3 search --out`, eval/contexts.py)
    is this record without the document texts, keyed by the question id."""

    question: str
    documents: list[ServedDocument] = Field(
        default_factory=list, description="The selected documents D_s3, in the order they were admitted.")
    trajectory: TrajectorySummary
    cost: SearchCost | None = None
    settings: dict[str, Any] | None = Field(
        default=None, description="The settings the searcher ran with, as it describes them (GET /health's "
        "searcher.settings, this request's fields applied).")
    answer: str | None = Field(default=None, description="Only for end-to-end agents (Search-R1) that answer themselves.")
    degraded: bool = Field(
        default=False,
        description="The search ended early (see `error`): `documents` are what it had admitted, or D0 (the "
        "begin-with-search top-k) when it had none.",
    )
    error: SearchError | None = None


class ServedSearcher(Protocol):
    """What the services run (every searcher/base.py `Searcher` is one): a searcher with its loop settings that takes
    per-call ones. Where it has them, its `describe(cfg)`, `request_fields` and `check_call(cfg)` (every `Searcher`
    does) say what it is, which fields a request may set, and which values its kind refuses."""

    cfg: SearcherConfig

    def search(
        self, questions: Sequence[str], *, cfg: SearcherConfig | None = None,
        cancelled: Sequence[Callable[[], bool]] | None = None,
    ) -> list[SearchResult]: ...


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
    # D_s3 is in admission order, so no document was admitted after one that follows it: an additive search's
    # naive top-k (admitted at turn 0 unselected) that the policy selects again later keeps its turn 0
    later = None
    for d in reversed(result.documents):
        t = turns.get(d.id)
        if t is None:
            continue
        if later is not None and t > later:
            turns[d.id] = later
        later = turns[d.id]
    return turns


def stop_reason(result: SearchResult, max_turns: int) -> Literal["search_complete", "max_turns", "error"]:
    if result.error is not None:
        return "error"
    if any(s.search_complete for s in result.steps):
        return "search_complete"
    return "max_turns" if result.turns >= max_turns else "search_complete"


def search_cost(result: SearchResult, price: Price | None) -> SearchCost:
    """Policy calls (every step the policy replied to: the one that read the first retrieval included; a step left
    when the caller's deadline passed had no reply), reader passes (every step the reader read in), tokens and
    dollars of one search."""
    calls = sum(1 for s in result.steps if s.policy_text or s.policy_seconds > 0 or s.completion_tokens)
    pt = sum(s.prompt_tokens for s in result.steps)
    ct = sum(s.completion_tokens for s in result.steps)
    return SearchCost(policy_calls=calls, reader_calls=sum(1 for s in result.steps if s.reader_seconds > 0),
                      prompt_tokens=pt, completion_tokens=ct,
                      usd=None if price is None else round(price.cost(pt, ct), 9), seconds=round(result.seconds, 4))


def summarize_result(
    result: SearchResult, settings: SearchSettings | None = None, *, max_turns: int | None = None,
    price: Price | None = None, ran_with: dict[str, Any] | None = None,
) -> SearchResponse:
    """SearchResult -> the typed answer (documents with their admission turn, trajectory summary with each model's
    seconds, cost).

    max_turns: the turn budget the search ran with (default: `settings`', else the turns it took), for the stop
    reason; price: the policy model's (None: `cost.usd` is null); ran_with: the settings as the searcher describes
    them (`described_settings`; default: `settings`' own fields)."""
    turns = document_turns(result)
    docs = [
        ServedDocument(id=d.id, title=d.title, text=d.text, score=d.score, turn=turns.get(d.id), original_id=d.original_id)
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
            seconds=round(s.policy_seconds + s.reader_seconds + s.retrieval_seconds, 4),
            policy_seconds=round(s.policy_seconds, 4), reader_seconds=round(s.reader_seconds, 4),
            retrieval_seconds=round(s.retrieval_seconds, 4),
        )
        for s in result.steps
    ]
    budget = max_turns if max_turns is not None else settings.max_turns if settings is not None else result.turns
    traj = TrajectorySummary(
        turns=result.turns,
        queries=[q for s in result.steps for q in (s.queries or ([s.query] if s.query else []))],
        steps=steps,
        seconds=round(result.seconds, 4),
        policy_seconds=round(sum(s.policy_seconds for s in result.steps), 4),
        reader_seconds=round(sum(s.reader_seconds for s in result.steps), 4),
        retrieval_seconds=round(sum(s.retrieval_seconds for s in result.steps), 4),
        stop=stop_reason(result, budget),
    )
    failure = None
    if result.error is not None:
        failure = SearchError(code=result.error_code or "upstream_error", message=redact(result.error))
    if ran_with is None and settings is not None:
        ran_with = settings.model_dump()
    return SearchResponse(question=result.question, documents=docs, trajectory=traj, cost=search_cost(result, price),
                          settings=ran_with, answer=result.answer, degraded=failure is not None, error=failure)


def policy_price(cfg: SearcherConfig) -> Price | None:
    """The searcher model's price: 0 for a policy that runs here (transformers, an in-process vLLM, `local/`), the
    section's prices, or litellm's cost map (s3core/pricing.py); None = unknown."""
    from s3core.pricing import resolve_price

    if cfg.policy != "litellm" and cfg.input_cost_per_mtok is None:
        return Price(0.0, 0.0, "local")
    return resolve_price(cfg.model, cfg.api_base, cfg.input_cost_per_mtok, cfg.output_cost_per_mtok)


def default_settings(searcher_cfg: SearcherConfig) -> SearchSettings:
    return SearchSettings(k=searcher_cfg.k, max_turns=searcher_cfg.max_turns)


# the per-call fields of a searcher that does not say which it takes (a stand-in: a client, a scripted test searcher)
LOOP_FIELDS = {"k": "documents retrieved per search turn", "max_turns": "search turns after begin-with-search"}
QUESTION_FIELD = {"question": "the question (required)"}
MAX_DOCUMENTS_FIELD = {"max_documents": "return at most this many of the documents (default: all of them)"}


def request_fields(searcher: ServedSearcher) -> dict[str, str]:
    """The per-call settings a request may set for `searcher` (its `request_fields`), each with what it means there."""
    fields = getattr(searcher, "request_fields", None)
    return dict(LOOP_FIELDS if fields is None else fields)


def describe(searcher: ServedSearcher, cfg: SearcherConfig | None = None) -> dict[str, Any]:
    """`searcher.describe(cfg)` (searcher/base.py: kind, what it does, model, reader, ranker, settings, request
    fields), or, for a stand-in that does not describe itself, its loop settings and fields."""
    run = searcher.cfg if cfg is None else cfg
    own = getattr(searcher, "describe", None)
    if callable(own):
        return dict(own(run))
    return {"kind": getattr(searcher, "kind", None), "model": run.policy_path or run.model,
            "settings": default_settings(run).model_dump(), "request_fields": request_fields(searcher)}


def described_settings(searcher: ServedSearcher, settings: SearchSettings,
                       cfg: SearcherConfig | None = None) -> dict[str, Any]:
    """The settings a request ran with as the searcher describes them: its `describe()` settings with the request's
    fields applied to `cfg` (default: the searcher's own)."""
    run = settings.applied_to(searcher.cfg if cfg is None else cfg)
    return dict(describe(searcher, run).get("settings") or settings.model_dump())


def check_request(req: SearchRequest, limits: ServiceConfig, searcher: ServedSearcher,
                  searcher_cfg: SearcherConfig | None = None) -> SearchSettings:
    """Validate a request for `searcher` (served with `searcher_cfg`, default its own settings): the question, then
    each field the request sets: one the searcher takes (`request_fields`), within the service limits, and a value its
    kind can run (`check_call`). Returns the settings it runs with (the searcher's own where the request says none).

    Raises ValueError whose message names the field and the limit or rule (the app turns it into a 422)."""
    cfg = searcher.cfg if searcher_cfg is None else searcher_cfg
    question = req.question.strip()
    if not question:
        raise ValueError("question: must not be empty")
    if len(req.question) > limits.max_query_chars:
        raise ValueError(
            f"question: {len(req.question)} characters exceeds the limit service.max_query_chars={limits.max_query_chars}"
        )
    fields = request_fields(searcher)
    for name in LOOP_FIELDS:
        if getattr(req, name) is not None and name not in fields:
            kind = getattr(searcher, "kind", None) or "served"
            takes = ", ".join([*QUESTION_FIELD, *fields, *MAX_DOCUMENTS_FIELD])
            raise ValueError(f"{name}: the {kind} searcher takes no {name} (its request fields: {takes})")
    if req.max_documents is not None and req.max_documents < 1:  # checked here, as k is: the schema's integers are
        # strict (a JSON schema minimum makes generators send 2.0, which strict validation refuses)
        raise ValueError(f"max_documents: {req.max_documents} is outside 1..(all of them; at most service.max_topk "
                         "a turn are retrieved)")
    settings = default_settings(cfg)
    k = settings.k if req.k is None else req.k
    max_turns = settings.max_turns if req.max_turns is None else req.max_turns
    if "k" in fields and (k < 1 or k > limits.max_topk):
        raise ValueError(f"k: {k} is outside 1..service.max_topk={limits.max_topk}")
    if "max_turns" in fields and (max_turns < 0 or max_turns > limits.max_search_turns):
        raise ValueError(f"max_turns: {max_turns} is outside 0..service.max_search_turns={limits.max_search_turns}")
    settings = SearchSettings(k=k, max_turns=max_turns)
    check = getattr(searcher, "check_call", None)
    if callable(check):
        try:
            check(settings.applied_to(cfg))
        except S3Error as e:
            raise ValueError(str(e)) from None
    return settings


def run_search(
    searcher: ServedSearcher,
    questions: Sequence[str],
    settings: SearchSettings | None = None,
    cancelled: Sequence[Callable[[], bool]] | None = None,
    *,
    cfg: SearcherConfig | None = None,
) -> list[SearchResult]:
    """Run the searcher on a batch of questions with one setting: `cfg` (default: the searcher's own loop settings)
    with the request's per-turn k and turn budget (`settings`; None = as configured). `cancelled`: one callable per
    question, True once its caller has gone (the question then leaves the batch)."""
    base = searcher.cfg if cfg is None else cfg
    run_cfg = base if settings is None else settings.applied_to(base)
    results = list(searcher.search(list(questions), cfg=run_cfg, cancelled=cancelled))
    if len(results) != len(questions):
        raise S3Error(f"searcher returned {len(results)} results for {len(questions)} questions")
    return results


# ------------------------------------------------------------------------------------------------------ batching


RECENT_BATCHES = 256


def batch_workers(searcher: ServedSearcher, service_cfg: ServiceConfig) -> int:
    """Batches that may run at once: service.batch_workers, capped by what the policy can take (its
    `max_concurrent_batches`: 1 for one llama.cpp context, None = no cap; a policy that says nothing takes one)."""
    policy = getattr(searcher, "policy", None)
    if policy is None:  # a searcher without a policy of its own (a client, a scripted stand-in)
        return service_cfg.batch_workers
    cap = getattr(policy, "max_concurrent_batches", 1)
    return max(1, min(service_cfg.batch_workers, cap)) if isinstance(cap, int) else service_cfg.batch_workers


class SettingsBatcher:
    """Gathers concurrent searches into lockstep batches, one micro-batcher per distinct SearchSettings: what /search
    and MCP `gather_context` both submit to.

    A batch runs `run_search(searcher, questions, settings, cancelled, cfg=cfg)` in a worker thread (`cfg`: the loop
    settings served, default the searcher's own); at most `batch_workers(searcher, service_cfg)` batches run at once
    over all settings (the policy and the CPU are shared), so with several a slow batch does not hold the others. The
    searcher keeps no per-call state, so concurrent batches share it."""

    def __init__(self, searcher: ServedSearcher, service_cfg: ServiceConfig, *, cfg: SearcherConfig | None = None) -> None:
        self.searcher = searcher
        self.cfg = searcher.cfg if cfg is None else cfg
        self._window_ms = service_cfg.batch_window_ms
        self._max_batch = service_cfg.max_batch
        self.workers = batch_workers(searcher, service_cfg)
        self._slots = threading.BoundedSemaphore(self.workers)
        self._lock = threading.Lock()
        self._batchers: dict[SearchSettings, MicroBatcher[str, SearchResult]] = {}
        # (settings, size) of the most recent batches, for tests and stats: bounded, a server runs for months
        self.batches: deque[tuple[SearchSettings, int]] = deque(maxlen=RECENT_BATCHES)
        self.batches_run = 0

    def _make(self, settings: SearchSettings) -> MicroBatcher[str, SearchResult]:
        def run_batch(questions: list[str], gone: list[Callable[[], bool]]) -> list[SearchResult]:
            with self._slots:
                with self._lock:
                    self.batches.append((settings, len(questions)))
                    self.batches_run += 1
                return run_search(self.searcher, questions, settings, gone, cfg=self.cfg)

        return MicroBatcher(
            run_batch, window_ms=self._window_ms, max_batch=self._max_batch,
            name=f"search-k{settings.k}-t{settings.max_turns}", workers=self.workers, cancel_aware=True,
        )

    async def submit(self, question: str, settings: SearchSettings) -> SearchResult:
        batcher = self._batchers.get(settings)
        if batcher is None:
            batcher = self._batchers[settings] = self._make(settings)
        return await batcher.submit(question)

    async def aclose(self) -> None:
        for b in self._batchers.values():
            await b.aclose()
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
    searcher: ServedSearcher,
    retriever: Retriever,
    service_cfg: ServiceConfig,
    *,
    searcher_cfg: SearcherConfig | None = None,
    default_topk: int = 3,
    model: str | None = None,
    index: str | None = None,
    why: str | None = None,
) -> Any:
    """Build the FastAPI app (`/search`, `/retrieve`, `/health`).

    searcher: an S3Searcher, or anything with its `cfg` and `search(questions, *, cfg=, cancelled=)` (ServedSearcher);
    retriever: the searcher's retriever (for /retrieve and the corpus size); service_cfg: limits, timeouts, batching;
    searcher_cfg: the loop settings requests run with (default: the searcher's own; a request's fields apply on top);
    default_topk: /retrieve's topk; model / index: names reported by /health (default: the model the searcher
    describes, None for a script); why: which searcher runs and why, in words (s3/build.py), reported by /health with
    the searcher's `describe()`."""
    from contextlib import asynccontextmanager
    from pathlib import PurePath

    from fastapi import FastAPI

    from searcher.serving import ERROR_RESPONSES, ApiError, app_kwargs, check_response_budget, protect

    searcher_cfg = searcher.cfg if searcher_cfg is None else searcher_cfg
    described = describe(searcher, searcher_cfg)  # what it is, its settings and request fields (searcher/base.py)
    if model is None:
        model = described.get("model")
    fields = {**QUESTION_FIELD, **request_fields(searcher), **MAX_DOCUMENTS_FIELD}
    ran: dict[SearchSettings, dict[str, Any]] = {}  # each setting's description, made once
    if index is not None:
        index = PurePath(index).name  # /health names the index, never a path of the serving machine
    price = policy_price(searcher_cfg)
    batcher = SettingsBatcher(searcher, service_cfg, cfg=searcher_cfg)

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
            settings = check_request(req, service_cfg, searcher, searcher_cfg)
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
        if settings not in ran:
            ran[settings] = described_settings(searcher, settings, searcher_cfg)
        response = summarize_result(result, settings, price=price, ran_with=ran[settings])
        response.documents = response.documents[:req.max_documents]
        check_response_budget(sum(len(d.text.encode()) + len(d.title.encode()) + len(d.id) + 64
                                  for d in response.documents), service_cfg, "this search")
        if response.trajectory.seconds == 0.0:
            response.trajectory.seconds = round(time.perf_counter() - t0, 4)
        return response

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "kind": described.get("kind"),
            "model": model,
            "searcher": {**described, "why": why},
            "index": index,
            "corpus_size": _corpus_size(retriever),
            "defaults": described.get("settings"),
            "request_fields": fields,
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
