"""Which searcher runs when none is named, and how fast (issue 78; logic: experiments/default_searcher.py): cold `s3
search` and warm `s3 serve` /search on the README's titled corpus, the same corpus without titles, and hotpotqa_dev500,
quiet and beside a competing 2-thread job, median and range over launches.

    .venv/bin/python benchmarks/default_searcher.py runs/default_searcher benchmarks/results/default_searcher \\
        --launches 3 --n-warm 10 --conditions quiet,busy
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.default_searcher import corpora, launch, markdown, summary

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path, help="where the corpora and indexes are built")
    ap.add_argument("out", type=Path, help="where results.json and results.md go")
    ap.add_argument("--launches", type=int, default=3, help="launches per condition")
    ap.add_argument("--n-warm", type=int, default=10, help="questions timed per warm launch")
    ap.add_argument("--conditions", default="quiet,busy", help="quiet, busy (beside a 2-thread job), or both")
    args = ap.parse_args()
    indexes, questions = corpora(args.work, SHARED)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for cond in args.conditions.split(","):
        for i in range(args.launches):
            runs.append(launch(indexes, questions, args.n_warm, busy=cond == "busy"))
            print(f"{cond} launch {i + 1}: " + ", ".join(
                f"{n} {c['warm']['p50']:.2f}s" for n, c in runs[-1]["corpora"].items()), flush=True)
            (args.out / "results.json").write_text(json.dumps({"summary": summary(runs), "launches": runs}, indent=2)
                                                   + "\n")
            (args.out / "results.md").write_text(markdown(summary(runs)))
    print(markdown(summary(runs)))


if __name__ == "__main__":
    main()
