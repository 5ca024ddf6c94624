"""Latency of the MCP tools against the same work done without MCP.

    flock /tmp/s3-cpu.lock .venv/bin/python benchmarks/mcp_latency.py [--rounds 5] [--calls 20]

Two comparisons, each measured in the same process and the same run (the ratio is what to read; this VM is shared
and noisy), over a bm25s index of the 1,000 FlashRAG Wikipedia passages in ../shared/data/flashrag_sample:

1. `gather_context` through MCP (the SDK's client, streamable HTTP on loopback) vs `searcher.search([q])` in process,
   with the real offline SmolLM2-135M searcher (llama.cpp through litellm's local provider, one search turn): what the
   protocol adds to a search that costs about a second of model time;
2. MCP `search` (one query, k=3) vs `POST /retrieve` (the Search-R1 contract, httpx, keep-alive), both on loopback
   uvicorn servers in this process: the protocol's overhead on a call that costs about a millisecond of work.

Each round times `--calls` sequential calls of each kind (alternating); the table gives the median over rounds of
each round's median, and the range. Results: benchmarks/results/mcp_latency/{results.json,README.md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "flashrag_sample"
OUT = ROOT / "benchmarks" / "results" / "mcp_latency"
QUESTIONS = [
    "who got the first nobel prize in physics",
    "when was the eiffel tower built",
    "what is the capital of australia",
    "who wrote the origin of species",
]


def build(index_dir: Path) -> tuple[Any, Any, Any]:
    from s3.build import build_searcher
    from s3.config import load_config
    from searcher.retrieval import build_index

    index = build_index(DATA / "sample_data.jsonl", "bm25", index_dir)
    cfg = load_config(None, [
        "searcher.policy=litellm", "searcher.model=local/smollm2-135m-instruct", "searcher.k=3",
        "searcher.max_turns=1", "searcher.doc_token_budget=24", "searcher.max_new_tokens=24", "retriever.k=3",
        f"retriever.index={index}", "service.batch_window_ms=0", "service.request_timeout_s=600",
    ])
    searcher, retriever = build_searcher(cfg, index)[:2]
    return cfg, searcher, retriever


def med(xs: list[float]) -> float:
    return float(statistics.median(xs))


async def one_round(session: Any, http: Any, base_retrieve: str, searcher: Any, calls: int,
                    search_calls: int) -> dict[str, float]:
    t_mcp_ctx, t_inproc, t_mcp_search, t_retrieve = [], [], [], []
    async def via_mcp(q: str) -> None:
        t0 = time.perf_counter()
        r = await session.call_tool("gather_context", {"question": q})
        t_mcp_ctx.append(time.perf_counter() - t0)
        assert not r.is_error, r.content

    async def in_process(q: str) -> None:
        t0 = time.perf_counter()
        await asyncio.to_thread(searcher.search, [q])
        t_inproc.append(time.perf_counter() - t0)

    for i in range(calls):
        # the same question both ways, the order alternating: llama.cpp reuses the cached prompt prefix of the call
        # before, so whichever goes second is helped; alternating gives each side that help half of the time
        q = QUESTIONS[i % len(QUESTIONS)]
        first, second = (via_mcp, in_process) if i % 2 == 0 else (in_process, via_mcp)
        await first(q)
        await second(q)
    for i in range(search_calls):
        q = QUESTIONS[i % len(QUESTIONS)]
        t0 = time.perf_counter()
        r = await session.call_tool("search", {"queries": [q], "k": 3})
        t_mcp_search.append(time.perf_counter() - t0)
        assert not r.is_error, r.content
        t0 = time.perf_counter()
        resp = await http.post(f"{base_retrieve}/retrieve", json={"queries": [q], "topk": 3, "return_scores": True})
        t_retrieve.append(time.perf_counter() - t0)
        assert resp.status_code == 200
    return {"mcp_gather_context_s": med(t_mcp_ctx), "in_process_search_s": med(t_inproc),
            "mcp_search_s": med(t_mcp_search), "retrieve_s": med(t_retrieve)}


async def run(rounds: int, calls: int, search_calls: int) -> list[dict[str, float]]:
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from searcher.mcp_server import MCPSearchServer, policy_price
    from searcher.retrieval.server import create_retrieve_app, serve_in_thread

    with tempfile.TemporaryDirectory(prefix="s3-bench-mcp-") as tmp:
        cfg, searcher, retriever = build(Path(tmp) / "bm25")
        server = MCPSearchServer(searcher, retriever, cfg.service, searcher_cfg=cfg.searcher,
                                 price=policy_price(cfg.searcher))
        searcher.search([QUESTIONS[0]])  # load the model once, outside the timings
        out = []
        with serve_in_thread(server.http_app(), service_cfg=cfg.service) as mcp_base, \
                serve_in_thread(create_retrieve_app(retriever, cfg.service), service_cfg=cfg.service) as r_base:
            async with streamable_http_client(f"{mcp_base}/mcp") as (read, write), \
                    ClientSession(read, write) as session, httpx.AsyncClient(timeout=600) as http:
                await session.initialize()
                await one_round(session, http, r_base, searcher, 1, 3)  # warm-up: connections, first calls
                for i in range(rounds):
                    row = await one_round(session, http, r_base, searcher, calls, search_calls)
                    print(f"round {i + 1}/{rounds}: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in row.items()),
                          flush=True)
                    out.append(row)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=8, help="gather_context / in-process searches per round (even)")
    ap.add_argument("--search-calls", type=int, default=50, help="MCP search / POST /retrieve calls per round")
    ap.add_argument("--note", default="", help="what else ran on the machine (goes into the results)")
    a = ap.parse_args()
    rows = asyncio.run(run(a.rounds, a.calls, a.search_calls))

    def summary(key: str) -> dict[str, float]:
        xs = [r[key] for r in rows]
        return {"median_s": med(xs), "min_s": min(xs), "max_s": max(xs)}

    ratios_ctx = [r["mcp_gather_context_s"] / r["in_process_search_s"] for r in rows]
    ratios_search = [r["mcp_search_s"] / r["retrieve_s"] for r in rows]
    res = {
        "rounds": rows, "calls_per_round": a.calls, "search_calls_per_round": a.search_calls, "note": a.note,
        "gather_context_vs_in_process": {"mcp": summary("mcp_gather_context_s"),
                                         "in_process": summary("in_process_search_s"),
                                         "ratio_median": med(ratios_ctx), "ratio_range": [min(ratios_ctx), max(ratios_ctx)]},
        "search_vs_retrieve": {"mcp": summary("mcp_search_s"), "retrieve": summary("retrieve_s"),
                               "ratio_median": med(ratios_search),
                               "ratio_range": [min(ratios_search), max(ratios_search)]},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    g, s = res["gather_context_vs_in_process"], res["search_vs_retrieve"]
    md = [
        "# MCP tool latency vs the same work without MCP",
        "",
        "`flock /tmp/s3-cpu.lock .venv/bin/python benchmarks/mcp_latency.py` (" + (a.note or "see results.json") + ")",
        "",
        f"{a.rounds} rounds; per round the median of {a.calls} sequential gather_context calls and in-process searches "
        f"(SmolLM2-135M searcher, one search turn), and of {a.search_calls} MCP search / POST /retrieve calls "
        "(bm25s, 1,000 passages, k=3). Median over rounds [min, max].",
        "",
        "| comparison | MCP (ms) | baseline (ms) | ratio MCP / baseline |",
        "|---|---:|---:|---:|",
        f"| gather_context (streamable HTTP) vs searcher.search in process | {g['mcp']['median_s'] * 1000:.1f} "
        f"[{g['mcp']['min_s'] * 1000:.1f}, {g['mcp']['max_s'] * 1000:.1f}] | {g['in_process']['median_s'] * 1000:.1f} "
        f"[{g['in_process']['min_s'] * 1000:.1f}, {g['in_process']['max_s'] * 1000:.1f}] | {g['ratio_median']:.3f} "
        f"[{g['ratio_range'][0]:.3f}, {g['ratio_range'][1]:.3f}] |",
        f"| search (streamable HTTP) vs POST /retrieve | {s['mcp']['median_s'] * 1000:.2f} "
        f"[{s['mcp']['min_s'] * 1000:.2f}, {s['mcp']['max_s'] * 1000:.2f}] | {s['retrieve']['median_s'] * 1000:.2f} "
        f"[{s['retrieve']['min_s'] * 1000:.2f}, {s['retrieve']['max_s'] * 1000:.2f}] | {s['ratio_median']:.2f} "
        f"[{s['ratio_range'][0]:.2f}, {s['ratio_range'][1]:.2f}] |",
        "",
    ]
    (OUT / "README.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
