"""`s3 mcp`: the searcher as a Model Context Protocol server, for any agent or IDE that takes MCP tools.

    server = MCPSearchServer(searcher, retriever, cfg.service)
    await server.mcp.run_stdio_async()                   # stdio (desktop agents, IDEs)
    app = server.http_app()                              # streamable HTTP at /mcp (stateless, JSON responses)

Tools (typed inputs whose schemas state the `[service]` limits and refuse unknown arguments, output schemas,
annotations: read-only, idempotent, closed-world):
- `gather_context(question, max_documents?)`: the served searcher (any kind: a trained `--policy RUN_DIR`, a script,
  the reading searcher) -> `SearchResponse`, the record `/search` answers with: the selected documents (id, title,
  text, score, turn), the trajectory (queries, turns, how it stopped, each model's seconds), its cost (policy and
  reader calls, tokens, dollars, seconds) and the settings it ran with, as the searcher describes them;
- `search(queries, k?)`: plain retrieval, batch-first (one list of hits per query);
- `get_document(id)`: one passage by id.

Resource `s3://searcher` (JSON): what the searcher behind gather_context is, the record /health reports
(searcher/base.py `describe()`: kind, what it does, model, reader, ranker, settings, request fields, and why it runs);
the server's instructions say the same in words.

The searcher, the index and the batchers are built once, before the server takes its first call (the MCP SDK runs
its per-session lifespan once per stateless HTTP request, so nothing heavy lives there). Concurrent `gather_context`
calls are gathered into lockstep batches by the same `SettingsBatcher` as `s3 serve`'s /search, and `search` calls by
the same micro-batcher as /retrieve; the limits are `[service]`'s (question / query length, queries per call, topk,
request deadline), checked by the same functions (`check_request`, `check_queries`), and over HTTP the services'
middlewares apply too (bearer auth from service.auth_token_env, body size and timeouts, concurrency, typed JSON
errors: searcher/serving.py). A bad argument is a tool error (`isError`) whose text says what is wrong (one line per
field, `describe_errors`); a failed policy call ends that search early (`degraded` with its error code), never a
traceback.
"""

# No `from __future__ import annotations` here: the tools' signatures carry the [service] limits of the server being
# built (Field(le=cfg.max_topk)) as objects the SDK reads to make each tool's input schema.
import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, BinaryIO

from pydantic import BaseModel, Field

from s3core.credentials import redact
from s3core.errors import RetrievalError, S3Error
from s3core.pricing import Price
from s3core.types import Document
from searcher.batching import MicroBatcher
from searcher.config import SearcherConfig, ServiceConfig
from searcher.retrieval.base import Retriever
from searcher.retrieval.server import make_search_batch_fn
from searcher.service import (
    SearchRequest,
    SearchResponse,
    ServedSearcher,
    SettingsBatcher,
    check_request,
    default_settings,
    describe,
    described_settings,
    policy_price,
    summarize_result,
)
from searcher.serving import check_queries, describe_errors

__all__ = ["DocumentOut", "MCPSearchServer", "SearchHits", "SearchOut", "package_version", "policy_price"]

INSTRUCTIONS = (
    "Search tools over one document index. gather_context(question) runs the searcher ({about}) and returns the few "
    "documents needed to answer; search(queries, k) is plain retrieval; get_document(id) fetches one passage. The "
    "resource s3://searcher describes the searcher: its kind, model, reader, ranker and settings."
)
SEARCHER_URI = "s3://searcher"


# --------------------------------------------------------------------------------------------- tool outputs


class DocumentOut(BaseModel):
    """One passage."""

    id: str = Field(description="The passage id in the index.")
    title: str = Field("", description="The passage's title (a Wikipedia article's, for Wikipedia corpora).")
    text: str = Field("", description="The passage text.")
    score: float | None = Field(None, description="The retriever's score (higher is better), where there is one.")
    original_id: str | None = Field(None, description="The id the user's corpus gave the passage, where data "
                                    "preparation had to change it; null when `id` is the corpus's own.")


class SearchHits(BaseModel):
    query: str
    hits: list[DocumentOut]


class SearchOut(BaseModel):
    """`search`'s answer: one list of hits per query, in the order of the queries."""

    results: list[SearchHits]


