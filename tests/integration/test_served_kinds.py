"""The shipped script searchers served for real, as `s3 serve --searcher NAME` and `s3 mcp --searcher NAME` build them
(s3/build.py, then the /search app on uvicorn on loopback, or the MCP server over streamable HTTP), over a real bm25s
index of a 16-page titled corpus written here: each describes itself truthfully (/health, /search's `settings`, the
MCP resource s3://searcher: its kind, model, reader, ranker, the settings it uses, the request fields it takes), takes
its own kind's request fields and checks, and names each model's share of the time (issue 79, defects 3 and 4).

The title-following script runs no model (milliseconds); the reading searcher loads its shipped reader (a LoRA adapter
on the offline SmolLM2-135M) once for the module and reads two pages a question (read_last = 5)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_service_http import LiveServer

pytestmark = pytest.mark.integration

QUESTION = "Which actress played Corliss Archer in the film Kiss and Tell?"
PAGES = [
    ("Kiss and Tell (1945 film)", "Kiss and Tell is a 1945 American comedy film starring Shirley Temple as Corliss "
     "Archer. It was directed by Richard Wallace."),
    ("Corliss Archer", "Corliss Archer is a fictional teenage girl created by the playwright F. Hugh Herbert, played "
     "on radio and in film."),
    ("Meet Corliss Archer", "Meet Corliss Archer is an American radio and television comedy about the teenage girl "
     "Corliss Archer."),
    ("Shirley Temple", "Shirley Temple Black was an American actress, singer and diplomat, the top box-office star "
     "as a child."),
    ("Richard Wallace (director)", "Richard Wallace was an American film director of comedies and dramas."),
    ("F. Hugh Herbert", "Frederick Hugh Herbert was an American playwright and screenwriter."),
    ("Janet Waldo", "Janet Waldo was an American actress who played the teenage girl on radio for years."),
    ("A Kiss for Corliss", "A Kiss for Corliss is a 1949 comedy film, the sequel to the 1945 film, starring the same "
     "actress and David Niven."),
    ("David Niven", "David Niven was a British actor and novelist who starred in many films."),
    ("The Bachelor and the Bobby-Soxer", "The Bachelor and the Bobby-Soxer is a 1947 comedy film starring Cary "
     "Grant and Myrna Loy."),
    ("Cary Grant", "Cary Grant was an English-born American actor, a leading man of Hollywood comedy."),
    ("Myrna Loy", "Myrna Loy was an American film, television and stage actress."),
    ("Comedy film", "A comedy film is a film genre that emphasizes humor; an actress or actor plays for laughs."),
    ("Radio comedy", "Radio comedy is comedy played on the radio, a popular American form in the 1940s."),
    ("Teenage girl", "A teenage girl is a girl between thirteen and nineteen years of age."),
    ("Hollywood", "Hollywood is a neighborhood of Los Angeles, the home of the American film industry."),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from searcher.retrieval import build_index

    root = tmp_path_factory.mktemp("titled")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "title": t, "text": x}) + "\n"
                              for i, (t, x) in enumerate(PAGES)), encoding="utf-8")
    return build_index(corpus, "bm25", root / "index")


def served(index: Path, name: str, *sets: str) -> Any:
    """What `s3 serve --index INDEX --searcher NAME [--set ...]` serves (s3/commands/serve.py `served_searcher`)."""
    from s3.build import build_searcher
    from s3.config import load_config

    return build_searcher(load_config(None, list(sets)), index, name)


def app_of(built: Any) -> Any:
    """The /search app `s3 serve` makes of a built searcher (s3/commands/serve.py `_serve`)."""
    from searcher.service import create_search_app

    cfg = built.cfg
    return create_search_app(built.searcher, built.retriever, cfg.service, searcher_cfg=cfg.searcher,
                             default_topk=cfg.retriever.k, index=str(built.index_dir), why=built.why)


@pytest.fixture(scope="module")
def script(index: Path) -> Any:
    return served(index, "title-following", "service.batch_window_ms=5")


@pytest.fixture(scope="module")
def reading(index: Path) -> Any:
    return served(index, "reading-hotpotqa", "searcher.reading.read_last=5", "service.batch_window_ms=5")


@pytest.fixture(scope="module")
def script_server(script: Any) -> Iterator[LiveServer]:
    with LiveServer(app_of(script)) as srv:
        yield srv


def test_the_title_following_script_describes_itself_and_takes_its_own_fields(script_server: LiveServer) -> None:
    url = script_server.url
    health = httpx.get(f"{url}/health", timeout=30).json()
    me = health["searcher"]
    # its kind, no model, no reader or ranker; the settings it runs (one span turn, not the LLM searcher's 3)
    assert health["kind"] == me["kind"] == "title_following" and health["model"] is None
    assert me["model"] is None and me["reader"] is None and me["ranker"] is None and "no model" in me["about"]
    assert health["defaults"] == me["settings"]
    assert (me["settings"]["k"], me["settings"]["max_turns"], me["settings"]["context_cap"]) == (8, 1, 5)
    assert "max_select" not in me["settings"] and me["why"] == "named: title-following"
    assert list(health["request_fields"]) == ["question", "k", "max_documents"] and list(me["request_fields"]) == ["k"]

    def search(**body: Any) -> httpx.Response:
        return httpx.post(f"{url}/search", json={"question": QUESTION, **body}, timeout=60)

    full = search().json()
    assert full["settings"] == health["defaults"] and not full["degraded"]
    titles = [d["title"] for d in full["documents"]]
    assert "Shirley Temple" in titles and full["cost"]["policy_calls"] == 0
    # k = 1 is the script's own business (one page a name), not the LLM searcher's max_select rule
    one = search(k=1)
    assert one.status_code == 200, one.text
    assert one.json()["settings"] == {**health["defaults"], "k": 1}
    # max_documents caps the documents, as MCP's gather_context does
    capped = search(max_documents=2).json()
    assert [d["id"] for d in capped["documents"]] == [d["id"] for d in full["documents"][:2]]
    # a field of another kind is refused, naming the fields it takes
    r = search(max_turns=2)
    assert r.status_code == 422
    assert r.json()["detail"] == ("max_turns: the title_following searcher takes no max_turns (its request fields: "
                                  "question, k, max_documents)")
    r = search(max_documents=0)
    assert r.status_code == 422 and "max_documents" in r.json()["detail"]


def test_the_reading_searcher_names_its_reader_and_the_reader_s_time(
        reading: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with LiveServer(app_of(reading)) as srv:
        health = httpx.get(f"{srv.url}/health", timeout=30).json()
        r = httpx.post(f"{srv.url}/search", json={"question": QUESTION}, timeout=300)
    me = health["searcher"]
    assert health["kind"] == "reading" and health["model"] == me["model"] == me["reader"] == \
        "reader-smollm2-135m-hotpotqa"
    assert me["ranker"] == "links-reader-hotpotqa"
    assert (me["settings"]["read_last"], me["settings"]["max_turns"]) == (5, 2)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["settings"] == health["defaults"]
    traj, read = body["trajectory"], body["trajectory"]["steps"][-1]
    # the reader's seconds are the reader's, not retrieval's: the read step's bm25 call is milliseconds
    assert read["turn"] == 2 and read["reader_seconds"] > 0 and read["retrieval_seconds"] < read["reader_seconds"]
    assert read["seconds"] == pytest.approx(read["reader_seconds"] + read["retrieval_seconds"], abs=1e-3)
    assert traj["reader_seconds"] == read["reader_seconds"] and traj["policy_seconds"] == 0
    assert traj["retrieval_seconds"] == pytest.approx(sum(s["retrieval_seconds"] for s in traj["steps"]), abs=1e-3)
    assert (body["cost"]["policy_calls"], body["cost"]["reader_calls"]) == (0, 1)

    # `s3 search` prints the same shares (this searcher, not built again: the command's own build is s3/build.py's)
    import s3.build as build
    from s3.cli import main

    monkeypatch.setattr(build, "build_searcher", lambda cfg, index=None, policy=None: reading)
    assert main(["search", QUESTION]) == 0
    out = capsys.readouterr().out
    turn2 = out[out.index("turn 2"):out.index("Final documents")]
    assert re.search(r"\d+\.\d\ds reader, \d+\.\d{3}s retrieval", turn2) and "policy" not in turn2, turn2
    assert re.search(r"2 turns, \d+\.\d\ds \(\d+\.\d\ds reader, \d+\.\d{3}s retrieval\)", out), out


def test_mcp_reports_the_same_description_as_health(script: Any, script_server: LiveServer) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from searcher.mcp_server import MCPSearchServer
    from searcher.retrieval.server import serve_in_thread

    health = httpx.get(f"{script_server.url}/health", timeout=30).json()
    cfg = script.cfg
    server = MCPSearchServer(script.searcher, script.retriever, cfg.service, searcher_cfg=cfg.searcher, why=script.why)

    async def go(base: str) -> tuple[Any, Any, Any, Any]:
        async with streamable_http_client(f"{base}/mcp") as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            listed = (await session.list_resources()).resources
            record = await session.read_resource("s3://searcher")
            ctx = await session.call_tool("gather_context", {"question": QUESTION, "max_documents": 2})
            return init, listed, record, ctx

    with serve_in_thread(server.http_app(), service_cfg=cfg.service) as base:
        init, listed, record, ctx = asyncio.run(go(base))
    assert [str(r.uri) for r in listed] == ["s3://searcher"] and listed[0].mime_type == "application/json"
    (content,) = record.contents
    assert json.loads(content.text) == health["searcher"]  # the record /health reports, kind to request fields
    assert "a script, no model" in (init.instructions or "") and "trained search agent" not in (init.instructions or "")
    assert not ctx.is_error, ctx.content
    got = ctx.structured_content
    assert got["settings"] == health["defaults"] and len(got["documents"]) == 2
