"""`s3 mcp`: the (trained) searcher as MCP tools (gather_context, search, get_document) over stdio or HTTP.

    s3 mcp --policy runs/train/smoke                          # stdio: what an MCP client starts as a subprocess
    s3 mcp --policy runs/train/smoke --transport http --port 8765   # streamable HTTP at http://127.0.0.1:8765/mcp

The index and the searcher are built once, before the first call; limits, bearer auth (service.auth_token_env) and
the bind address come from [service] (searcher/mcp_server.py). On stdio nothing but MCP messages goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    m = sub.add_parser(
        "mcp", parents=[common], help="serve the searcher as MCP tools (stdio or streamable HTTP)",
        description="A Model Context Protocol server with three tools: gather_context(question, max_documents?) "
        "runs the searcher (the best shipped one for the index, a named --searcher NAME or trained --policy RUN_DIR, "
        "or --untrained zero-shot) and returns the selected documents, the trajectory and its cost; search(queries, "
        "k?) is plain batched retrieval; get_document(id) one passage; the resource s3://searcher describes the "
        "searcher (kind, model, reader, ranker, settings). "
        "stdio (the default) is what MCP clients start as a subprocess; --transport http serves streamable HTTP "
        "(stateless, JSON responses) at http://HOST:PORT/mcp with the [service] limits and bearer auth.",
    )
    from s3.commands.serve import add_searcher_args

    add_searcher_args(m)
    m.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP")
    m.add_argument("--host", default=None, help="HTTP bind address (default: service.host)")
    m.add_argument("--port", type=int, default=None, help="HTTP port (default: service.port; 0 = a free one)")
    m.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace, cfg: S3Config) -> int:
    import asyncio
    import logging

    from s3.commands.serve import _run, address, bind, served_searcher
    from s3core.errors import S3Error
    from searcher.mcp_server import MCPSearchServer

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise S3Error("s3 mcp needs the MCP SDK: pip install 's3-search-agents[mcp]'") from None
    stdio = args.transport == "stdio"
    protocol_out = None
    if stdio:  # stdout carries the protocol only: fd 1 -> stderr for everything else (C libraries included)
        import os

        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
        sys.stdout.flush()
        protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    host, port = address(args, cfg)
    if not stdio:  # the bearer token's variable is read before the model loads, not after the URL is printed
        from s3core.credentials import read_secret_env

        read_secret_env(cfg.service.auth_token_env, setting="service.auth_token_env")
    built = served_searcher(args, cfg)
    cfg, searcher, retriever = built.cfg, built.searcher, built.retriever
    server = MCPSearchServer(searcher, retriever, cfg.service.model_copy(update={"host": host, "port": port}),
                             searcher_cfg=cfg.searcher, why=built.why)
    if stdio:
        print(f"s3 mcp: stdio ({retriever!r})", file=sys.stderr, flush=True)
        asyncio.run(server.run_stdio(protocol_out))
        return 0
    app = server.http_app()  # reads service.auth_token_env: an unset variable is an error before anything is served
    sock = bind(host, port)
    print(f"s3 mcp: http://{host}:{sock.getsockname()[1]}/mcp  (streamable HTTP; tools gather_context, search, "
          "get_document)", flush=True)
    _run(app, sock, cfg.service)
    return 0
