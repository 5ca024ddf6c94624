"""The transformers rollout engine before/after issue 29: policy tokens/s of the same s3 rollouts.

    .venv/bin/python benchmarks/transformers_engine.py --before-repo /tmp/s3-before [--questions 32] [--repeats 3] \
        [--model smollm2-135m-instruct] [--device cpu] [--out benchmarks/results/transformers_engine]

Before (the parent commit, checked out with `git worktree add /tmp/s3-before <commit>`): generate in pieces of 16
rows with `output_logits`, stack every step's full-vocabulary logits and take the log-softmax on the CPU in float32.
After: pieces of searcher.generate_batch rows (64), the chosen tokens' log-probs recorded on the device as they are
generated (searcher.policy.transformers_policy.ChosenLogprobs). The same untrained policy searches the same HotpotQA dev
questions (real bm25s over their 4,943 paragraphs; the paper's 8:3:3 loop, k0 = 3, --doc-tokens a passage, min_turns = 2 so
later turns happen), greedy, float32 — so both sides write the same tokens (checked) and the ratio is of speed alone.
Each run is a fresh process; before/after alternate, `--repeats` times; medians and ranges are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"

CHILD = r'''
import hashlib, json, sys, tempfile, time
from pathlib import Path
import torch
n, model, device, data, work = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], Path(sys.argv[5])
torch.set_num_threads(2)
from dataprep.prepare import load
from s3core.corpus import write_corpus
from searcher.build import build_searcher
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.policy.transformers_policy import TransformersPolicy
from searcher.retrieval import build_index, load_retriever
corpus, questions = load("hotpotqa", [Path(data)])
cpath = work / "corpus.jsonl"
if not (work / "bm25" / "manifest.json").is_file():
    write_corpus(cpath, corpus)
    build_index(cpath, "bm25", work / "bm25", RetrieverConfig(), overwrite=True)
rcfg = RetrieverConfig()
retriever = load_retriever(rcfg, work / "bm25")
policy = TransformersPolicy.load(model, device=device)
scfg = SearcherConfig(policy="transformers", temperature=0.0, min_turns=2, doc_token_budget=int(sys.argv[6]))
agent = build_searcher(scfg, retriever, policy, k0=rcfg.k)
qs = [q.question for q in questions[:n]]
agent.search(qs[:2])  # warm-up, not timed
t0 = time.perf_counter()
with torch.no_grad():
    results = agent.search(qs)
dt = time.perf_counter() - t0
tokens = sum(sum(r.trajectory.mask) for r in results if r.trajectory is not None)
digest = hashlib.sha256(json.dumps([r.trajectory.response_ids for r in results]).encode()).hexdigest()[:16]
print(json.dumps({"seconds": dt, "policy_tokens": int(tokens), "tokens_per_s": tokens / dt,
                  "gen_batch": getattr(policy, "gen_batch", None), "trajectories_sha": digest,
                  "mean_turns": sum(r.turns for r in results) / len(results)}))
'''


GEN_CHILD = r'''
import json, sys, time
import torch
torch.set_num_threads(2)
from dataprep.prepare import load
from searcher.policy.base import TokenPrompt
from searcher.policy.transformers_policy import TransformersPolicy
n, model, device, data, tokens = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
corpus, questions = load("hotpotqa", [__import__("pathlib").Path(data)])
text = {d.id: d for d in corpus}
pol = TransformersPolicy.load(model, device=device)
prompts = []
for q in questions[:n]:
    docs = [text[i] for i in (q.metadata.get("supporting_ids") or [])][:2] + corpus[:6]
    body = "\n".join(f"Doc {j + 1} ({d.title}): {d.text[:400]}" for j, d in enumerate(docs))
    msg = f"Question: {q.question}\n{body}\nWrite one search query that finds what is still missing."
    prompts.append(TokenPrompt(pol.encode_chat([{"role": "user", "content": msg}])))
pol.generate(prompts[:2], max_new_tokens=4, temperature=0.6)  # warm-up
torch.manual_seed(0)
t0 = time.perf_counter()
outs = pol.generate(prompts, max_new_tokens=tokens, temperature=0.6)
dt = time.perf_counter() - t0
k = sum(len(o.token_ids) for o in outs)
print(json.dumps({"seconds": dt, "policy_tokens": k, "tokens_per_s": k / dt, "gen_batch": pol.gen_batch,
                  "trajectories_sha": "n/a (sampled)", "mean_turns": 0,
                  "prompt_tokens": sum(len(p.ids) for p in prompts) / len(prompts)}))
'''


def run_generate(repo: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo), LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", GEN_CHILD, str(args.questions), args.model, args.device, str(DATA),
                        str(args.new_tokens)], cwd=str(repo), env=env, capture_output=True, text=True, timeout=5400)
    if p.returncode != 0:
        raise SystemExit(f"{repo}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(repo: Path, args: argparse.Namespace, work: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo), LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", CHILD, str(args.questions), args.model, args.device, str(DATA), str(work),
                        str(args.doc_tokens)],
                       cwd=str(repo), env=env, capture_output=True, text=True, timeout=5400)
    if p.returncode != 0:
        raise SystemExit(f"{repo}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-repo", type=Path, required=True)
    ap.add_argument("--questions", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--doc-tokens", type=int, default=64,
                    help="searcher.doc_token_budget (whole 8-document windows make CPU runs take many minutes each)")
    ap.add_argument("--generate-only", action="store_true",
                    help="time the engine's generate() alone: one batch of --questions long prompts (the question, 8 "
                    "passages), --new-tokens sampled at 0.6 (before: pieces of 16 rows; after: one call)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--work", type=Path, default=Path("/tmp/s3-bench-transformers-engine"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "transformers_engine")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(args.repeats):
        for label, repo in (("before", args.before_repo), ("after", ROOT)):
            r = run_generate(repo, args) if args.generate_only else run(repo, args, args.work)
            runs[label].append(r)
            print(f"[{i + 1}/{args.repeats}] {label}: {r['tokens_per_s']:.1f} policy tokens/s "
                  f"({r['policy_tokens']} tokens, {r['seconds']:.1f}s, gen_batch {r['gen_batch']})", flush=True)
    tps = {k: [r["tokens_per_s"] for r in v] for k, v in runs.items()}
    med = {k: statistics.median(v) for k, v in tps.items()}
    same = {r["trajectories_sha"] for v in runs.values() for r in v}
    report = {"setup": {"model": args.model, "device": args.device, "questions": args.questions,
                        "loop": f"8:3:3, k0=3, min_turns=2, {args.doc_tokens} tokens a document, greedy, float32", "repeats": args.repeats,
                        "cores": os.cpu_count()},
              "runs": runs, "median_tokens_per_s": med, "ratio_after_over_before": med["after"] / med["before"],
              "identical_trajectories": len(same) == 1}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    md = ["# Transformers rollout engine, before/after (issue 29)", "",
          f"`{' '.join(['.venv/bin/python', 'benchmarks/transformers_engine.py', *sys.argv[1:]])}`", "",
          f"{args.model} on {args.device}, {args.questions} HotpotQA dev questions, the 8:3:3 loop (min_turns 2, "
          f"{args.doc_tokens} tokens a document), greedy, "
          f"float32; fresh process per run, before/after alternating, {args.repeats} each.", "",
          "| code | policy tokens/s: median | range | gen rows per call |", "| --- | ---: | --- | ---: |"]
    for k in ("before", "after"):
        md.append(f"| {k} | {med[k]:.1f} | {min(tps[k]):.1f}-{max(tps[k]):.1f} | {runs[k][0]['gen_batch']} |")
    md += ["", f"Ratio after/before (medians): **{report['ratio_after_over_before']:.2f}x**; the two wrote identical "
           f"trajectories: {report['identical_trajectories']}."]
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
