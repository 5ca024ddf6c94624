"""The README's RAG flow re-run as written (issue 79; logic: experiments/rag_flow.py): `load_config()`,
`build_searcher`, `built.why`, `searcher.search_one(q)` and the chain `S3Retriever(searcher=searcher) | format_docs`, on
a titled corpus (hotpotqa_dev500 paragraphs) and an untitled one (a product manual's multi-line chunks), each launch a
fresh process: the documents as the chain sees them, cold and warm seconds, median [min, max] over launches. Each
`--label` is one machine load; `--append` adds its launches to the same results file.

    .venv/bin/python benchmarks/rag_flow.py --label quiet --launches 3
    .venv/bin/python benchmarks/rag_flow.py --label "beside a 2-thread job" --busy --launches 3 --append
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.default_searcher import BUSY
from experiments.rag_flow import CORPORA, launch, markdown, prepare, summary

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True, help='the machine load these launches ran under, e.g. "quiet"')
    ap.add_argument("--append", action="store_true", help="add to results.json's launches (else start it afresh)")
    ap.add_argument("--launches", type=int, default=3, help="fresh processes per corpus")
    ap.add_argument("--rounds", type=int, default=1, help="times each question goes through the chain in a launch")
    ap.add_argument("--questions", type=int, default=4, help="questions asked per corpus")
    ap.add_argument("--hotpot-questions", type=int, default=20,
                    help="the titled corpus: the distinct paragraphs of this many hotpotqa_dev500 questions")
    ap.add_argument("--corpora", default=",".join(CORPORA), help="titled, untitled or both")
    ap.add_argument("--busy", action="store_true", help="run beside a competing 2-thread torch job started here")
    ap.add_argument("--no-prime", action="store_true",
                    help="skip the untimed first launch per corpus (one-time caches: the policy's GGUF export)")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "rag_flow", help="the user folders and indexes")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rag_flow")
    args = ap.parse_args()

    corpora = prepare(args.work, SHARED, args.hotpot_questions, args.questions)
    names = [n for n in args.corpora.split(",") if n]
    results_path = args.out / "results.json"
    old = json.loads(results_path.read_text()) if args.append and results_path.is_file() else {"launches": []}
    runs: list[dict[str, Any]] = []
    job = subprocess.Popen([sys.executable, "-c", BUSY]) if args.busy else None
    try:
        if job is not None:
            time.sleep(5)
        if not args.no_prime:
            for name in names:
                t = time.time()
                launch(replace(corpora[name], questions=corpora[name].questions[:1]), args.label)
                print(f"primed {name} ({time.time() - t:.1f} s, not counted)", flush=True)
        for i in range(args.launches):
            for name in names:
                rec = launch(corpora[name], args.label, args.rounds)
                runs.append({**rec, "launch": i + 1, "busy_job": args.busy})
                print(f"{args.label} launch {i + 1} {name}: cold {rec['cold_s']:.2f} s, warm median "
                      f"{rec['warm_median_s']:.3f} s ({rec['why']})", flush=True)
                launches = old["launches"] + runs
                args.out.mkdir(parents=True, exist_ok=True)
                results = {"summary": summary(launches), "launches": launches}
                results_path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
                (args.out / "README.md").write_text(markdown(results))
    finally:
        if job is not None:
            job.terminate()
            job.wait(timeout=30)
    print(markdown({"launches": old["launches"] + runs}))


if __name__ == "__main__":
    main()
