"""`s3 mcp`: the searcher as a Model Context Protocol server, for any agent or IDE that takes MCP tools.

    server = MCPSearchServer(searcher, retriever, cfg.service, searcher_cfg=cfg.searcher, price=price)
    await server.mcp.run_stdio_async()                   # stdio (desktop agents, IDEs)
    app = server.http_app()                              # streamable HTTP at /mcp (stateless, JSON responses)

Tools (typed inputs, output schemas, annotations: read-only, idempotent, closed-world):
- `gather_context(question, max_documents?)`: the searcher's loop (a trained `--policy RUN_DIR` or zero-shot) ->
  the selected documents (id, title, text, score, turn), the trajectory (queries, turns, how it stopped) and its cost
  (policy calls, tokens, dollars, seconds);
- `search(queries, k?)`: plain retrieval, batch-first (one list of hits per query);
- `get_document(id)`: one passage by id.

The searcher, the index and the batchers are built once, before the server takes its first call (the MCP SDK runs
its per-session lifespan once per stateless HTTP request, so nothing heavy lives there). Concurrent `gather_context`
calls are gathered into lockstep batches by the same `SettingsBatcher` as `s3 serve`'s /search, and `search` calls by
the same micro-batcher as /retrieve; the limits are `[service]`'s (question / query length, queries per call, topk,
request deadline), and over HTTP the services' middlewares apply too (bearer auth from service.auth_token_env, body
size and timeouts, concurrency, typed JSON errors: searcher/serving.py). A bad argument is a tool error (`isError`)
whose text says what is wrong; a failed policy call ends that search early (`degraded` with its error code), never a
traceback.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Annotated, Any, BinaryIO

from pydantic import BaseModel, Field

from s3core.credentials import redact
from s3core.errors import RetrievalError, S3Error
from s3core.pricing import Price
from s3core.types import Document, SearchResult
from searcher.config import SearcherConfig, ServiceConfig
from searcher.retrieval.base import Retriever
from searcher.service import (
    SearchRequest,
    SettingsBatcher,
    check_request,
    default_settings,
    run_search,
    summarize_result,
)

__all__ = [
    "ContextCost",
    "ContextTrajectory",
    "DocumentOut",
    "GatheredContext",
    "MCPSearchServer",
    "SearchHits",
    "SearchOut",
]


# --------------------------------------------------------------------------------------------- tool outputs


class DocumentOut(BaseModel):
    """One passage."""

    id: str = Field(description="The passage id in the index.")
    title: str = Field("", description="The passage's title (a Wikipedia article's, for Wikipedia corpora).")
    text: str = Field("", description="The passage text.")
    score: float | None = Field(None, description="The retriever's score (higher is better), where there is one.")


class SelectedDocument(DocumentOut):
    turn: int | None = Field(None, description="The search turn that admitted it (0 = the search on the question).")


class ContextTrajectory(BaseModel):
    """How the searcher got there."""

    queries: list[str] = Field(description="Queries searched, in order (the first is the question itself).")
    turns: int = Field(description="Search turns after the first search on the question.")
    stop: str = Field(description="'search_complete' (the searcher said it had enough), 'max_turns' (turn budget "
                      "spent), or 'error' (a policy call failed: see `error`).")
    invalid_turns: int = Field(0, description="Turns whose action could not be parsed (the loop went on).")


class ContextCost(BaseModel):
    """What the search cost."""

    policy_calls: int = Field(description="Searcher LLM calls.")
    prompt_tokens: int = Field(description="Prompt tokens over those calls.")
    completion_tokens: int = Field(description="Completion tokens over those calls.")
    usd: float | None = Field(description="Dollars (0 for a local model); null when the policy model's price is "
                              "unknown (set searcher.input_cost_per_mtok / output_cost_per_mtok).")
    seconds: float = Field(description="Wall time of the search.")


class GatheredContext(BaseModel):
    """`gather_context`'s answer: the documents to answer `question` from."""

    question: str
    documents: list[SelectedDocument] = Field(description="The selected documents, in the order they were admitted.")
    trajectory: ContextTrajectory
    cost: ContextCost
    degraded: bool = Field(False, description="The search ended early (see `error`); `documents` are what it had.")
    error: str | None = Field(None, description="Why it ended early: '<code>: <message>'.")


class SearchHits(BaseModel):
    query: str
    hits: list[DocumentOut]


class SearchOut(BaseModel):
    """`search`'s answer: one list of hits per query, in the order of the queries."""

    results: list[SearchHits]


# --------------------------------------------------------------------------------------------- pure helpers


def stop_reason(result: SearchResult, max_turns: int) -> str:
    if result.error is not None:
        return "error"
    if any(s.search_complete for s in result.steps):
        return "search_complete"
    return "max_turns" if result.turns >= max_turns else "search_complete"


