"""Support recall of the untrained s3 searcher (offline 0.5B model through litellm) on HotpotQA dev vs naive RAG.

    nice -n 10 .venv/bin/python benchmarks/searcher_recall.py --n 100 --preset cpu
    nice -n 10 .venv/bin/python benchmarks/searcher_recall.py --n 100 --preset paper --out $TMPDIR/searcher_recall_paper

Builds (once) a bm25s index over the paragraphs of ../shared/data/hotpotqa_dev500 under --out (never in the repo),
runs the searcher question by question (resumable: finished questions are read back from contexts.jsonl) and
writes summary.json:

- support recall of D_s3 (mean share of a question's gold supporting paragraphs, `metadata.supporting_ids`, found
  in the final context), vs naive top-3 (k0 = naive-RAG k) and vs naive top-N with N = mean |D_s3| (rounded) and
  with N_i = |D_s3| of each question (the same budget question by question);
- mean search turns, mean |D_s3| (<= #MaxContexts), share of D_s3 admitted by the Appendix A.5 fallback, share of
  replies that were invalid actions; llama.cpp prompt-processing and generation speed measured first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"


def _data_file() -> Path:
    d = DATA.parent
    files = sorted(d.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no HotpotQA jsonl under {d}")
    return files[0]


def prepare(out: Path) -> tuple[Any, list[Any]]:
    from dataprep import load
    from s3core.corpus import write_corpus
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index, load_retriever

    corpus, questions = load("hotpotqa", [_data_file()])
    index = out / "index_bm25"
    if not (index / "manifest.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        corpus_path = out / "corpus.jsonl"
        write_corpus(corpus_path, corpus)
        build_index(corpus_path, "bm25", index, RetrieverConfig(), overwrite=True)
    return load_retriever(RetrieverConfig(), index), questions


def measure_speed(model: str) -> dict[str, float]:
    """llama.cpp prompt processing (tok/s, cold prompt) and generation (tok/s) through the same litellm path."""
    import litellm

    from s3runtime.llm_local import register_local_provider

    register_local_provider()
    words = " ".join(f"word{i} is a token sequence about item {i}." for i in range(120))
    msgs = [{"role": "user", "content": f"Read this: {words} Say ok."}]
    litellm.completion(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=1)  # load the model
    t = time.perf_counter()
    r = litellm.completion(model=model, messages=msgs, max_tokens=1, temperature=0.0)
    dt_prompt = time.perf_counter() - t
    pt = r.usage.prompt_tokens
    t = time.perf_counter()
    r2 = litellm.completion(
        model=model, messages=[{"role": "user", "content": "Count from 1 to 200 separated by spaces."}], max_tokens=64
    )
    dt_gen = time.perf_counter() - t
    ct = r2.usage.completion_tokens
    return {
        "prompt_tokens": pt,
        "prompt_seconds": round(dt_prompt, 3),
        "prompt_tok_per_s": round(pt / dt_prompt, 1),
        "gen_tokens": ct,
        "gen_seconds": round(dt_gen, 3),
        "gen_tok_per_s": round(ct / dt_gen, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100, help="questions (the first n of the file)")
    ap.add_argument("--preset", choices=["cpu", "paper"], default="cpu", help="cpu = configs/cpu.toml; paper = the defaults")
    ap.add_argument("--model", default="local/qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--out", type=Path, default=None, help="run folder (default: searcher_recall_<preset> in the temp folder)")
    ap.add_argument("--index-dir", type=Path, default=None, help="share a bm25 index folder between runs")
    ap.add_argument("--set", action="append", default=[], help="extra searcher overrides key=value (e.g. k=3)")
    ap.add_argument("--summary-only", action="store_true", help="recompute summary.json from contexts.jsonl")
    args = ap.parse_args()

    from s3.config import preset_section
    from s3core.configbase import parse_override
    from s3core.types import SearchResult
    from searcher.agent import admission_stats
    from searcher.build import build_searcher
    from searcher.config import SearcherConfig
    from searcher.policy.litellm_policy import LiteLLMPolicy
    from searcher.retrieval.metrics import support_recall

    out: Path = args.out or Path(tempfile.gettempdir()) / f"searcher_recall_{args.preset}"
    out.mkdir(parents=True, exist_ok=True)
    retriever, questions = prepare(args.index_dir or out)
    questions = [q for q in questions if q.supporting_ids][: args.n]  # support recall is never None below
    overrides: dict[str, Any] = {**(preset_section("cpu", "searcher") if args.preset == "cpu" else {}), "model": args.model}
    for item in args.set:
        path, value = parse_override(item)
        overrides[path[-1]] = value
    cfg = SearcherConfig(**overrides)
    contexts = out / "contexts.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if contexts.is_file():
        for line in contexts.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["id"]] = row
    speed_file = out / "speed.json"
    if not args.summary_only and not speed_file.is_file() and args.model.startswith("local/"):
        speed = measure_speed(args.model)
        speed_file.write_text(json.dumps(speed, indent=1) + "\n")
        print("llama.cpp speed:", speed, flush=True)
    if not args.summary_only:
        searcher = build_searcher(cfg, retriever, LiteLLMPolicy(args.model), k0=3)
        todo = [q for q in questions if q.id not in done]
        print(f"{len(done)} done, {len(todo)} to go; cfg k={cfg.k} turns={cfg.max_turns} "
              f"budget={cfg.doc_token_budget} cap={cfg.max_contexts}", flush=True)
        with contexts.open("a") as fh:
            for _i, q in enumerate(todo):
                res: SearchResult = searcher.search([q])[0]
                st = admission_stats(res)
                row = {
                    "id": q.id,
                    "documents": [{"id": d.id, "title": d.title, "score": d.score} for d in res.documents],
                    "gold": q.supporting_ids,
                    "stats": st,
                    "seconds": round(res.seconds, 2),
                    "steps": [s.model_dump(exclude={"policy_seconds", "retrieval_seconds", "reader_seconds"})
                              for s in res.steps],
                }
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                done[q.id] = row
                print(f"[{len(done)}/{len(questions)}] {res.seconds:5.1f}s turns={st['search_turns']} "
                      f"|D|={st['documents']} fb={st['by_fallback']} inv={st['invalid_replies']}", flush=True)
    rows = [done[q.id] for q in questions if q.id in done]
    if not rows:
        print("nothing finished yet")
        return 1
    gold = {q.id: set(q.supporting_ids) for q in questions}
    qtext = {q.id: q.question for q in questions}

    sizes = [len(r["documents"]) for r in rows]
    mean_n = statistics.mean(sizes)
    N = max(1, round(mean_n))
    kmax = max([N, 3, *sizes])
    naive = retriever.search([qtext[r["id"]] for r in rows], kmax)
    naive_ids = [[d.id for d in lst] for lst in naive]
    s3 = [support_recall([d["id"] for d in r["documents"]], gold[r["id"]]) for r in rows]
    top3 = [support_recall(ids[:3], gold[r["id"]]) for ids, r in zip(naive_ids, rows, strict=True)]
    topN = [support_recall(ids[:N], gold[r["id"]]) for ids, r in zip(naive_ids, rows, strict=True)]
    topNi = [support_recall(ids[: max(len(r["documents"]), 1)], gold[r["id"]]) for ids, r in zip(naive_ids, rows, strict=True)]
    all_s3 = [float(gold[r["id"]] <= {d["id"] for d in r["documents"]}) for r in rows]
    replies = sum(r["stats"]["replies"] for r in rows)
    summary = {
        "questions": len(rows),
        "model": args.model,
        "preset": args.preset,
        "searcher": cfg.model_dump(),
        "max_contexts": cfg.max_contexts,
        "support_recall_s3": round(statistics.mean(s3), 4),
        "support_recall_naive_top3": round(statistics.mean(top3), 4),
        f"support_recall_naive_top{N}": round(statistics.mean(topN), 4),
        "support_recall_naive_topN_same_size_per_question": round(statistics.mean(topNi), 4),
        "all_gold_in_s3": round(statistics.mean(all_s3), 4),
        "mean_D_s3": round(mean_n, 3),
        "N": N,
        "mean_search_turns": round(statistics.mean(r["stats"]["search_turns"] for r in rows), 3),
        "share_docs_by_fallback": round(sum(r["stats"]["by_fallback"] for r in rows) / max(sum(sizes), 1), 4),
        "share_invalid_replies": round(sum(r["stats"]["invalid_replies"] for r in rows) / max(replies, 1), 4),
        "mean_seconds_per_question": round(statistics.mean(r["seconds"] for r in rows), 2),
        "speed": json.loads(speed_file.read_text()) if speed_file.is_file() else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print()
    print(f"| method (n={len(rows)}, {args.preset} preset) | support recall | ratio vs top-3 | mean docs |")
    print("| --- | --- | --- | --- |")
    base = summary["support_recall_naive_top3"] or 1e-9
    for name, val, docs in [
        ("naive bm25 top-3", summary["support_recall_naive_top3"], 3),
        (f"naive bm25 top-{N} (N = mean |D_s3|)", summary[f"support_recall_naive_top{N}"], N),
        ("naive bm25 top-|D_s3| per question", summary["support_recall_naive_topN_same_size_per_question"], round(mean_n, 2)),
        ("s3 searcher D_s3 (untrained 0.5B)", summary["support_recall_s3"], round(mean_n, 2)),
    ]:
        print(f"| {name} | {val:.4f} | {val / base:.3f} | {docs} |")
    print()
    for k in ("mean_search_turns", "mean_D_s3", "share_docs_by_fallback", "share_invalid_replies", "all_gold_in_s3",
              "mean_seconds_per_question"):
        print(f"{k}: {summary[k]}")
    print(f"summary: {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
