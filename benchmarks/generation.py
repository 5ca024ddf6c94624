"""Generator throughput against a loopback OpenAI-compatible server that answers after L seconds.

    .venv/bin/python benchmarks/generation.py [--latency 0.2] [--concurrency 8 32] [--processes 1 2]
                                              [--per-slot 20] [--repeats 3] [--serial 10]

For each concurrency C and client process count P, `Generator.answer` (litellm, bounded by an asyncio semaphore;
with P > 1 the batch is split over P client worker processes, `generator.processes`) sends N = C x per-slot distinct
prompts (cache off); the median of `repeats` runs is reported. The limit is C / L answers/s; the goal is >= 0.8 C / L.
The baseline, measured in the same run, is upstream s3's way: a serial loop of blocking calls (`litellm.completion`,
one after another). One Python process spends ~4-5 ms of CPU per litellm call, so at C = 32 (160 calls/s) one event
loop is the limit: that is what `processes` is for.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

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


def concurrent(srv: FakeLLMServer, n: int, c: int, p: int, repeats: int) -> tuple[float, int, int]:
    """Median answers/s over `repeats` batches of n prompts; (rate, answers ok, answers asked)."""
    cfg = GeneratorConfig(model="openai/fake", api_base=srv.api_base, cache_path=None, concurrency=c, processes=p)
    gen = Generator(cfg)
    try:
        asyncio.run(gen.answer([f"warm-up {c}-{p}-{i}" for i in range(max(c, p))], None))  # workers, pools: untimed
        rates, ok = [], 0
        for r in range(repeats):
            questions = [f"question {c}-{p}-{r}-{i}?" for i in range(n)]
            t0 = time.perf_counter()
            answers = asyncio.run(gen.answer(questions, None))
            rates.append(n / (time.perf_counter() - t0))
            ok += sum(a.ok for a in answers)
        return statistics.median(rates), ok, n * repeats
    finally:
        gen.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.2, help="server latency L in seconds")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4], help="client processes P to try per C")
    ap.add_argument("--per-slot", type=int, default=20, help="prompts per concurrency slot (N = C x per-slot)")
    ap.add_argument("--repeats", type=int, default=3, help="timed batches per row (the median is reported)")
    ap.add_argument("--serial", type=int, default=10, help="calls in the serial baseline")
    args = ap.parse_args()
    L = args.latency
    with FakeLLMServer(latency_s=L, process=True) as srv:  # a server of its own, like a real provider
        concurrent(srv, 8, 8, 1, 1)  # warm-up: imports, connection pool, litellm's first-call setup (not timed)
        load0 = os.getloadavg()[0]
        serial, serial_cpu = serial_loop(srv, [f"serial question {i}?" for i in range(args.serial)])
        print(f"serial loop: {serial:.2f} answers/s, client CPU {serial_cpu * 1000:.1f} ms/answer", flush=True)
        rows = [("serial loop (upstream)", 1, 1, args.serial, serial, 1 / L)]
        ok_all = True
        for c in args.concurrency:
            for p in args.processes:
                n = c * args.per_slot
                rate, ok, asked = concurrent(srv, n, c, p, args.repeats)
                ok_all &= ok == asked
                rows.append((f"Generator.answer C={c} P={p}", c, p, n, rate, c / L))
                print(f"C={c} P={p}: {rate:.1f} answers/s (median of {args.repeats})", flush=True)
        load1 = os.getloadavg()[0]
    print(f"\nloopback OpenAI-compatible server (own process), latency L = {L * 1000:.0f} ms; litellm, cache off; "
          f"{os.cpu_count()} CPUs, 1-min load {load0:.1f} -> {load1:.1f}\n")
    print(f"| {'mode':<28} | {'C':>3} | {'P':>2} | {'N':>4} | {'answers/s':>9} | {'limit C/L':>9} | {'% of limit':>10} "
          f"| {'goal 0.8C/L':>11} | {'met':>3} | {'x serial':>8} |")
    print(f"|{'-' * 30}|{'-' * 5}|{'-' * 4}|{'-' * 6}|{'-' * 11}|{'-' * 11}|{'-' * 12}|{'-' * 13}|{'-' * 5}|{'-' * 10}|")
    best: dict[int, float] = {}
    for name, c, p, n, rate, limit in rows:
        goal = 0.8 * limit
        if c > 1:
            best[c] = max(best.get(c, 0.0), rate)
        print(f"| {name:<28} | {c:>3} | {p:>2} | {n:>4} | {rate:>9.1f} | {limit:>9.1f} | {100 * rate / limit:>9.0f}% "
              f"| {goal:>11.1f} | {'yes' if rate >= goal else 'NO':>3} | {rate / serial:>7.1f}x |")
    met = {c: r >= 0.8 * c / L for c, r in best.items()}
    print(f"\nall answers ok: {ok_all}; goal met at every C (best P): {all(met.values())} "
          + ", ".join(f"C={c}: {best[c]:.1f}/s = {100 * best[c] * L / c:.0f}% of C/L" for c in best))
    return 0 if (ok_all and all(met.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
