"""Seconds per question of the shipped trained searcher: the automatic runtime against today's torch path, warm and
cold, and whether the documents change (logic: experiments/searcher_latency.py).

    .venv/bin/python benchmarks/searcher_latency.py --work runs/latency --n-new 20 --n-old 5
    .venv/bin/python benchmarks/searcher_latency.py --floor 20    # llama.cpp's own rates on the f16 / q8_0 exports
                                                                  # and the tokens a search evaluates: the floor
                                                                  # (--exports: the warm loop on each export too)
    .venv/bin/python benchmarks/searcher_latency.py --launches quiet=runs/latency/quiet1,... busy=runs/latency/busy1,...
                                                                  # medians and ranges over launches (launches.md)
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from experiments.searcher_latency import (
    exports,
    kernels,
    launches,
    launches_markdown,
    markdown,
    prepare,
    run,
    token_budget,
)

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "latency")
    ap.add_argument("--n-new", type=int, default=20)
    ap.add_argument("--n-old", type=int, default=5)
    ap.add_argument("--colds", type=int, default=1)
    ap.add_argument("--floor", type=int, default=0, metavar="N",
                    help="instead of the timing: kernel rates and the tokens N questions evaluate (floor.json)")
    ap.add_argument("--exports", action="store_true", help="with --floor: the warm loop on the f16 and q8_0 exports")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "searcher_latency")
    ap.add_argument("--launches", nargs="+", metavar="COND=DIR,DIR,...", default=None,
                    help="instead of the timing: summarise earlier launches (each DIR a --out of one) per condition")
    a = ap.parse_args()
    if a.launches:
        groups = {}
        for spec in a.launches:
            cond, _, dirs = spec.partition("=")
            groups[cond] = [json.loads((Path(d) / "results.json").read_text()) for d in dirs.split(",") if d]
        summary = launches(groups)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "launches.json").write_text(json.dumps({"summary": summary, "launches": groups}, indent=1) + "\n")
        (a.out / "launches.md").write_text(launches_markdown(summary))
        print(launches_markdown(summary))
        return
    data, index = prepare(a.shared, a.work)
    if a.floor:
        from s3core.corpus import read_questions
        from searcher.policies import shipped_policy
        from searcher.policy.llamacpp_policy import policy_gguf

        files = [policy_gguf(str(shipped_policy()), t)[0] for t in ("f16", "q8_0")]
        qs = [q.question for q in read_questions(data / "questions.jsonl")][: a.floor]
        floor = {"load_1min_start": os.getloadavg()[0], "kernels": kernels(files), "tokens": token_budget(index, qs),
                 "exports": exports(index, qs) if a.exports else None}
        floor["load_1min_end"] = os.getloadavg()[0]
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "floor.json").write_text(json.dumps(floor, indent=1) + "\n")
        print(json.dumps({k: v for k, v in floor.items() if k != "tokens"} | {"tokens": floor["tokens"]["median"]}))
        return
    res = run(data, index, a.n_new, a.n_old, a.colds)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (a.out / "results.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
