"""Throughput of the /search service under concurrent clients: batching off vs on.

    nice -n 10 .venv/bin/python benchmarks/service.py [--requests 64] [--delay-ms 20]

The real FastAPI app on a loopback uvicorn server, the real bm25s index over ../shared/data/flashrag_sample (1,000
passages), and a scripted policy that costs `delay-ms` per (batched) call, so the numbers isolate what the service's
micro-batching buys: `--requests` concurrent POST /search (begin-with-search + 2 turns = 3 policy calls per batch).
Rows: batching off (window 0, max_batch 1: one searcher call per request) vs on (window 10 ms, max_batch 64);
ratio = requests/s against the batching-off row measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "flashrag_sample"


def script(prompt: str, _: int) -> str:
    """Two searches from the question's words, then select and stop (deterministic, format-perfect)."""
    q = prompt.split("<question>\n")[-1].split("\n</question>")[0]
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z']+", q) if len(w) > 3] or ["wikipedia"]
    windows = prompt.split("</question>")[-1].count("<information>\n")
    if windows >= 3:
        return "<important_info>[1]</important_info>\n<search_complete>True</search_complete>"
    return (
        "<important_info>[1]</important_info>\n<search_complete>False</search_complete>\n"
        f'<query>{{"query": "{" ".join(words[windows::2][:6] or words)}"}}</query>'
    )


def run_server(app: Any) -> tuple[Any, threading.Thread, str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.01)
    return server, th, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def fire(url: str, questions: list[str]) -> float:
    import httpx

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=len(questions))) as client:
        t0 = time.perf_counter()
        rs = await asyncio.gather(*(client.post(f"{url}/search", json={"question": q}) for q in questions))
        dt = time.perf_counter() - t0
    bad = [r.status_code for r in rs if r.status_code != 200]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed: {bad[:5]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3, help="best of N rounds per row")
    args = ap.parse_args()

    from s3.config import S3Config
    from s3core.corpus import read_questions
    from searcher.build import build_retriever, build_searcher
    from searcher.policy import ScriptedPolicy
    from searcher.retrieval import build_index
    from searcher.service import create_search_app

    questions = [q.question for q in read_questions(DATA / "nq_test_quickstart.jsonl")][: args.requests]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        index = build_index(DATA / "sample_data.jsonl", "bm25", Path(tmp) / "bm25")
        for label, window_ms, max_batch in [("batching off", 0.0, 1), ("batching on", 10.0, 64)]:
            cfg = S3Config.model_validate({
                "retriever": {"index": str(index)},
                "searcher": {"k": 8, "max_select": 3, "max_turns": 2},
                "service": {"batch_window_ms": window_ms, "max_batch": max_batch},
            })
            policy = ScriptedPolicy(script, delay_s=args.delay_ms / 1000)
            searcher = build_searcher(cfg.searcher, build_retriever(cfg.retriever, index), policy, k0=3)
            app = create_search_app(searcher, searcher.retriever, cfg.service, searcher_cfg=cfg.searcher)
            server, th, url = run_server(app)
            try:
                asyncio.run(fire(url, questions[:4]))  # warm-up
                best = min(asyncio.run(fire(url, questions)) for _ in range(args.repeats))
                sizes = [n for _, n in app.state.batcher.batches]
            finally:
                server.should_exit = True
                th.join(timeout=30)
            rows.append((label, best, len(questions) / best, sum(sizes) / max(len(sizes), 1)))
    base = rows[0][2]
    print(f"{args.requests} concurrent POST /search, scripted policy {args.delay_ms:g} ms/call, bm25s over 1,000 passages")
    print(f"{'mode':<14} {'seconds':>8} {'req/s':>8} {'mean batch':>11} {'ratio':>6}")
    for label, sec, rps, mean_batch in rows:
        print(f"{label:<14} {sec:8.2f} {rps:8.1f} {mean_batch:11.1f} {rps / base:6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
