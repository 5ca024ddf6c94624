"""Which searcher runs when none is named, and how fast (issue 78; logic: experiments/default_searcher.py): cold `s3
search` and warm `s3 serve` /search on the README's titled corpus, the same corpus without titles, and hotpotqa_dev500,
quiet and beside a competing 2-thread job, median and range over launches.

    .venv/bin/python benchmarks/default_searcher.py --work runs/default_searcher --launches 3 --n-warm 10 \\
        --out benchmarks/results/default_searcher
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.default_searcher import corpora, launch, markdown, summary

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "default_searcher")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--n-warm", type=int, default=10, help="dev500 questions timed a warm launch")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "default_searcher")
    args = ap.parse_args()
    indexes, questions = corpora(args.work, args.shared)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for cond in args.conditions.split(","):
        for i in range(args.launches):
            runs.append(launch(indexes, questions, args.n_warm, busy=cond == "busy"))
            print(f"{cond} launch {i + 1}: " + ", ".join(
                f"{n} {c['warm']['p50']:.2f}s" for n, c in runs[-1]["corpora"].items()), flush=True)
            summ = summary(runs)
            (args.out / "results.json").write_text(json.dumps({"summary": summ, "launches": runs}, indent=2) + "\n")
            (args.out / "results.md").write_text(markdown(summ))
    print(markdown(summary(runs)))


if __name__ == "__main__":
    main()
