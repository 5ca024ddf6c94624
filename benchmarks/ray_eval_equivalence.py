"""`s3 eval` locally vs on Ray (eval.backend = "ray"): equal row for row?

    nice -n 10 .venv/bin/python benchmarks/ray_eval_equivalence.py [--questions 20] [--workers 2] \
        [--out benchmarks/results/ray_scaling]

Methods no_retrieval, naive_rag and searcher (the SmolLM2-135M transformers searcher, greedy) x datasets
hotpotqa_dev500 and musique_dev200 (prepared from ../shared/data, bm25 over each one's paragraphs), the offline
Qwen2.5-Coder-0.5B generator, N questions per cell. Every run (local and Ray) starts with its own EMPTY generator
cache, so equal rows mean the computation agreed, not that a cache answered twice. Compared per row: context ids,
answer, metrics, support recall, error, token counts, attempt. Writes OUT/eval_equivalence.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from s3runtime.offline import use_offline_env

ROOT = Path(__file__).resolve().parents[1]
use_offline_env(ray_loopback=True)  # before ray, litellm or transformers is imported
SHARED = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data"))
DATASETS = {
    "hotpotqa": ("hotpotqa", SHARED / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"),
    "musique": ("musique", SHARED / "musique_dev200"),
}
METHODS = ("no_retrieval", "naive_rag", "searcher")
SAME = ("id", "context_ids", "answer", "metrics", "support_recall", "error", "prompt_tokens", "completion_tokens",
        "attempt")


def _prepare(work: Path, name: str) -> tuple[Path, Path]:
    from dataprep import prepare
    from searcher.retrieval import build_index

    fmt, src = DATASETS[name]
    ds, index = work / f"{name}_data", work / f"{name}_index"
    if not (ds / "questions.jsonl").is_file():
        files = sorted(p for p in src.iterdir() if p.suffix in (".json", ".jsonl")) if src.is_dir() else [src]
        prepare(fmt, files, ds)
    if not index.is_dir():
        build_index(ds / "corpus.jsonl", "bm25", index)
    return ds, index


def _run(ds: Path, index: Path, method: str, out: Path, n: int, workers: int, ray: bool) -> dict[str, Any]:
    from eval.build import build_run
    from eval.harness import EvalOptions, run_eval, validate_options
    from s3.config import load_config

    cfg = load_config(ROOT / "configs" / "smoke.toml", [
        "generator.model=local/qwen2.5-coder-0.5b-instruct", f"generator.cache_path={out}.sqlite",
        "eval.use_judge=false", "eval.metric=span", f"ray.eval_workers={workers}", "ray.eval_worker_cpus=0.5",
        "searcher.max_new_tokens=24", "searcher.doc_token_budget=24",
    ])
    given = {"index"} if method != "no_retrieval" else set()
    opts = EvalOptions(dataset=ds, method=method, out=out, index=index if given else None, limit=n, batch_size=4,
                       progress=False, given=given)
    validate_options(opts)
    dataset, comp, config = build_run(cfg, opts)
    runner = None
    if ray:
        from eval.ray_eval import RayBatchRunner

        runner = RayBatchRunner(cfg, opts, config)
    t0 = time.perf_counter()
    try:
        summary = run_eval(opts, dataset, comp, config, n_resamples=100, runner=runner)
    finally:
        if runner is not None:
            runner.close()
    summary["wall_s"] = time.perf_counter() - t0
    return summary


def _write(outdir: Path, args: argparse.Namespace, cells: list[dict[str, Any]]) -> dict[str, Any]:
    expected = len(METHODS) * len(DATASETS)
    res = {"questions_per_cell": args.questions, "ray_eval_workers": args.workers,
           "generator": "local/qwen2.5-coder-0.5b-instruct", "cells": cells, "cells_done": f"{len(cells)}/{expected}",
           "all_equal": len(cells) == expected and all(
               c["rows_differing"] == 0 and c["rows_local"] == c["rows_ray"] == args.questions for c in cells)}
    (outdir / "eval_equivalence.json").write_text(json.dumps(res, indent=2))
    lines = ["# `s3 eval` local vs Ray, row for row (benchmarks/ray_eval_equivalence.py)", "",
             f"Offline Qwen2.5-Coder-0.5B generator (span metric), {args.questions} questions per cell, "
             f"{args.workers} Ray eval workers on a local 2-CPU cluster (127.0.0.1); each run with its own empty "
             "generator cache. Compared per row: context ids, answer, metrics, support recall, error, tokens, attempt. "
             "The searcher method: SmolLM2-135M (transformers, greedy) as the searcher.",
             "", "| dataset | method | rows local | rows Ray | rows differing | GenAcc local | GenAcc Ray | "
             "cache misses local / Ray | wall s local / Ray |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        lines.append(f"| {c['dataset']} | {c['method']} | {c['rows_local']} | {c['rows_ray']} | {c['rows_differing']} "
                     f"| {c['genacc_local']} | {c['genacc_ray']} | {c['cache_misses_local']} / {c['cache_misses_ray']} "
                     f"| {c['wall_s_local']} / {c['wall_s_ray']} |")
    lines += ["", f"Cells done: {res['cells_done']}; all equal: **{res['all_equal']}**", ""]
    (outdir / "eval_equivalence.md").write_text("\n".join(lines))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray_scaling"))
    args = ap.parse_args()
    import ray

    from eval.rundir import RESULTS_FILE, read_results
    from s3runtime.config import RayConfig
    from s3runtime.raycluster import connect, node_addresses

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ray_eval_eq_"))
    work.mkdir(parents=True, exist_ok=True)
    connect(RayConfig(num_cpus=2))
    assert all(a == "127.0.0.1" for a in node_addresses()), node_addresses()
    cells: list[dict[str, Any]] = []
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    data = {name: _prepare(work, name) for name in DATASETS}
    res: dict[str, Any] = {}
    try:
        for method in METHODS:  # the cheap methods first: a run cut short still reports whole cells
            for name, (ds, index) in data.items():
                runs = {}
                for side in ("local", "ray"):
                    out = work / f"{name}_{method}_{side}"
                    s = _run(ds, index, method, out, args.questions, args.workers, ray=side == "ray")
                    rows = read_results(out / RESULTS_FILE)
                    runs[side] = ({i: {k: r.get(k) for k in SAME} for i, r in rows.items()}, s)
                (lr, ls), (rr, rs) = runs["local"], runs["ray"]
                differing = sorted(i for i in set(lr) | set(rr) if lr.get(i) != rr.get(i))
                cell = {"dataset": name, "method": method, "rows_local": len(lr), "rows_ray": len(rr),
                        "rows_differing": len(differing), "differing_ids": differing[:10],
                        "genacc_local": ls["metrics"].get("genacc", {}).get("mean"),
                        "genacc_ray": rs["metrics"].get("genacc", {}).get("mean"),
                        "cache_misses_local": ls["invocation"]["cache"].get("misses"),
                        "cache_misses_ray": rs["invocation"]["cache"].get("misses"),
                        "wall_s_local": round(ls["wall_s"], 1), "wall_s_ray": round(rs["wall_s"], 1)}
                cells.append(cell)
                print(json.dumps(cell), flush=True)
                res = _write(outdir, args, cells)
    finally:
        ray.shutdown()
    print((outdir / "eval_equivalence.md").read_text())
    return 0 if res["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
