"""Seconds per question of the shipped trained searcher: the automatic runtime against today's torch path, warm and
cold, and whether the documents change (logic: experiments/searcher_latency.py).

    .venv/bin/python benchmarks/searcher_latency.py --work runs/latency --n-new 20 --n-old 5
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.searcher_latency import markdown, prepare, run

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "latency")
    ap.add_argument("--n-new", type=int, default=20)
    ap.add_argument("--n-old", type=int, default=5)
    ap.add_argument("--colds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "searcher_latency")
    a = ap.parse_args()
    data, index = prepare(a.shared, a.work)
    res = run(data, index, a.n_new, a.n_old, a.colds)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (a.out / "results.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
