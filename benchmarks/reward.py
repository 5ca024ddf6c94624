"""GBR rewards/s for a batch of trajectories against a loopback generator with fixed latency, and the baseline
cache's hit rate.

    .venv/bin/python benchmarks/reward.py [--latency 0.2] [--batch 64] [--concurrency 32] [--serial 16]

- batched: `RewardScorer("gbr")` on `batch` SearchResults (real documents from the training corpus): one batched,
  concurrent generator call (asyncio semaphore = concurrency) + the span metric, Acc(RAG) from the cached baseline.
- serial (upstream's way, measured in the same run): one blocking generator call per trajectory, one after the
  other, and the naive-RAG term recomputed per trajectory (2 calls per reward). Timed on `serial` trajectories.
- baseline cache: `prepare-training` baseline stage run twice over the same questions against the same loopback
  server: the first run computes every baseline, the second must hit the cache for all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent

from generator_adapters.testing import FakeLLMServer  # noqa: E402
from s3.config import load_config  # noqa: E402
from s3core.types import Document, QAExample, SearchResult  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--serial", type=int, default=16, help="trajectories timed in the serial baseline")
    ap.add_argument("--baseline-questions", type=int, default=64)
    args = ap.parse_args()

    from eval import metrics
    from generator_adapters import Generator
    from training.prep.data import make_accuracy, prepare_training
    from training.rewards import RewardScorer

    with FakeLLMServer(latency_s=args.latency, process=True) as srv, tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            ROOT / "configs" / "smoke.toml",
            [
                "generator.model=openai/fake",
                f"generator.api_base={srv.api_base}",
                "generator.cache_path=null",
                f"generator.concurrency={args.concurrency}",
                f"training.output_dir={tmp}/run",
                f"training.data.max_questions={args.baseline_questions}",
                "training.data.keep_baseline_zero=true",
            ],
        )
        cfg.generator.cache_path = None
        # ---- GBR rewards / s, batched vs serial
        docs = [Document(id=f"d{i}", title="Paris" if i % 3 == 0 else f"T{i}", text=f"passage {i}") for i in range(9)]
        examples = [QAExample(id=f"q{i}", question=f"Where is {'Paris' if i % 3 == 0 else 'it'} thing {i}?", golden_answers=["Paris"]) for i in range(args.batch)]
        results = [SearchResult(question=e.question, documents=docs[i % 3 : i % 3 + 3]) for i, e in enumerate(examples)]
        baseline = {e.id: 0.0 for e in examples}
        accuracy = make_accuracy(cfg)
        scorer = RewardScorer("gbr", accuracy=accuracy, baseline=baseline)
        asyncio.run(scorer.score(results[:8], examples[:8]))  # warm-up (imports, connection pool)
        t0 = time.perf_counter()
        out = asyncio.run(scorer.score(results, examples))
        batched_s = time.perf_counter() - t0
        assert all(r is not None for r in out.rewards), "loopback calls failed"

        import litellm

        gen = Generator(cfg.generator)
        n = min(args.serial, args.batch)
        t0 = time.perf_counter()
        serial_rewards = []
        for e, r in zip(examples[:n], results[:n], strict=True):
            accs = []
            for ctx in (r.documents, docs[:3]):  # Acc(s3) and the naive-RAG term, recomputed every time
                resp = litellm.completion(
                    model="openai/fake", api_base=srv.api_base, api_key="EMPTY", messages=gen.messages(e.question, ctx),
                    max_tokens=cfg.generator.max_tokens, temperature=0.0, num_retries=0, max_retries=0,
                )
                accs.append(metrics.span_check([resp.choices[0].message.content], [e.golden_answers])[0] or 0.0)
            serial_rewards.append(accs[0] - accs[1])
        serial_s = time.perf_counter() - t0
        batched_rate = args.batch / batched_s
        serial_rate = n / serial_s

        # ---- baseline cache hit rate: prepare twice
        logs: list[str] = []
        t0 = time.perf_counter()
        m1 = prepare_training(cfg, log=logs.append)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        m2 = prepare_training(cfg, log=logs.append)
        second_s = time.perf_counter() - t0

    print(f"loopback generator latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}")
    print()
    print("| GBR reward computation | trajectories | seconds | rewards/s | vs serial |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| serial loop (upstream: 2 blocking calls each) | {n} | {serial_s:.2f} | {serial_rate:.1f} | 1.00x |")
    print(f"| RewardScorer (batched, cached baseline) | {args.batch} | {batched_s:.2f} | {batched_rate:.1f} | "
          f"{batched_rate / serial_rate:.1f}x |")
    print(f"| ideal for concurrency {args.concurrency} | | | {args.concurrency / args.latency:.1f} | "
          f"{args.concurrency / args.latency / serial_rate:.1f}x |")
    print()
    print("| baseline cache (prepare-training) | questions | computed | hits | hit rate | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, m, s in (("first run", m1, first_s), ("second run", m2, second_s)):
        c = m["baseline_cache"]
        total = c["hits"] + c["computed"]
        print(f"| {name} | {total} | {c['computed']} | {c['hits']} | {c['hits'] / max(total, 1):.2f} | {s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