def gathered(result: SearchResult, max_turns: int, max_documents: int | None, price: Price | None,
             seconds: float) -> GatheredContext:
    """SearchResult -> the tool's structured output (the /search summary, plus the stop reason and the cost)."""
    resp = summarize_result(result)
    docs = [SelectedDocument(id=d.id, title=d.title, text=d.text, score=d.score, turn=d.turn) for d in resp.documents]
    if max_documents is not None:
        docs = docs[:max_documents]
    calls = sum(1 for s in result.steps if s.turn > 0)
    pt = sum(s.prompt_tokens for s in result.steps)
    ct = sum(s.completion_tokens for s in result.steps)
    err = f"{resp.error.code}: {resp.error.message}" if resp.error is not None else None
    return GatheredContext(
        question=result.question,
        documents=docs,
        trajectory=ContextTrajectory(queries=resp.trajectory.queries, turns=result.turns,
                                     stop=stop_reason(result, max_turns),
                                     invalid_turns=sum(1 for s in result.steps if s.turn > 0 and s.invalid_reason)),
        cost=ContextCost(policy_calls=calls, prompt_tokens=pt, completion_tokens=ct,
                         usd=None if price is None else round(price.cost(pt, ct), 9), seconds=round(seconds, 4)),
        degraded=resp.degraded,
        error=err,
    )


def policy_price(cfg: SearcherConfig) -> Price | None:
    """The searcher model's price: 0 for a policy that runs here (transformers, an in-process vLLM, `local/`), the
    section's prices, or litellm's cost map (s3core/pricing.py); None = unknown."""
    from s3core.pricing import resolve_price

    if cfg.policy != "litellm" and cfg.input_cost_per_mtok is None:
        return Price(0.0, 0.0, "local")
    return resolve_price(cfg.model, cfg.api_base, cfg.input_cost_per_mtok, cfg.output_cost_per_mtok)


# --------------------------------------------------------------------------------------------- the server


