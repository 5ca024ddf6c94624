"""A two-node Ray cluster on this machine (127.0.0.1 only): a short training run and an evaluation across both nodes,
the rollout and evaluation actors pinned to node 2, a placement table (actor -> node), then the cluster stops.

    python scripts/ray_cluster.py --out runs/two_nodes                          # configs/smoke.toml, 2 steps, 4 questions
    python scripts/ray_cluster.py --out DIR --config configs/smoke.toml --set training.rollout.batch_size=1 --steps 1 \\
        --learners 2 --eval-questions 3 --compare-local

The nodes are `ray.cluster_utils.Cluster` nodes: separate raylet processes, each with its own CPUs, its own custom
resource (node1 / node2), its own temp folder (sessions, logs, spilled objects; linked as OUT/nodeN/tmp) and its own
working folder (OUT/node1, OUT/node2: the worker processes of a node start there), so no path is shared by accident. Two `ray start` processes
are the other way; under RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (the loopback rule, s3runtime/raycluster.py) `ray start`
joining the second node failed with an auth-token error here, while `Cluster` put both nodes on 127.0.0.1.

Placement: the run's configuration gets ray.address = the cluster, ray.rollout_worker_resources = {node2 = 1},
ray.eval_worker_resources = {node2 = 1}, and {node1 = 1} for the reward workers and the learners: Ray can place each
actor only on the node that has its resource. The trainer and the evaluation are the project's own code (s3 train,
s3 eval --ray); nothing here is a second copy of them.

Writes OUT/placement.json and OUT/placement.md (kind, index, node, node id, address, pid, working folder of every actor),
OUT/train/ (the training run: metrics.jsonl, checkpoints), OUT/eval_ray/ (the evaluation's rows, run on node 2) and,
with --compare-local, OUT/eval_local/ (the same evaluation in this process, no Ray) and whether the rows are equal;
OUT/summary.json holds the run's last metrics, the evaluation's metrics and that comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# the loopback rule (s3runtime/raycluster.py): Ray reads it when it is imported, so before anything imports ray
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# what must be equal row for row between the two evaluations (time stamps, latencies and the cache flag aside)
SAME_ROW = ("id", "context_ids", "answer", "metrics", "support_recall", "error", "prompt_tokens", "completion_tokens",
            "cost_usd", "attempt")


def start_cluster(out: Path, cpus: tuple[float, float], object_store_mb: int) -> tuple[Any, dict[str, str]]:
    """Head (node1) + worker (node2) on 127.0.0.1, each in its own working and temp folder; {node id: label}."""
    import tempfile

    from ray.cluster_utils import Cluster

    here = os.getcwd()
    labels: dict[str, str] = {}
    cluster = None
    try:
        for i, n_cpus in enumerate(cpus, start=1):
            label = f"node{i}"
            folder = out / label
            folder.mkdir(parents=True, exist_ok=True)
            # Ray's unix sockets live in the temp folder: its path must stay short (< 108 bytes with the socket names),
            # so it is a fresh folder under the system's temp dir, linked from the node's folder
            tmp = Path(tempfile.mkdtemp(prefix=f"s3ray-{label}-"))
            if not (folder / "tmp").exists():
                (folder / "tmp").symlink_to(tmp, target_is_directory=True)
            os.chdir(folder)  # the node's raylet, and so its worker processes, start here
            args: dict[str, Any] = {"num_cpus": n_cpus, "resources": {label: 100.0}, "temp_dir": str(tmp),
                                    "object_store_memory": object_store_mb * 1024 * 1024}
            if cluster is None:
                # ray.cluster_utils writes the head's address under Ray's default temp folder (/tmp/ray), whatever
                # temp_dir says, and does not make it: on a machine that never ran Ray the cluster would not start
                from ray._private.utils import get_ray_address_file

                Path(get_ray_address_file(None)).parent.mkdir(parents=True, exist_ok=True)
                cluster = Cluster(initialize_head=True, connect=False, head_node_args={**args, "include_dashboard": False})
                node: Any = cluster.head_node
            else:
                node = cluster.add_node(**args)
            labels[str(node.node_id)] = label
    except BaseException:
        if cluster is not None:
            cluster.shutdown()
        raise
    finally:
        os.chdir(here)
    assert cluster is not None
    return cluster, labels


def placement_rows(kind: str, pool: Any, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Where each actor of a WorkerPool runs (every actor answers RayWorker's node_id / node / pid / cwd)."""
    ids, addrs, pids, cwds = (pool.call_all(m) for m in ("node_id", "node", "pid", "cwd"))
    return [{"kind": kind, "index": i, "node": labels.get(nid, "?"), "node_id": nid[:12], "address": addr, "pid": pid,
             "cwd": cwd} for i, (nid, addr, pid, cwd) in enumerate(zip(ids, addrs, pids, cwds, strict=True))]