def package_version() -> str:
    """The installed s3 package's version (the MCP server reports it at initialisation)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("s3-search-agents")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


# --------------------------------------------------------------------------------------------- the server


class MCPSearchServer:
    """The MCP server over one searcher and its retriever (built once by the caller).

    searcher_cfg: the loop settings calls run with (default: the searcher's own); price: the policy model's (default:
    from those settings, `policy_price`); why: which searcher runs and why, in words (s3/build.py), reported with its
    `describe()` by the s3://searcher resource."""

    def __init__(self, searcher: ServedSearcher, retriever: Retriever, service_cfg: ServiceConfig, *,
                 searcher_cfg: SearcherConfig | None = None, price: Price | None = None,
                 name: str = "s3-searcher", why: str | None = None) -> None:
        self.searcher, self.retriever, self.service_cfg = searcher, retriever, service_cfg
        self.searcher_cfg = searcher.cfg if searcher_cfg is None else searcher_cfg
        self.price = policy_price(self.searcher_cfg) if price is None else price
        self.described = {**describe(searcher, self.searcher_cfg), "why": why}
        self.batcher = SettingsBatcher(searcher, service_cfg, cfg=self.searcher_cfg)
        self.retrieval: MicroBatcher[tuple[str, int], list[Document]] = MicroBatcher(
            make_search_batch_fn(retriever), window_ms=service_cfg.batch_window_ms, max_batch=service_cfg.max_batch,
            name="mcp-search")
        tools = [(self._gather_context(), "Gather context for a question"), (self._search(), "Search the index"),
                 (self._get_document(), "Get a passage by id")]
        about = self.described.get("about") or f"the {self.described.get('kind') or 'served'} searcher"
        self.mcp = _mcp_server(name, tools, INSTRUCTIONS.format(about=about))
        self.mcp.resource(SEARCHER_URI, name="searcher", title="The searcher behind gather_context",
                          description="What runs when gather_context is called: its kind, what it does, its model, "
                          "reader and ranker, the settings it uses and the request fields it takes (the record s3 "
                          "serve's /health reports).", mime_type="application/json")(self._searcher_record)

    def _searcher_record(self) -> str:
        return json.dumps(self.described, ensure_ascii=False)

    def _gather_context(self) -> Callable[..., Awaitable[SearchResponse]]:
        cfg = self.service_cfg

        async def gather_context(
            question: Annotated[str, Field(min_length=1, max_length=cfg.max_query_chars,
                                           description="The question to gather documents for.")],
            max_documents: Annotated[int | None, Field(ge=1, description="Return at most this many of the selected "
                                                       "documents (default: all of them).")] = None,
        ) -> SearchResponse:
            """Run the searcher on a question (what it is and does: the server's instructions, the resource
            s3://searcher): it searches the index and keeps the passages that help answer it. Returns those documents
            with the queries it issued, what the search cost and the settings it ran with."""
            try:
                settings = check_request(SearchRequest(question=question), cfg, self.searcher, self.searcher_cfg)
            except ValueError as e:
                raise _fail(str(e)) from None
            t0 = time.perf_counter()
            result = await self._deadline(self.batcher.submit(question.strip(), settings), "the search")
            response = summarize_result(result, settings, price=self.price,
                                        ran_with=described_settings(self.searcher, settings, self.searcher_cfg))
            response.documents = response.documents[:max_documents]
            if response.cost is not None:
                response.cost.seconds = round(time.perf_counter() - t0, 4)
            return response

        return gather_context

    def _search(self) -> Callable[..., Awaitable[SearchOut]]:
        cfg = self.service_cfg
        query = Annotated[str, Field(min_length=1, max_length=cfg.max_query_chars)]

        async def search(
            queries: Annotated[list[query], Field(  # type: ignore[valid-type]
                min_length=1, max_length=cfg.max_queries_per_request,
                description="One or more search queries (answered in one batch).")],
            k: Annotated[int | None, Field(ge=1, le=cfg.max_topk,
                                           description="Passages per query (default: the retriever's k).")] = None,
        ) -> SearchOut:
            """Plain retrieval: the top-k passages of the index for each query, best first."""
            try:
                check_queries(queries, k, cfg, topk_name="k")
            except ValueError as e:
                raise _fail(str(e)) from None
            kk = default_settings(self.searcher_cfg).k if k is None else k
            results = await self._deadline(self.retrieval.submit_many([(q, kk) for q in queries]), "retrieval")
            return SearchOut(results=[SearchHits(query=q, hits=[_doc(d) for d in docs])
                                      for q, docs in zip(queries, results, strict=True)])

        return search

    def _get_document(self) -> Callable[..., Awaitable[DocumentOut]]:
        async def get_document(
            id: Annotated[str, Field(min_length=1, description="A passage id, as returned by search or gather_context.")],
        ) -> DocumentOut:
            """One passage of the index by its id."""
            if not id.strip():
                raise _fail("id is empty")
            try:
                [doc] = await asyncio.to_thread(self.retriever.get, [id])
            except RetrievalError as e:
                raise _fail(f"no document with id {id!r} in the index ({e})") from None
            return _doc(doc)

        return get_document

    async def _deadline(self, work: Awaitable[Any], what: str) -> Any:
        """`work` within service.request_timeout_s; a timeout or an S3Error is a tool error saying so."""
        limit = self.service_cfg.request_timeout_s
        try:
            return await asyncio.wait_for(work, timeout=limit)
        except TimeoutError:
            raise _fail(f"{what} did not finish within service.request_timeout_s={limit:g}") from None
        except S3Error as e:
            raise _fail(f"{e.code}: {e}") from None

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
    return DocumentOut(id=d.id, title=d.title, text=d.text, score=d.score, original_id=d.original_id)


def _fail(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(redact(message))


def _mcp_server(name: str, tools: list[tuple[Callable[..., Any], str]], instructions: str) -> Any:
    """The SDK's MCPServer with our tools: each refuses unknown arguments (as HTTP /search does; its input schema
    says `additionalProperties: false`), its description is its docstring without the source's indentation, and an
    argument that fails validation is reported one line per field, without pydantic's help URL."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.tools.base import Tool
    from mcp.types import ToolAnnotations
    from pydantic import ValidationError

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as e:
                if not isinstance(e.__cause__, ValidationError):
                    raise
                raise ToolError(f"invalid arguments for {name}: {describe_errors(e.__cause__.errors(), skip=())}") \
                    from None

    closed = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
    built = []
    for fn, title in tools:
        tool = Tool.from_function(fn, description=inspect.cleandoc(fn.__doc__ or ""), structured_output=True,
                                  annotations=closed.model_copy(update={"title": title}))
        args = tool.fn_metadata.arg_model
        args.model_config["extra"] = "forbid"
        args.model_rebuild(force=True)
        tool.parameters = args.model_json_schema(by_alias=True)
        built.append(tool)
    return Server(name, version=package_version(), instructions=instructions, log_level="WARNING", tools=built)
