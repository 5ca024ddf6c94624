"""The MCP tools' contract, in process (the SDK's own Client connected to the server object): what their schemas
state, what they refuse, what they count, and that gather_context answers with the record /search answers with.
The searcher is the real loop with a scripted policy; tests/integration/test_mcp.py drives the real model over stdio
and HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from s3core.types import Document
from searcher.agent import S3Searcher
from searcher.config import SearcherConfig, ServiceConfig
from searcher.policy import ScriptedPolicy
from searcher.service import SearchResponse

pytest.importorskip("mcp")

STOP_AT_ONCE = "<important_info>[2]</important_info><search_complete>True</search_complete>"
SERVICE = ServiceConfig(batch_window_ms=1, max_topk=20, max_queries_per_request=7, max_query_chars=300)


class Retr:
    backend = "tiny"

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        return [[Document(id=f"{q.split()[0]}-{j}", title=f"T{j}", text=f"text {j}", score=float(k - j))
                 for j in range(k)] for q in queries]

    def get(self, ids: list[str]) -> list[Document]:
        return [Document(id=i, title="T", text="t") for i in ids]

    def __len__(self) -> int:
        return 9


def _searcher() -> S3Searcher:
    return S3Searcher(ScriptedPolicy(lambda p, i: STOP_AT_ONCE), Retr(), SearcherConfig(k=3, max_select=2, max_turns=1),
                      k0=3)


def _with_client(fn: Callable[[Any], Awaitable[Any]]) -> Any:
    from mcp import Client

    from searcher.mcp_server import MCPSearchServer

    srv = MCPSearchServer(_searcher(), Retr(), SERVICE)  # type: ignore[arg-type]

    async def go() -> Any:
        try:
            async with Client(srv.mcp) as client:
                return await fn(client)
        finally:
            await srv.aclose()

    return asyncio.run(go())


def test_gather_context_counts_every_policy_call_and_answers_with_the_search_record() -> None:
    from fastapi.testclient import TestClient

    from searcher.service import create_search_app

    async def call(client: Any) -> Any:
        return await client.call_tool("gather_context", {"question": "who won?"})

    result = _with_client(call)
    assert not result.is_error, result.content
    ctx = result.structured_content
    # the policy read the first retrieval and stopped: one call (the count used to skip turn 0 and say 0)
    assert ctx["cost"]["policy_calls"] == 1 and ctx["cost"]["usd"] == 0.0
    assert ctx["trajectory"]["stop"] == "search_complete" and [d["id"] for d in ctx["documents"]] == ["who-1"]
    # one result shape: /search answers with the same record, field for field
    with TestClient(create_search_app(_searcher(), Retr(), SERVICE)) as http:  # type: ignore[arg-type]
        body = http.post("/search", json={"question": "who won?"}).json()
    assert set(body) == set(ctx) == set(SearchResponse.model_fields)
    SearchResponse.model_validate(ctx)
    assert body["documents"] == ctx["documents"] and body["cost"]["policy_calls"] == 1


def test_tool_schemas_state_the_limits_and_unknown_arguments_are_refused_as_over_http() -> None:
    from fastapi.testclient import TestClient

    from searcher.mcp_server import package_version
    from searcher.service import create_search_app

    async def session(client: Any) -> Any:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        bad = await client.call_tool("search", {"queries": ["x"], "topk": 3})
        wrong = await client.call_tool("search", {"queries": ["x"], "k": 21})
        return tools, client.server_info, bad, wrong

    tools, info, bad, wrong = _with_client(session)
    search, gather = tools["search"].input_schema, tools["gather_context"].input_schema
    k = next(s for s in search["properties"]["k"]["anyOf"] if s.get("type") == "integer")
    assert (k["minimum"], k["maximum"]) == (1, SERVICE.max_topk)
    queries = search["properties"]["queries"]
    assert (queries["minItems"], queries["maxItems"]) == (1, SERVICE.max_queries_per_request)
    assert queries["items"]["maxLength"] == SERVICE.max_query_chars
    assert gather["properties"]["question"]["maxLength"] == SERVICE.max_query_chars
    assert all(t.input_schema["additionalProperties"] is False for t in tools.values())
    # descriptions without the source's indentation; the server says which version it is
    assert "\n    " not in tools["gather_context"].description and tools["gather_context"].description.startswith("Run")
    assert info is not None and info.version == package_version() and info.version
    # an unknown argument is refused (it used to be ignored), as /search refuses an unknown field; one line per
    # field, no pydantic help URL
    assert bad.is_error
    text = " ".join(c.text for c in bad.content)
    assert "topk: Extra inputs are not permitted" in text and "errors.pydantic.dev" not in text
    assert wrong.is_error and "k: Input should be less than or equal to 20" in wrong.content[0].text
    with TestClient(create_search_app(_searcher(), Retr(), SERVICE)) as http:  # type: ignore[arg-type]
        r = http.post("/search", json={"question": "q", "topk": 3})
    assert r.status_code == 422 and r.json()["detail"] == "topk: Extra inputs are not permitted"


def test_mcp_over_http_with_an_unset_token_variable_fails_before_it_says_it_serves(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3.build as build
    from s3.cli import main

    monkeypatch.delenv("S3_TEST_UNSET_TOKEN", raising=False)
    monkeypatch.setattr(build, "build_searcher", lambda *a, **k: pytest.fail("the model loaded before the check"))
    assert main(["mcp", "--transport", "http", "--port", "0", "--set",
                 "service.auth_token_env=S3_TEST_UNSET_TOKEN"]) == 2
    out = capsys.readouterr()
    assert "S3_TEST_UNSET_TOKEN" in out.err and "that environment variable is not set" in out.err
    assert "http://" not in out.out  # it used to print its URL, then fail
