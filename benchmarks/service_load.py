"""What `s3 serve` holds under load, faults and hostile clients (issue 18), on loopback only, bounded in count and time.

    nice -n 10 .venv/bin/python benchmarks/service_load.py [--clients 200] [--rounds 3] [--out benchmarks/results/service_load.md]

- The server is a real `s3 serve` process (its own PID, so its peak RSS is its own: VmHWM from /proc) over a real
  bm25s index of ../shared/data/flashrag_sample (1,000 passages), with the default [service] limits.
- /search runs the real searcher loop whose litellm policy talks to the loopback fake LLM server (a child process,
  scripted s3 replies: select, one query, stop) with 10% of prompts failing (HTTP 500) and one hung prompt per round
  (a question containing HANGME hangs upstream for 60 s; searcher.timeout_s = 5 cuts it). The model is not the
  bottleneck: the numbers are the service's.
- Each round: `--clients` concurrent clients, each one POST /search and one POST /retrieve; a client honours a 503's
  Retry-After up to 3 times. Reported per endpoint: answered (2xx), degraded answers, errors by status, the share of
  errors that are typed JSON (`{"code", "detail"}`), p50 / p95 latency of the answers; the server's VmHWM / VmRSS at
  start and after each round.
- Then the hostile requests, each against the configured limits: a 100 MB body (Content-Length), a 100 MB chunked
  body, a slowloris connection, an idle connection, and an amplification request (512 queries x topk 100): how it was
  refused, how fast, and the server's VmHWM after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from searcher.serving import is_typed_error
from searcher.testing import slowloris

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "flashrag_sample"
ROUND_DEADLINE_S = 180.0
WORDS = ("nobel prize physics", "river in europe", "american film director", "world war battle", "olympic games",
         "chemical element", "british rock band", "roman emperor", "football club", "mountain range")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def mem(pid: int) -> str:
    return f"VmHWM {proc_kb(pid, 'VmHWM') / 1024:.0f} MB, VmRSS {proc_kb(pid, 'VmRSS') / 1024:.0f} MB"


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def client(http: Any, url: str, i: int, round_no: int, stats: dict[str, dict[str, Any]]) -> None:
    rng = random.Random(round_no * 1000 + i)
    question = f"{rng.choice(WORDS)} {i} round {round_no}"
    if i == 0:
        question = f"HANGME {question}"  # the hung upstream of this round
    calls = [("search", "/search", {"question": question}),
             ("retrieve", "/retrieve", {"queries": [question, rng.choice(WORDS)], "topk": 5, "return_scores": True})]
    rng.shuffle(calls)
    for name, path, body in calls:
        s = stats[name]
        for _attempt in range(4):
            t0 = time.perf_counter()
            try:
                r = await http.post(url + path, json=body)
            except Exception as e:  # a transport error: counted, never hidden
                s["transport_errors"][type(e).__name__] += 1
                break
            dt = time.perf_counter() - t0
            if r.status_code == 503 and r.headers.get("retry-after") is not None:
                s["retried_503"] += 1
                s["typed_503"] += is_typed_error(r)
                await asyncio.sleep(float(r.headers["retry-after"]) + rng.random())
                continue
            if r.status_code < 300:
                s["ok"] += 1
                s["lat"].append(dt)
                if name == "search" and r.json().get("degraded"):
                    s["degraded"] += 1
                    s["degraded_codes"][r.json()["error"]["code"]] += 1
            else:
                s["errors"][r.status_code] += 1
                s["typed_errors"] += is_typed_error(r)
            break
        else:
            s["gave_up"] += 1


async def run_round(url: str, clients: int, round_no: int) -> dict[str, dict[str, Any]]:
    import httpx

    stats: dict[str, dict[str, Any]] = {
        n: {"ok": 0, "degraded": 0, "degraded_codes": Counter(), "errors": Counter(), "typed_errors": 0, "lat": [],
            "retried_503": 0, "typed_503": 0, "gave_up": 0, "transport_errors": Counter()} for n in ("search", "retrieve")}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        await asyncio.wait_for(asyncio.gather(*(client(http, url, i, round_no, stats) for i in range(clients))),
                               ROUND_DEADLINE_S)
    return stats


def hostile(url: str, pid: int, cfg: dict[str, Any]) -> list[tuple[str, str, str]]:
    import httpx

    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    rows: list[tuple[str, str, str]] = []

    # 100 MB body announced by Content-Length: refused from the header, before the body is read
    t0 = time.perf_counter()
    with socket.create_connection((host, port)) as s:
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(100 * 1024 * 1024).encode() + b"\r\n\r\n")
        sent, status = 0, b""
        s.settimeout(10)
        try:
            while sent < 100 * 1024 * 1024:
                s.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass
        try:
            status = s.recv(200).split(b"\r\n")[0]
        except OSError:
            status = b"(connection closed)"
    rows.append(("100 MB body (Content-Length)", f"{status.decode(errors='replace')} after {time.perf_counter() - t0:.2f}s, "
                 f"{sent / 1e6:.1f} MB written before the server closed", mem(pid)))

    # 100 MB chunked body: cut off while it streams
    def chunks() -> Any:
        yield b'{"queries": ["'
        for _ in range(1600):
            yield b"a" * 65536

    t0 = time.perf_counter()
    try:
        r = httpx.post(f"{url}/retrieve", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
        outcome = f"{r.status_code} {r.json().get('code')}"
    except httpx.TransportError as e:
        outcome = f"closed by the server ({type(e).__name__})"
    rows.append(("100 MB chunked body", f"{outcome} after {time.perf_counter() - t0:.2f}s "
                 f"(service.max_body_bytes={cfg['max_body_bytes']})", mem(pid)))

    # slowloris: a header line every second, never the end of the head
    with socket.create_connection((host, port)) as idle:
        closed = slowloris(host, port, "/search", line=b"X-Slow: 1\r\n", every_s=1.0, limit_s=40)
        idle.settimeout(1)
        try:
            idle_closed = "closed" if idle.recv(1) == b"" else "open"
        except TimeoutError:
            idle_closed = "still open"
        except OSError:
            idle_closed = "closed"
    rows.append(("slowloris (a header line per second)",
                 f"closed after {closed:.1f}s" if closed is not None else "STILL OPEN after 40 s",
                 f"service.header_timeout_s={cfg['header_timeout_s']}"))
    rows.append(("idle connection (no bytes)", f"{idle_closed} after the same {time.perf_counter() - t0:.1f}s",
                 f"service.header_timeout_s={cfg['header_timeout_s']}"))

    # amplification: 512 queries x topk 100 in a ~25 KB request
    body = {"queries": [f"question number {i} about physics and history" for i in range(512)], "topk": 100}
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/retrieve", json=body, timeout=60)
    rows.append(("amplification (512 queries x topk 100)",
                 f"{r.status_code} {r.json().get('code')}, {len(r.content)} bytes back after "
                 f"{time.perf_counter() - t0:.2f}s (request {len(json.dumps(body))} bytes)", mem(pid)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from generator_adapters.testing import FakeLLMServer
    from searcher.config import ServiceConfig
    from searcher.retrieval import build_index

    service_defaults = ServiceConfig().model_dump()
    out_lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="s3-load-") as tmp, \
            FakeLLMServer(process=True, reply="s3", failure_rate=0.1, failure_kind="500", hang_on="HANGME",
                          hang_s=60, seed=1) as llm:
        index = build_index(DATA / "sample_data.jsonl", "bm25", Path(tmp) / "bm25")
        config = Path(tmp) / "load.toml"
        config.write_text(
            f'[retriever]\nindex = "{index}"\nk = 3\n\n'
            f'[searcher]\npolicy = "litellm"\nmodel = "openai/fake"\napi_base = "{llm.api_base}"\nk = 3\n'
            "max_turns = 1\nmax_retries = 0\ntimeout_s = 5.0\nconcurrency = 16\n\n"
            "[service]\nrequest_timeout_s = 30.0\nbatch_window_ms = 10.0\n", encoding="utf-8")
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        server = subprocess.Popen([sys.executable, "-m", "s3.cli", "serve", "--config", str(config), "--port",
                                   str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            from generator_adapters.testing import wait_until_serving
            from s3core.errors import ServiceError

            try:
                wait_until_serving(f"{url}/health", server, 120, interval_s=0.3)
            except ServiceError as e:
                raise SystemExit(f"s3 serve: {e}: {server.stdout.read() if server.stdout else ''}") from None
            out_lines += [f"server start: {mem(server.pid)}", ""]
            table = ["| round | endpoint | answered | degraded (codes) | final errors by status | typed JSON share of "
                     "all error responses | retried | p50 s | p95 s | wall s | server after the round |",
                     "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            totals: Counter[str] = Counter()
            for rnd in range(1, args.rounds + 1):
                t0 = time.perf_counter()
                stats = asyncio.run(run_round(url, args.clients, rnd))
                wall = time.perf_counter() - t0
                after = mem(server.pid)
                for name in ("search", "retrieve"):
                    s = stats[name]
                    n_err = sum(s["errors"].values()) + sum(s["transport_errors"].values()) + s["gave_up"]
                    n_http = sum(s["errors"].values()) + s["retried_503"]
                    share = f"{s['typed_errors'] + s['typed_503']}/{n_http}" if n_http else "no errors"
                    errs = ", ".join(f"{k}: {v}" for k, v in sorted(s["errors"].items())) or "-"
                    if s["transport_errors"]:
                        errs += "; transport " + ", ".join(f"{k}: {v}" for k, v in s["transport_errors"].items())
                    if s["gave_up"]:
                        errs += f"; gave up after 3 retries: {s['gave_up']}"
                    codes = ", ".join(f"{k} {v}" for k, v in s["degraded_codes"].items())
                    table.append(f"| {rnd} | /{name} | {s['ok']}/{args.clients} | {s['degraded']}"
                                 f"{f' ({codes})' if codes else ''} | {errs} | {share} | {s['retried_503']} "
                                 "(503 overloaded + Retry-After) | "
                                 f"{pct(s['lat'], 0.5):.2f} | {pct(s['lat'], 0.95):.2f} | {wall:.1f} | {after} |")
                    totals[f"{name}_ok"] += s["ok"]
                    totals[f"{name}_errors"] += n_err
                    totals[f"{name}_typed"] += s["typed_errors"]
                    totals[f"{name}_http_errors"] += sum(s["errors"].values())
                print(table[-2], table[-1], sep="\n", flush=True)
            out_lines += table
            hostile_rows = hostile(url, server.pid, service_defaults)
            out_lines += ["", "| hostile request | outcome | server |", "| --- | --- | --- |"]
            out_lines += [f"| {a} | {b} | {c} |" for a, b, c in hostile_rows]
            out_lines += ["", f"server at the end: {mem(server.pid)}; upstream stats: {llm.stats()}"]
            alive = server.poll() is None
            out_lines += [f"server still serving after everything: {alive}"]
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
    head = [
        "# Service under load, faults and hostile clients", "",
        f"`nice -n 10 python benchmarks/service_load.py --clients {args.clients} --rounds {args.rounds}` "
        f"({time.strftime('%Y-%m-%d')}, 2 shared CPU cores, loopback only). `s3 serve` (its own process) over bm25s / "
        "flashrag_sample (1,000 passages); the searcher's litellm policy talks to the loopback fake LLM server "
        "(scripted s3 replies) with 10% of prompts failing with HTTP 500 and one hung prompt per round (hangs 60 s; "
        "searcher.timeout_s = 5 cuts it). Default [service] limits: "
        + ", ".join(f"{k}={service_defaults[k]}" for k in ("max_concurrent_requests", "max_connections",
                                                           "max_body_bytes", "body_timeout_s", "header_timeout_s",
                                                           "keep_alive_timeout_s", "max_response_bytes",
                                                           "request_timeout_s", "batch_workers"))
        + " (request_timeout_s set to 30 here). Each client: one /search and one /retrieve, in random order; a 503 "
        "with Retry-After is retried (at most 3 times).", "",
    ]
    text = "\n".join(head + out_lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