class MCPSearchServer:
    """The MCP server over one searcher and its retriever (built once by the caller)."""

    def __init__(self, searcher: Any, retriever: Retriever, service_cfg: ServiceConfig, *,
                 searcher_cfg: SearcherConfig | None = None, price: Price | None = None,
                 name: str = "s3-searcher") -> None:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import ToolAnnotations

        from searcher.batching import MicroBatcher
        from searcher.retrieval.server import make_search_batch_fn

        own = getattr(searcher, "cfg", None)
        self.searcher_cfg = own if isinstance(own, SearcherConfig) else (searcher_cfg or SearcherConfig())
        self.service_cfg = cfg = service_cfg
        self.searcher, self.retriever, self.price = searcher, retriever, price
        # batches at once: as `s3 serve` (searcher/service.py): the service's setting, capped by the policy's
        policy = getattr(searcher, "policy", None)
        cap = getattr(policy, "max_concurrent_batches", 1) if policy is not None else cfg.batch_workers
        workers = max(1, min(cfg.batch_workers, cap if isinstance(cap, int) else cfg.batch_workers))

        def run(questions: list[str], settings: Any, cancelled: list[Any]) -> list[SearchResult]:
            own = copy.copy(searcher) if workers > 1 else searcher  # the loop keeps per-batch state on the instance
            return run_search(own, questions, settings, cancelled)

        self.batcher = SettingsBatcher(run, window_ms=cfg.batch_window_ms, max_batch=cfg.max_batch, workers=workers)
        self.retrieval: MicroBatcher[tuple[str, int], list[Document]] = MicroBatcher(
            make_search_batch_fn(retriever), window_ms=cfg.batch_window_ms, max_batch=cfg.max_batch, name="mcp-search")
        self.mcp = MCPServer(
            name,
            instructions="Search tools over one document index. gather_context(question) runs a trained search agent "
            "that issues its own queries and returns the few documents needed to answer; search(queries, k) is plain "
            "retrieval; get_document(id) fetches one passage.",
            log_level="WARNING",
        )
        closed = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
        defaults = default_settings(self.searcher_cfg)

        def fail(message: str) -> ToolError:
            return ToolError(redact(message))

        @self.mcp.tool(annotations=closed.model_copy(update={"title": "Gather context for a question"}),
                       structured_output=True)
        async def gather_context(
            question: Annotated[str, Field(description="The question to gather documents for.")],
            max_documents: Annotated[int | None, Field(description="Return at most this many of the selected "
                                                       "documents (default: all of them).")] = None,
        ) -> GatheredContext:
            """Run the search agent on a question: it searches the index over several turns, keeps the passages that
            help answer it, and stops when it has enough. Returns those documents with the queries it issued and
            what the search cost."""
            if max_documents is not None and max_documents < 1:
                raise fail(f"max_documents must be >= 1, got {max_documents}")
            try:
                settings = check_request(SearchRequest(question=question), cfg, self.searcher_cfg)
            except ValueError as e:
                raise fail(str(e)) from None
            t0 = time.perf_counter()
            try:
                result = await asyncio.wait_for(self.batcher.submit(question.strip(), settings),
                                                timeout=cfg.request_timeout_s)
            except TimeoutError:
                raise fail(f"the search did not finish within service.request_timeout_s={cfg.request_timeout_s:g}") \
                    from None
            except S3Error as e:
                raise fail(f"{e.code}: {e}") from None
            return gathered(result, settings.max_turns, max_documents, self.price, time.perf_counter() - t0)

        @self.mcp.tool(annotations=closed.model_copy(update={"title": "Search the index"}), structured_output=True)
        async def search(
            queries: Annotated[list[str], Field(description="One or more search queries (answered in one batch).")],
            k: Annotated[int | None, Field(description="Passages per query (default: the retriever's k).")] = None,
        ) -> SearchOut:
            """Plain retrieval: the top-k passages of the index for each query, best first."""
            if isinstance(queries, str):
                queries = [queries]
            kk = defaults.k if k is None else k
            if not queries:
                raise fail("queries is empty: give at least one query")
            if len(queries) > cfg.max_queries_per_request:
                raise fail(f"too many queries: {len(queries)} > service.max_queries_per_request="
                           f"{cfg.max_queries_per_request}")
            for i, q in enumerate(queries):
                if not q.strip():
                    raise fail(f"query {i} is empty")
                if len(q) > cfg.max_query_chars:
                    raise fail(f"query {i} is too long: {len(q)} chars > service.max_query_chars={cfg.max_query_chars}")
            if not 1 <= kk <= cfg.max_topk:
                raise fail(f"k must be within 1..service.max_topk={cfg.max_topk}, got {kk}")
            try:
                results = await asyncio.wait_for(self.retrieval.submit_many([(q, kk) for q in queries]),
                                                 timeout=cfg.request_timeout_s)
            except TimeoutError:
                raise fail(f"retrieval took longer than service.request_timeout_s={cfg.request_timeout_s:g}") from None
            except S3Error as e:
                raise fail(f"{e.code}: {e}") from None
            return SearchOut(results=[SearchHits(query=q, hits=[_doc(d) for d in docs])
                                      for q, docs in zip(queries, results, strict=True)])

        @self.mcp.tool(annotations=closed.model_copy(update={"title": "Get a passage by id"}), structured_output=True)
        async def get_document(
            id: Annotated[str, Field(description="A passage id, as returned by search or gather_context.")],
        ) -> DocumentOut:
            """One passage of the index by its id."""
            if not id.strip():
                raise fail("id is empty")
            try:
                [doc] = await asyncio.to_thread(retriever.get, [id])
            except RetrievalError as e:
                raise fail(f"no document with id {id!r} in the index ({e})") from None
            return _doc(doc)

    async def aclose(self) -> None:
        """Stop the batchers (their worker tasks)."""
        await self.batcher.aclose()
        await self.retrieval.aclose()

    def http_app(self) -> Any:
        """The streamable-HTTP ASGI app (POST /mcp; stateless, JSON responses) with the services' auth and limits
        (searcher/serving.py `protect`); its lifespan runs the SDK's session manager and closes the batchers."""
        from contextlib import asynccontextmanager

        from searcher.serving import protect

        app = self.mcp.streamable_http_app(json_response=True, stateless_http=True, host=self.service_cfg.host)
        inner = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(a: Any) -> Any:
            async with inner(a):
                try:
                    yield
                finally:
                    await self.aclose()

        app.router.lifespan_context = lifespan
        protect(app, self.service_cfg, open_paths=())
        return app

    async def run_stdio(self, protocol_out: BinaryIO | None = None) -> None:
        """Serve MCP on stdin / `protocol_out` (default: stdout). `s3 mcp` passes a duplicate of the original stdout
        and points file descriptor 1 at stderr, so nothing a library prints can corrupt the protocol stream."""
        from io import TextIOWrapper

        import anyio
        from mcp.server.stdio import stdio_server

        out = anyio.wrap_file(TextIOWrapper(protocol_out, encoding="utf-8")) if protocol_out is not None else None
        low = self.mcp._lowlevel_server  # what MCPServer.run_stdio_async runs, with our stdout
        try:
            async with stdio_server(stdout=out) as (read_stream, write_stream):
                await low.run(read_stream, write_stream, low.create_initialization_options())
        finally:
            await self.aclose()


def _doc(d: Document) -> DocumentOut:
    return DocumentOut(id=d.id, title=d.title, text=d.text, score=d.score)
