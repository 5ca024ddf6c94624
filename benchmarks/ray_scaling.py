"""Rollouts on Ray vs in this process: throughput, the Ray step's overhead, the weight-sync time.

    nice -n 10 .venv/bin/python benchmarks/ray_scaling.py [--questions 16] [--latency 0.5] [--engine-batch 4] \
        [--repeats 3] \
        [--real-steps 2] [--out benchmarks/results/ray_scaling]

1. Scripted policy with a fixed latency: every batched call of up to `--engine-batch` prompts lasts `--latency` s (a
   sleep: the cores are not the limit),
   real bm25s over HotpotQA dev paragraphs: rollouts/s of N questions in this process vs on Ray with 1 and 2
   rollout workers (training/rollouts/ray_backend.py RayExecutor); medians over `--repeats`, ratios to the local run
   measured in the same invocation.
2. The real SmolLM2-135M transformers policy through the real trainer (configs/smoke.toml, training.backend local vs
   ray): rollouts/s with 1 and 2 workers, whole-step seconds (rollouts + rewards with the offline generator + update
   + sync) and Ray's overhead per step as a ratio to the local step, and the weight-sync seconds per step.

3. Several learners (ray.learners, training/learn/learner_group.py): the real trainer (configs/smoke.toml, training.backend
   = ray, one rollout worker running the scripted latency policy with the learner's tokenizer, so its trajectories are
   token-exact and the update is real), with the update in the driver (1 learner) vs on 2 gloo learner actors:
   median step / update / weight-sync seconds and their ratios 2 learners / 1 learner. On 2 cores the two learners
   share the cores the one learner had (1 torch thread each vs 2 in the driver): the ratio weighs the group's
   overhead (actor calls, shipping the micro-batches, the all-reduce, rank 0's weights through the object store)
   against two processes vs two threads; a real speed-up needs a core set (or a GPU) per learner.

Ray runs a local 2-CPU cluster on 127.0.0.1 (s3runtime/raycluster.py). Writes OUT/results.json and OUT/results.md.
Only parts: --skip-scripted, --skip-real, --skip-learners.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from s3runtime.offline import use_offline_env

ROOT = Path(__file__).resolve().parents[1]
use_offline_env(ray_loopback=True)  # before ray, litellm or transformers is imported
SHARED = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data"))
HOTPOT = SHARED / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"
TRAIN = SHARED / "train_hotpotqa_musique100"


def _reply(prompt: str, i: int) -> str:
    """One search turn (a query from the question's own words), then stop: a valid s3 action sequence."""
    body = prompt.rsplit("</question>", 1)[-1]
    question = prompt.rsplit("<question>", 1)[-1].split("</question>", 1)[0].strip()
    if body.count("<information>") > 1:  # D0, then one window per search turn
        return "<important_info>[1]</important_info>\n<search_complete>True</search_complete>"
    query = json.dumps({"query": " ".join(question.split()[-6:])})
    return f"<important_info>[1]</important_info>\n<search_complete>False</search_complete>\n<query>{query}</query>"


def latency_policy(latency: float, max_batch: int) -> Any:
    """A scripted engine with a fixed latency: each batched call of up to `max_batch` prompts lasts `latency` s (a
    sleep), so N lockstep questions take ceil(N / max_batch) calls per turn and the cores are not the limit."""
    from searcher.policy.scripted import ScriptedPolicy

    return ScriptedPolicy(_reply, name="latency", delay_s=latency, max_batch=max_batch)


def latency_factory(latency: float, max_batch: int) -> Any:
    return lambda: latency_policy(latency, max_batch)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def scripted_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from dataprep import prepare
    from s3.config import load_config
    from searcher.build import build_retriever, build_searcher
    from searcher.retrieval import build_index
    from training.rollouts.ray_backend import RayExecutor

    ds = work / "hotpot"
    if not (ds / "corpus.jsonl").is_file():
        prepare("hotpotqa", [HOTPOT], ds)
    index = work / "hotpot_index"
    if not index.is_dir():
        build_index(ds / "corpus.jsonl", "bm25", index)
    from s3core.types import QAExample

    qs = [QAExample.model_validate(json.loads(line)) for line in (ds / "questions.jsonl").read_text().splitlines()[: args.questions]]
    out: dict[str, Any] = {"questions": len(qs), "latency_s_per_call": args.latency, "engine_batch": args.engine_batch,
                           "runs": {}}
    for workers in (0, 1, 2):
        cfg = load_config(ROOT / "configs" / "smoke.toml", ["retriever.k=3", f"ray.rollout_workers={max(workers, 1)}",
                                                            "ray.reward_workers=1", "training.reward=r1_searcher_stage1"])
        times: list[float] = []
        if workers == 0:
            agent = build_searcher(cfg.searcher, build_retriever(cfg.retriever, index),
                                   latency_policy(args.latency, args.engine_batch), k0=cfg.retriever.k)
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                res = agent.search([q.question for q in qs])
                times.append(time.perf_counter() - t0)
        else:
            ex = RayExecutor(cfg, loop_cfg=cfg.searcher, index_dir=index, agent_kind="s3", baseline={},
                             end_to_end=False, learner=None, policy_factory=latency_factory(args.latency, args.engine_batch),
                             log=lambda s: None)
            try:
                for step in range(args.repeats):
                    t0 = time.perf_counter()
                    res = ex.rollout(qs, step)
                    times.append(time.perf_counter() - t0)
            finally:
                ex.close()
        name = "local" if workers == 0 else f"ray_{workers}"
        out["runs"][name] = {"seconds": times, "median_s": _median(times), "rollouts_per_s": len(qs) / _median(times),
                             "turns": sum(r.turns for r in res) / len(res)}
        print(f"scripted {name}: {out['runs'][name]['rollouts_per_s']:.2f} rollouts/s", flush=True)
    base = out["runs"]["local"]["rollouts_per_s"]
    for r in out["runs"].values():
        r["throughput_vs_local"] = r["rollouts_per_s"] / base
    return out


def real_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from s3.config import load_config
    from training.rollouts.ray_backend import RayExecutor
    from training.run.trainer import make_trainer

    common = [
        "training.data.max_questions=16", f"training.rollout.batch_size={args.real_batch}", "training.rollout.group_size=2",
        "searcher.max_new_tokens=24", "searcher.doc_token_budget=24", f"training.data.dir={work / 'train_data'}",
        f"generator.cache_path={work / 'cache.sqlite'}", "training.total_steps=100",
    ]
    smoke = ROOT / "configs" / "smoke.toml"
    out: dict[str, Any] = {"batch_size": args.real_batch, "group_size": 2, "steps": args.real_steps, "runs": {}}

    def run(trainer: Any, name: str) -> None:
        rows = [trainer.train_step() for _ in range(args.real_steps)]
        n = args.real_batch * 2
        r: dict[str, Any] = {
            "step_s": [row["charts/step_seconds"] for row in rows],
            "rollout_s": [row["charts/rollout_seconds"] for row in rows],
            "reward_s": [row["charts/reward_seconds"] for row in rows],
            "update_s": [row["charts/update_seconds"] for row in rows],
        }
        r["median_step_s"] = _median(r["step_s"])
        r["rollouts_per_s"] = n / _median(r["rollout_s"])
        if "charts/weight_sync_s" in rows[0]:
            r["weight_sync_s"] = [row["charts/weight_sync_s"] for row in rows]
            r["median_weight_sync_s"] = _median(r["weight_sync_s"])
        out["runs"][name] = r
        print(f"real {name}: step {r['median_step_s']:.1f}s, {r['rollouts_per_s']:.2f} rollouts/s", flush=True)

    local = make_trainer(load_config(smoke, [*common, f"training.output_dir={work / 'local'}"]), log=lambda s: None)
    try:
        run(local, "local")
    finally:
        local.close()
    del local
    on_ray = make_trainer(load_config(smoke, [*common, f"training.output_dir={work / 'ray'}", "training.backend=ray",
                                              "ray.rollout_workers=1", "ray.reward_workers=1"]), log=lambda s: None)
    try:
        run(on_ray, "ray_1")
        on_ray.executor.close()
        cfg2 = load_config(smoke, [*common, f"training.output_dir={work / 'ray'}", "training.backend=ray",
                                   "ray.rollout_workers=2", "ray.reward_workers=2"])
        on_ray.executor = RayExecutor(cfg2, loop_cfg=on_ray.loop_cfg, index_dir=on_ray.data.index_dir, agent_kind="s3",
                                      baseline=on_ray.data.baseline, end_to_end=False, learner=lambda: on_ray.learner.model,
                                      log=lambda s: None)
        on_ray.executor.sync()
        run(on_ray, "ray_2")
    finally:
        on_ray.close()
    base = out["runs"]["local"]
    for r in out["runs"].values():
        r["step_vs_local"] = r["median_step_s"] / base["median_step_s"]
        r["throughput_vs_local"] = r["rollouts_per_s"] / base["rollouts_per_s"]
        if "median_weight_sync_s" in r:
            r["weight_sync_share"] = r["median_weight_sync_s"] / r["median_step_s"]
    return out


def scripted_token_policy(latency: float, max_batch: int, model: str) -> Any:
    """The latency policy writing through `model`'s tokenizer: token trajectories the learner can train on."""
    from searcher.policy.scripted import ScriptedPolicy
    from searcher.policy.transformers_policy import TransformersPolicy

    return ScriptedPolicy(_reply, name="latency", delay_s=latency, max_batch=max_batch,
                          tokenizer=TransformersPolicy.load(model))


def learners_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import functools

    from s3.config import load_config
    from training.learn.learner_group import LearnerGroup
    from training.rollouts.ray_backend import RayExecutor
    from training.run.trainer import make_trainer

    smoke = ROOT / "configs" / "smoke.toml"
    common = [
        "training.data.max_questions=16", f"training.rollout.batch_size={args.learner_batch}", "training.rollout.group_size=2",
        "training.reward=r1_searcher_stage1", "training.data.keep_baseline_zero=false", "training.backend=ray",
        f"training.base_model={args.learner_model}", "training.learner.micro_batch_size=2", "training.total_steps=100",
        f"training.data.dir={work / 'learner_data'}", "ray.rollout_workers=1", "ray.reward_workers=1",
        "training.learner.torch_threads=2", "ray.learner_cpus=0.5",  # 1 learner: 2 threads; 2 learners: 1 thread each
    ]
    out: dict[str, Any] = {"model": args.learner_model, "batch_size": args.learner_batch, "group_size": 2,
                           "steps": args.learner_steps, "latency_s_per_call": args.latency, "runs": {}}
    for learners in (1, 2):
        name = f"learners_{learners}"
        cfg = load_config(smoke, [*common, f"ray.learners={learners}", f"training.output_dir={work / name}"])
        t = make_trainer(cfg, log=lambda s: None)
        try:
            t.executor.close()  # the scripted rollouts instead of the configured engine
            group = t.learner if isinstance(t.learner, LearnerGroup) else None
            t.executor = RayExecutor(
                cfg, loop_cfg=t.loop_cfg, index_dir=t.data.index_dir, agent_kind="s3", baseline=t.data.baseline,
                end_to_end=False, learner=None if group is not None else functools.partial(getattr, t.learner, "model"),
                weights_ref=group.weights_ref if group is not None else None,
                policy_factory=functools.partial(scripted_token_policy, args.latency, args.engine_batch, args.learner_model),
                log=lambda s: None)
            t.train_step()  # warm-up: first forward passes, first all-reduce
            rows = [t.train_step() for _ in range(args.learner_steps)]
        finally:
            t.close()
        r: dict[str, Any] = {k: [row[f"charts/{k}"] for row in rows]
                             for k in ("step_seconds", "rollout_seconds", "update_seconds", "weight_sync_s")}
        for k in list(r):
            r[f"median_{k}"] = _median(r[k])
        r["policy_tokens"] = rows[-1]["charts/policy_tokens"]
        r["torch_threads_per_learner"] = 2 if learners == 1 else 1
        out["runs"][name] = r
        print(f"learners {learners}: step {r['median_step_seconds']:.2f}s, update {r['median_update_seconds']:.2f}s, "
              f"sync {r['median_weight_sync_s']:.3f}s", flush=True)
    one, two = out["runs"]["learners_1"], out["runs"]["learners_2"]
    out["overhead"] = {
        "step_ratio": two["median_step_seconds"] / one["median_step_seconds"],
        "update_ratio": two["median_update_seconds"] / one["median_update_seconds"],
        "sync_ratio": two["median_weight_sync_s"] / one["median_weight_sync_s"],
    }
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = ["# Rollouts on Ray vs local (benchmarks/ray_scaling.py)", "",
             f"Machine: {res['machine']}; load average at start {res['load_at_start']}; Ray local cluster, "
             f"2 CPUs, 127.0.0.1. Medians; ratios against the local run of the same invocation.", ""]
    s = res.get("scripted")
    if s:
        lines += [f"## Scripted policy, {s['latency_s_per_call']} s per batched call of up to {s['engine_batch']} "
                  f"prompts (sleep), {s['questions']} questions", "", "| run | median s | rollouts/s | vs local |", "|---|---|---|---|"]
        for name, r in s["runs"].items():
            lines.append(f"| {name} | {r['median_s']:.2f} | {r['rollouts_per_s']:.2f} | {r['throughput_vs_local']:.2f}x |")
        lines.append("")
    r = res.get("real")
    if r:
        lines += [f"## Real SmolLM2-135M policy, {r['batch_size']} questions x group {r['group_size']} per step, "
                  f"{r['steps']} steps", "",
                  "| run | median step s | step vs local | rollouts/s | throughput vs local | weight sync s | sync share |",
                  "|---|---|---|---|---|---|---|"]
        for name, x in r["runs"].items():
            ws = f"{x['median_weight_sync_s']:.2f}" if "median_weight_sync_s" in x else "-"
            share = f"{x['weight_sync_share']:.3f}" if "weight_sync_share" in x else "-"
            lines.append(f"| {name} | {x['median_step_s']:.1f} | {x['step_vs_local']:.2f} | {x['rollouts_per_s']:.2f} "
                         f"| {x['throughput_vs_local']:.2f}x | {ws} | {share} |")
        lines.append("")
    g = res.get("learners")
    if g:
        lines += [f"## Learners: update in the driver (1) vs 2 gloo learner actors, {g['model']}, {g['batch_size']} "
                  f"questions x group {g['group_size']}, scripted rollouts ({g['latency_s_per_call']} s a call), "
                  f"{g['steps']} steps after one warm-up step", "",
                  "| learners | median step s | update s | weight sync s | rollout s | policy tokens |", "|---|---|---|---|---|---|"]
        for name, x in g["runs"].items():
            lines.append(f"| {name.split('_')[1]} | {x['median_step_seconds']:.2f} | {x['median_update_seconds']:.2f} | "
                         f"{x['median_weight_sync_s']:.3f} | {x['median_rollout_seconds']:.2f} | {x['policy_tokens']:.0f} |")
        o = g["overhead"]
        lines += ["", f"2 learners / 1 learner (below 1 = faster with 2): step {o['step_ratio']:.2f}x, update "
                  f"{o['update_ratio']:.2f}x, weight sync {o['sync_ratio']:.2f}x. 1 learner: 2 torch threads in the "
                  "driver; 2 learners: 1 thread each (the same 2 cores).", ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per batched policy call")
    ap.add_argument("--engine-batch", type=int, default=4, help="prompts per policy call (the engine's batch)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--real-steps", type=int, default=2)
    ap.add_argument("--real-batch", type=int, default=4)
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-scripted", action="store_true")
    ap.add_argument("--skip-learners", action="store_true")
    ap.add_argument("--learner-steps", type=int, default=3)
    ap.add_argument("--learner-batch", type=int, default=4)
    ap.add_argument("--learner-model", default="smollm2-135m-instruct", help="training.base_model of the learners part")
    ap.add_argument("--work", default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray_scaling"))
    args = ap.parse_args()
    import ray

    from s3runtime.config import RayConfig
    from s3runtime.raycluster import connect, node_addresses

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ray_scaling_"))
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                           "load_at_start": [round(x, 2) for x in os.getloadavg()]}
    connect(RayConfig(num_cpus=2))
    assert all(a == "127.0.0.1" for a in node_addresses()), node_addresses()
    try:
        if not args.skip_scripted:
            res["scripted"] = scripted_part(args, work)
        if not args.skip_real:
            res["real"] = real_part(args, work)
        if not args.skip_learners:
            res["learners"] = learners_part(args, work)
    finally:
        ray.shutdown()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2))
    (out / "results.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
