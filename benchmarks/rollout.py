"""Throughput of the lockstep search loop: a scripted policy of 20 ms per (batched) call + the real bm25s retriever.

    nice -n 10 .venv/bin/python benchmarks/rollout.py [--questions 64] [--delay-ms 20]

Every question does begin-with-search, two search turns and a final selection (3 policy calls, 3 retrieval calls
per lockstep batch) in the paper profile (k0=3, k=8, max_select=3). A policy call lasts 20 ms in all: the script's
own work (~6 ms for 64 prompts) is inside the 20 ms, not added to it (before 2026-11-23 it was added, which made the
policy ~27 ms per call at batch 64 and the loop's share look ~1.5 points smaller). Reports questions/s at batch 1, 8,
64, the split of wall time into policy / retrieval / the loop's own work (the run with the median loop share of
--repeats), and the ratio against batch 1 measured in the same run.
Target: the loop's own work <= 5% of the total at batch 64.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"


def script(prompt: str, _: int) -> str:
    """Two searches built from the question's words, then select and stop (deterministic, format-perfect)."""
    q = prompt.split("<question>\n")[-1].split("\n</question>")[0]
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z']+", q) if len(w) > 3]
    windows = prompt.split("</question>")[-1].count("<information>\n")  # D0 + windows seen so far
    if windows >= 3:
        return "<important_info>[1, 2]</important_info>\n<search_complete>True</search_complete>"
    half = words[windows::2] or words or ["wikipedia"]
    return (
        "<important_info>[1]</important_info>\n<search_complete>False</search_complete>\n"
        f'<query>{{"query": "{" ".join(half[:6])}"}}</query>'
    )


def cpu_times() -> list[int] | None:
    """The machine's aggregate CPU counters (/proc/stat), to report the hypervisor's steal share of a run."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None


def steal_share(before: list[int] | None, after: list[int] | None) -> str:
    if before is None or after is None or len(after) < 8:
        return "n/a"
    d = [a - b for a, b in zip(after, before, strict=False)]
    return f"{d[7] / max(sum(d[:8]), 1):.0%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--repeats", type=int, default=7, help="runs per batch size (the run with the median share is shown)")
    ap.add_argument("--no-freeze", action="store_true",
                    help="leave the loaded heap to the garbage collector (s3 serve / s3 train freeze it once loaded)")
    args = ap.parse_args()

    from dataprep import load
    from s3core.corpus import write_corpus
    from searcher.build import build_searcher
    from searcher.config import RetrieverConfig, SearcherConfig
    from searcher.heap import freeze_loaded_heap
    from searcher.policy import ScriptedPolicy
    from searcher.retrieval import build_index, load_retriever

    corpus, questions = load("hotpotqa", [DATA])
    with tempfile.TemporaryDirectory() as tmp:
        cpath = Path(tmp) / "corpus.jsonl"
        write_corpus(cpath, corpus)
        index = build_index(cpath, "bm25", Path(tmp) / "bm25", RetrieverConfig())
        retriever = load_retriever(RetrieverConfig(), index)
        qs = [q.question for q in questions][: args.questions]
        frozen = 0 if args.no_freeze else freeze_loaded_heap()  # what s3 serve does once its index is loaded
        cfg = SearcherConfig(k=8, max_select=3, max_turns=3)  # the paper's 8-3-3
        rows = []
        t_before = cpu_times()
        for b in [int(x) for x in args.batches.split(",")]:
            runs = []
            for _ in range(args.repeats):
                policy = ScriptedPolicy(script, delay_s=args.delay_ms / 1000, max_batch=b)
                searcher = build_searcher(cfg, retriever, policy, k0=3)
                res = searcher.search(qs)
                st = searcher.last_stats
                assert all(r.turns == 2 for r in res), "every question should use 2 searches + the final reply"
                runs.append(st)
            runs.sort(key=lambda x: x.other_seconds / x.seconds)
            rows.append((b, runs[len(runs) // 2]))  # the run with the median loop share
        steal = steal_share(t_before, cpu_times())
        base_qps = rows[0][1].questions / rows[0][1].seconds
        print(f"{len(qs)} HotpotQA questions, bm25s over {len(corpus)} paragraphs, scripted policy {args.delay_ms:.0f} ms/call, "
              f"paper profile (k0=3, k=8, 3 turns); the median-share run of {args.repeats}; CPU steal by the hypervisor "
              f"during the runs: {steal} (the loop's share grows with it: the policy's 20 ms do not); "
              f"{f'{frozen} loaded objects frozen out of the GC, as s3 serve does' if frozen else 'heap not frozen'}")
        print()
        print("| batch | questions/s | x batch 1 | policy s | retrieval s | loop's own s | loop's own share | policy calls | retrieval calls |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for b, st in rows:
            qps = st.questions / st.seconds
            print(
                f"| {b} | {qps:.1f} | {qps / base_qps:.2f} | {st.policy_seconds:.3f} | {st.retrieval_seconds:.3f} | "
                f"{st.other_seconds:.3f} | {st.other_seconds / st.seconds:.1%} | {st.policy_calls} | {st.retrieval_calls} |"
            )
        last = rows[-1][1]
        share = last.other_seconds / last.seconds
        print()
        print(f"loop's own share at batch {rows[-1][0]}: {share:.1%} ({'OK' if share <= 0.05 else 'ABOVE'} the 5% target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
