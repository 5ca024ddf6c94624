"""Generator throughput against a loopback OpenAI-compatible server that answers after L seconds.

    .venv/bin/python benchmarks/generation.py [--latency 0.2] [--concurrency 8 32] [--per-slot 8] [--serial 10]

For each concurrency C, `Generator.answer` (litellm, bounded by an asyncio semaphore) sends N = C x per-slot
distinct prompts (cache off). The limit is C / L answers/s; the goal is >= 0.8 C / L. The baseline, measured in the
same run, is upstream s3's way: a serial loop of blocking calls (here `litellm.completion`, one after another).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generator_adapters import Generator, GeneratorConfig
from generator_adapters.testing import FakeLLMServer


def serial_loop(srv: FakeLLMServer, questions: list[str]) -> tuple[float, float]:
    """Upstream's way: one blocking call after another. Returns (answers/s, client CPU seconds per answer)."""
    import litellm

    gen = Generator(GeneratorConfig(model="openai/fake", api_base=srv.api_base, cache_path=None))
    t0, c0 = time.perf_counter(), time.process_time()
    for q in questions:
        r = litellm.completion(
            model="openai/fake", api_base=srv.api_base, api_key="EMPTY", messages=gen.messages(q, None),
            max_tokens=64, temperature=0.0, num_retries=0, max_retries=0,
        )
        assert r.choices[0].message.content
    return len(questions) / (time.perf_counter() - t0), (time.process_time() - c0) / len(questions)


def concurrent(srv: FakeLLMServer, questions: list[str], c: int) -> tuple[float, float, int]:
    gen = Generator(GeneratorConfig(model="openai/fake", api_base=srv.api_base, cache_path=None, concurrency=c))
    t0, c0 = time.perf_counter(), time.process_time()
    answers = asyncio.run(gen.answer(questions, None))
    dt = time.perf_counter() - t0
    return len(questions) / dt, (time.process_time() - c0) / len(questions), sum(a.ok for a in answers)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.2, help="server latency L in seconds")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--per-slot", type=int, default=8, help="prompts per concurrency slot (N = C x per-slot)")
    ap.add_argument("--serial", type=int, default=10, help="calls in the serial baseline")
    args = ap.parse_args()
    L = args.latency
    with FakeLLMServer(latency_s=L, process=True) as srv:  # a server of its own, like a real provider
        # warm-up: imports, connection pool, litellm's first-call setup (not timed)
        concurrent(srv, [f"warm-up {i}" for i in range(8)], 8)
        load0 = os.getloadavg()[0]
        serial, serial_cpu = serial_loop(srv, [f"serial question {i}?" for i in range(args.serial)])
        rows = [("serial loop (upstream)", 1, args.serial, serial, 1 / L, serial_cpu)]
        ok_all = True
        for c in args.concurrency:
            n = c * args.per_slot
            rate, cpu, ok = concurrent(srv, [f"question {c}-{i}?" for i in range(n)], c)
            ok_all &= ok == n
            rows.append((f"Generator.answer C={c}", c, n, rate, c / L, cpu))
        load1 = os.getloadavg()[0]
    print(f"\nloopback OpenAI-compatible server (own process), latency L = {L * 1000:.0f} ms; litellm, cache off; "
          f"{os.cpu_count()} CPUs, 1-min load {load0:.1f} -> {load1:.1f}\n")
    print(f"| {'mode':<24} | {'C':>3} | {'N':>4} | {'answers/s':>9} | {'limit C/L':>9} | {'% of limit':>10} "
          f"| {'goal 0.8C/L':>11} | {'met':>3} | {'x serial':>8} | {'client CPU ms/answer':>20} |")
    print(f"|{'-' * 26}|{'-' * 5}|{'-' * 6}|{'-' * 11}|{'-' * 11}|{'-' * 12}|{'-' * 13}|{'-' * 5}|{'-' * 10}|{'-' * 22}|")
    met_all = True
    for name, c, n, rate, limit, cpu in rows:
        goal = 0.8 * limit
        met = rate >= goal
        if c > 1:
            met_all &= met
        print(f"| {name:<24} | {c:>3} | {n:>4} | {rate:>9.1f} | {limit:>9.1f} | {100 * rate / limit:>9.0f}% "
              f"| {goal:>11.1f} | {'yes' if met else 'NO':>3} | {rate / serial:>7.1f}x | {cpu * 1000:>20.1f} |")
    print(f"\nall answers ok: {ok_all}; goal met at every C: {met_all}")
    return 0 if (ok_all and met_all) else 1


if __name__ == "__main__":
    sys.exit(main())
