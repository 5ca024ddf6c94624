"""How readily does the offline judge say "yes"? False-positive rate on mismatched (answer, gold) pairs.

    nice -n 10 .venv/bin/python benchmarks/judge_fpr.py [--models qwen2.5-coder-0.5b-instruct ...] [--n 100]

Pairs come from ../shared/data/hotpotqa_dev500: each question's gold answer is shown as the "response" to another
question (a fixed random derangement), skipping pairs where one answer contains the other after normalisation
(those are not mismatches, and span_check would have accepted them before the judge is asked). A judge that says
"yes" to these inflates GenAcc. As a control, the same judge sees matched pairs ("The answer is <gold>." against
its own gold): its true-positive rate. Unparseable or failed verdicts are counted apart (missing), never as "no".
The baseline in the same run is the span check, which gives 0 false positives on these pairs by construction.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import string
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent

from generator_adapters import Judge, JudgeConfig  # noqa: E402

DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"


def _norm(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _contains(a: str, b: str) -> bool:
    a, b = f" {_norm(a)} ", f" {_norm(b)} "
    return b in a or a in b


def make_pairs(n: int, seed: int) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    golds = [str(r["answer"]) for r in rows]
    rng = random.Random(seed)
    order = list(range(len(golds)))
    rng.shuffle(order)
    mismatched: list[tuple[str, list[str]]] = []
    for k, i in enumerate(order):
        j = order[(k + 1) % len(order)]  # each question gets the next question's gold: a derangement
        if _contains(golds[j], golds[i]):
            continue
        mismatched.append((golds[j], [golds[i]]))
        if len(mismatched) == n:
            break
    matched = [(f"The answer is {golds[i]}.", [golds[i]]) for i in order[:n]]
    return mismatched, matched


def rate(verdicts: list[bool | None]) -> tuple[float | None, int, int]:
    scored = [v for v in verdicts if v is not None]
    return (sum(scored) / len(scored) if scored else None), len(scored), len(verdicts) - len(scored)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct"],
                    help="offline model names (local/<name>) or any litellm model string")
    ap.add_argument("--n", type=int, default=100, help="mismatched pairs")
    ap.add_argument("--n-matched", type=int, default=50, help="matched control pairs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "judge_fpr.json"))
    args = ap.parse_args()
    os.nice(max(0, 10 - os.nice(0)))  # a heavy measurement on a shared machine: nice 10 (not more if already niced)

    mismatched, matched = make_pairs(args.n, args.seed)
    matched = matched[: args.n_matched]
    results = []
    for name in args.models:
        model = name if "/" in name else f"local/{name}"
        judge = Judge(JudgeConfig(model=model, cache_path=None, max_tokens=4))
        t0 = time.perf_counter()
        fp = judge.check([r for r, _ in mismatched], [g for _, g in mismatched])
        tp = judge.check([r for r, _ in matched], [g for _, g in matched])
        dt = time.perf_counter() - t0
        fpr, n_fp_scored, n_fp_missing = rate(fp)
        tpr, n_tp_scored, n_tp_missing = rate(tp)
        results.append({
            "judge": model, "fingerprint": judge.fingerprint(), "n_mismatched": len(mismatched),
            "false_positive_rate": fpr, "mismatched_scored": n_fp_scored, "mismatched_missing": n_fp_missing,
            "n_matched": len(matched), "true_positive_rate": tpr, "matched_scored": n_tp_scored,
            "matched_missing": n_tp_missing, "seconds": dt, "calls_per_s": (len(fp) + len(tp)) / dt,
        })
        print(f"{model}: FPR {fpr} ({n_fp_scored} scored, {n_fp_missing} missing), TPR {tpr}, {dt:.0f}s", flush=True)
    span_fp = sum(_contains(r, g[0]) for r, g in mismatched)  # 0 by construction: the baseline
    span_tp = sum(_contains(r, g[0]) for r, g in matched)

    print(f"\njudge_check on {len(mismatched)} mismatched / {len(matched)} matched hotpotqa_dev500 pairs (seed {args.seed})\n")
    print(f"| {'judge':<38} | {'FPR (mismatched)':>16} | {'TPR (matched)':>13} | {'missing':>7} | {'calls/s':>7} |")
    print(f"|{'-' * 40}|{'-' * 18}|{'-' * 15}|{'-' * 9}|{'-' * 9}|")
    print(f"| {'span_check (baseline)':<38} | {span_fp / len(mismatched):>16.3f} | {span_tp / len(matched):>13.3f} "
          f"| {0:>7} | {'-':>7} |")
    for r in results:
        f = "n/a" if r["false_positive_rate"] is None else f"{r['false_positive_rate']:.3f}"
        t = "n/a" if r["true_positive_rate"] is None else f"{r['true_positive_rate']:.3f}"
        print(f"| {r['judge']:<38} | {f:>16} | {t:>13} | {r['mismatched_missing'] + r['matched_missing']:>7} "
              f"| {r['calls_per_s']:>7.2f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"data": str(DATA), "seed": args.seed, "span_check_fp": span_fp,
                               "span_check_tp": span_tp, "results": results}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