def placement_table(rows: list[dict[str, Any]]) -> str:
    cols = ("kind", "index", "node", "node_id", "address", "pid", "cwd")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def train(cfg: Any, labels: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any], Path, Path]:
    """The short training run (training.total_steps), its actors' placement, its last metrics row, its data dir and
    index."""
    from training.learn.learner_group import LearnerGroup
    from training.run.recovery import train_healing
    from training.run.trainer import make_trainer
    from training.rundir import read_metrics

    # as `s3 train` runs it (a recovery trigger rolls back and goes on); the last trainer kept open for its actors
    trainer = train_healing(lambda: make_trainer(cfg, log=lambda s: print(s, flush=True)), keep_open=True)["trainer"]
    try:
        ex: Any = trainer.executor  # a RayExecutor (training.backend = "ray")
        rows = placement_rows("rollout", ex.rollouts, labels) + placement_rows("reward", ex.rewards, labels)
        if isinstance(trainer.learner, LearnerGroup):
            rows += placement_rows("learner", trainer.learner.pool, labels)
        data_dir, index_dir = trainer.data.directory, trainer.data.index_dir
    finally:
        trainer.close()
    return rows, read_metrics(trainer.run_dir)[-1], data_dir, index_dir


def evaluate(cfg: Any, dataset: Path, index: Path, out: Path, *, on_ray: bool,
             labels: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`s3 eval --method searcher` of the trained policy (greedy) on `dataset`: on the cluster's eval workers, or in
    this process. Returns the eval actors' placement and the run's summary."""
    from eval.build import build_run
    from eval.harness import EvalOptions, run_eval, validate_options

    opts = EvalOptions(dataset=dataset, method="searcher", out=out, index=index, batch_size=1, progress=False,
                       given={"index"})
    validate_options(opts)
    ds, comp, config = build_run(cfg, opts)
    runner: Any = None
    rows: list[dict[str, Any]] = []
    if on_ray:
        from eval.ray_eval import RayBatchRunner

        runner = RayBatchRunner(cfg, opts, config)
        rows = placement_rows("eval", runner.pool, labels)
    try:
        summary = run_eval(opts, ds, comp, config, n_resamples=100, runner=runner)
    finally:
        if runner is not None:
            runner.close()
    return rows, summary


def result_rows(run_dir: Path) -> dict[str, dict[str, Any]]:
    from eval.rundir import RESULTS_FILE, read_results

    return {i: {k: r.get(k) for k in SAME_ROW} for i, r in read_results(run_dir / RESULTS_FILE).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", required=True, help="output folder (the nodes' folders, the runs, the placement table)")
    ap.add_argument("--config", action="append", default=None, help="config file(s) (default configs/smoke.toml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    ap.add_argument("--steps", type=int, default=2, help="training steps")
    ap.add_argument("--learners", type=int, default=1, help="ray.learners (on node 1)")
    ap.add_argument("--rollout-workers", type=int, default=1, help="rollout actors (on node 2)")
    ap.add_argument("--eval-workers", type=int, default=1, help="evaluation actors (on node 2)")
    ap.add_argument("--eval-questions", type=int, default=4, help="training questions the evaluation runs on")
    ap.add_argument("--cpus", type=float, nargs=2, default=(2.0, 2.0), metavar=("NODE1", "NODE2"),
                    help="Ray CPUs of each node (logical: fractions of actors are reserved, not cores)")
    ap.add_argument("--object-store-mb", type=int, default=1024, help="object store of each node")
    ap.add_argument("--compare-local", action="store_true",
                    help="run the same evaluation in this process (no Ray) and compare the rows")
    args = ap.parse_args(argv)

    from s3.config import load_config
    from s3runtime.config import RayConfig
    from s3runtime.raycluster import connect, node_addresses, require_ray

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    configs = args.config or [str(ROOT / "configs" / "smoke.toml")]
    t0 = time.perf_counter()
    cluster, labels = start_cluster(out, tuple(args.cpus), args.object_store_mb)
    summary: dict[str, Any] = {}
    try:
        connect(RayConfig(address=cluster.address))
        addrs = node_addresses()
        print(f"cluster: {len(addrs)} nodes at {addrs} (address {cluster.address}) up in {time.perf_counter() - t0:.1f}s")
        if len(addrs) != 2 or any(a != "127.0.0.1" for a in addrs):
            raise SystemExit(f"expected two nodes on 127.0.0.1, got {addrs}")
        pinned = [f"ray.address={cluster.address}", "ray.rollout_worker_resources.node2=1",
                  "ray.eval_worker_resources.node2=1", "ray.reward_worker_resources.node1=1",
                  "ray.learner_resources.node1=1",
                  f"ray.rollout_workers={args.rollout_workers}", f"ray.eval_workers={args.eval_workers}"]
        cfg = load_config(configs, [*args.set, "training.backend=ray", *pinned, f"ray.learners={args.learners}",
                                    f"training.output_dir={out / 'train'}", f"training.total_steps={args.steps}"])
        t1 = time.perf_counter()
        placement, last, data_dir, index_dir = train(cfg, labels)
        summary["train"] = {"seconds": round(time.perf_counter() - t1, 1), "last_metrics": last}

        # the evaluation: the trained searcher (greedy) on the first training questions, its actors on node 2
        evalset = out / "evalset"
        evalset.mkdir(exist_ok=True)
        lines = (data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()[: args.eval_questions]
        (evalset / "questions.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        eval_sets = [*args.set, *pinned, "searcher.policy=transformers", f"searcher.policy_path={out / 'train'}",
                     "searcher.temperature=0"]
        ecfg = load_config(configs, [*eval_sets, f"generator.cache_path={out / 'eval_ray.sqlite'}"])
        t2 = time.perf_counter()
        erows, esum = evaluate(ecfg, evalset, index_dir, out / "eval_ray", on_ray=True, labels=labels)
        placement += erows
        summary["eval_ray"] = {"seconds": round(time.perf_counter() - t2, 1), "metrics": esum.get("metrics"),
                               "n_scored": esum.get("n_scored")}
    finally:
        require_ray().shutdown()
        cluster.shutdown()
    print(f"cluster stopped ({time.perf_counter() - t0:.1f}s in all)")

    table = placement_table(placement)
    print(table)
    (out / "placement.md").write_text(table + "\n", encoding="utf-8")
    (out / "placement.json").write_text(json.dumps(placement, indent=2), encoding="utf-8")
    pinned_ok = all(r["node"] == "node2" for r in placement if r["kind"] in ("rollout", "eval"))
    summary["rollout_and_eval_actors_on_node2"] = pinned_ok

    if args.compare_local:
        # the same evaluation on one node (this process, no Ray), its own empty generator cache
        lcfg = load_config(configs, [*eval_sets, f"generator.cache_path={out / 'eval_local.sqlite'}"])
        t3 = time.perf_counter()
        _, lsum = evaluate(lcfg, evalset, index_dir, out / "eval_local", on_ray=False, labels=labels)
        same = result_rows(out / "eval_ray") == result_rows(out / "eval_local")
        summary["eval_local"] = {"seconds": round(time.perf_counter() - t3, 1), "metrics": lsum.get("metrics"),
                                 "n_scored": lsum.get("n_scored")}
        summary["eval_rows_equal"] = same
        print(f"evaluation rows on two nodes == one node: {same}")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    print(json.dumps({k: v for k, v in summary.items() if k != "train"}, indent=2, default=str))
    ok = pinned_ok and summary.get("eval_rows_equal", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
