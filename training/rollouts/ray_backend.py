"""training.backend = "ray": the step's rollouts and rewards on Ray actors; the RL (masked PPO / GRPO, GBR) stays ours.

    executor = RayExecutor(cfg, loop_cfg=..., index_dir=..., agent_kind="s3", baseline=..., end_to_end=False,
                           learner=lambda: learner.model)   # or weights_ref=group.weights_ref (ray.learners > 1)
    results = executor.rollout(examples, step)   # the step's questions split over ray.rollout_workers actors
    scored = executor.score(results, examples)   # generator / judge calls spread over ray.reward_workers actors
    sync_s = executor.sync()                     # learner weights -> object store (ray.put) -> every rollout engine

Rollout workers (`RolloutWorker`) each build, from the typed build layer, a retriever (the local index, or the remote
/retrieve service: retriever.backend = "remote") and a policy engine (training.rollout.engine: a transformers copy of
the learner, or vLLM), and run their contiguous shard of the step's questions in lockstep (one batched policy call
and one batched retrieval call per turn). Each shard samples under its own seed, a function of (training.seed, step,
shard): a redone shard, or a resumed run, samples what the first attempt would have.

Reward workers (`RewardWorker`) each hold the frozen generator and the judge (eval/build.py) and the cached naive-RAG
baseline, shipped once through the object store (never recomputed); their generator usage (calls, tokens, cost) is
summed into the step's metrics. They share the sqlite response cache (generator.cache_path), which is safe for
concurrent writers in several processes (generator_adapters/cache.py).

Faults: every actor has ray.max_restarts; a shard whose worker died mid-call (SIGKILL, OOM, a lost node) is redone
once Ray has restarted the worker (a restarted rollout worker first gets the current weights), so every sample of
the step is scored and enters the update exactly once. The losses are in the metrics (ray/lost_rollout_workers,
ray/lost_reward_workers, ray/redone_rollouts, ray/redone_rewards). A killed driver resumes from its last checkpoint like
the local trainer (same data order): the trainer, its checkpoints and its data order are the same code.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from generator_adapters.client import run_sync
from s3core.types import QAExample, SearchResult
from s3runtime.raycluster import RayWorker, WorkerPool, connect, worker_threads
from searcher.build import AgentKind
from searcher.config import SearcherConfig
from training.config import TrainSettings
from training.rewards import RewardBatch
from training.rollouts.executors import accuracy_usage, make_scorer, rollout_policy, usage_row

__all__ = ["RayExecutor", "RewardWorker", "RolloutWorker", "shard_bounds", "weights_checksum"]


def shard_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) slices of n items over at most `parts` shards, sizes differing by at most one.

    >>> shard_bounds(8, 2), shard_bounds(5, 2), shard_bounds(1, 3)
    ([(0, 4), (4, 8)], [(0, 3), (3, 5)], [(0, 1)])
    """
    parts = max(1, min(parts, n))
    q, r = divmod(n, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + q + (1 if i < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def shard_seed(seed: int, step: int, shard: int) -> int:
    """The sampling seed of one rollout shard: a function of (training.seed, step, shard) only."""
    return (seed * 1_000_003 + step) * 1024 + shard


def weights_checksum(model: Any) -> float:
    """sum of every parameter of `model` in float64: equal weights give the same number."""
    import torch

    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


class RolloutWorker(RayWorker):
    """A Ray actor: one policy engine + one retriever + the s3 loop, built from the configuration."""

    def __init__(
        self,
        cfg: TrainSettings,
        loop_cfg: SearcherConfig,
        index_dir: Path | None,
        agent_kind: AgentKind,
        index: int,
        threads: int,
        policy_factory: Callable[[], Any] | None = None,
    ) -> None:
        import torch

        from s3core.devices import resolve_device
        from searcher.build import build_retriever, build_searcher

        torch.set_num_threads(threads)
        self.tc = cfg.training
        self.retriever = build_retriever(cfg.retriever, index_dir)
        device = resolve_device(self.tc.learner.device)
        self.policy = policy_factory() if policy_factory is not None else rollout_policy(cfg, device, seed_offset=index)
        self.agent = build_searcher(loop_cfg, self.retriever, self.policy, k0=cfg.retriever.k, agent=agent_kind)
        # the held-out evaluation's agent: the same engine, greedy (training.heldout.every)
        self.greedy_agent = build_searcher(loop_cfg.model_copy(update={"temperature": 0.0}), self.retriever,
                                           self.policy, k0=cfg.retriever.k, agent=agent_kind)
        self.version = -1

    def load_weights(self, weights: list[tuple[str, Any]], version: int) -> int:
        """The learner's weights (checkpoint names, LoRA merged) into this worker's engine, in place."""
        import torch

        if callable(getattr(self.policy, "load_weights", None)):  # vLLM: its own in-place loader
            self.policy.load_weights(weights)
        elif getattr(self.policy, "model", None) is not None:  # a transformers copy of the learner
            with torch.no_grad():
                self.policy.model.load_state_dict(dict(weights), strict=True)
        self.version = version
        return version

    def weights_checksum(self) -> float | None:
        """sum of every parameter in float64 (a transformers engine; None otherwise): which weights it holds."""
        model = getattr(self.policy, "model", None)
        return None if model is None else weights_checksum(model)

    def rollout(self, questions: list[str], seed: int, greedy: bool = False) -> list[SearchResult]:
        import torch

        torch.manual_seed(seed)
        model = getattr(self.policy, "model", None)
        autocast: Any = contextlib.nullcontext()
        if self.tc.learner.autocast == "bf16" and model is not None and self.tc.rollout.engine == "transformers":
            autocast = torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16)
        if model is not None and hasattr(model, "eval"):
            model.eval()
        with torch.no_grad(), autocast:
            return list((self.greedy_agent if greedy else self.agent).search(questions))


class RewardWorker(RayWorker):
    """A Ray actor: the configured reward with its own frozen generator / judge and the shared baseline."""

    def __init__(self, cfg: TrainSettings, baseline: dict[str, float], end_to_end: bool, concurrency: int | None) -> None:
        decode = None
        if cfg.training.reward == "confidence_gated":
            from transformers import AutoTokenizer

            from searcher.policy.transformers_policy import resolve_checkpoint

            tok = AutoTokenizer.from_pretrained(str(resolve_checkpoint(cfg.training.base_model)))
            decode = lambda ids: str(tok.decode(ids, skip_special_tokens=False))  # noqa: E731
        self.scorer = make_scorer(cfg, baseline, end_to_end=end_to_end, decode=decode, generator_concurrency=concurrency)

    def score(self, results: list[SearchResult], examples: list[QAExample]) -> tuple[RewardBatch, dict[str, float]]:
        before = accuracy_usage(self.scorer)
        batch = run_sync(self.scorer.score(results, examples))
        return batch, usage_row(before, accuracy_usage(self.scorer))


def _merge(batches: list[RewardBatch]) -> RewardBatch:
    """Shard RewardBatches, in shard order, as one (a column a shard lacks: None for each of its rows).

    >>> m = _merge([RewardBatch([1.0], turn_credits=[[0.0, 1.0]]), RewardBatch([0.0, None])])
    >>> m.rewards, m.turn_credits, m.acc_s3
    ([1.0, 0.0, None], [[0.0, 1.0], None, None], None)
    """

    def cat(name: str) -> Any:
        cols = [getattr(b, name) for b in batches]
        if all(c is None for c in cols):
            return None
        return [x for b, c in zip(batches, cols, strict=True) for x in (c if c is not None else [None] * len(b.rewards))]

    return RewardBatch(
        rewards=[r for b in batches for r in b.rewards],
        acc_s3=cat("acc_s3"),
        acc_rag=cat("acc_rag"),
        generator_failures=sum(b.generator_failures for b in batches),
        reused_baseline=sum(b.reused_baseline for b in batches),
        gold_added=cat("gold_added"),
        other_added=cat("other_added"),
        turn_credits=cat("turn_credits"),
    )


class RayExecutor:
    """The StepExecutor of training.backend = "ray" (training/rollouts/executors.py), over two WorkerPools."""

    def __init__(
        self,
        cfg: TrainSettings,
        *,
        loop_cfg: SearcherConfig,
        index_dir: Path | None,
        agent_kind: AgentKind,
        baseline: dict[str, float],
        end_to_end: bool,
        learner: Callable[[], Any] | None,
        policy_factory: Callable[[], Any] | None = None,
        weights_ref: Callable[[], Any] | None = None,
        log: Callable[[str], object] = print,
    ) -> None:
        rc = cfg.ray
        self.ray = connect(rc)
        self.tc = cfg.training
        self.learner = learner
        self.weights_ref = weights_ref  # a LearnerGroup's: rank 0 puts its weights into the object store itself
        self.needs_trajectories = self.tc.reward == "confidence_gated"
        t0 = time.perf_counter()
        threads = worker_threads(rc.rollout_worker_cpus)
        self.rollouts = WorkerPool.start(
            "rollout", RolloutWorker,
            [(cfg, loop_cfg, index_dir, agent_kind, i, threads, policy_factory) for i in range(rc.rollout_workers)],
            rc=rc, cpus=rc.rollout_worker_cpus, gpus=rc.rollout_worker_gpus, resources=rc.rollout_worker_resources,
        )
        self.rollouts.revive = self._revive_rollout
        try:
            # once, in the object store: every reward worker reads this copy; held here so a restarted worker finds it
            self._baseline_ref = self.ray.put(baseline)
            self.rewards = WorkerPool.start(
                "reward", RewardWorker,
                [(cfg, self._baseline_ref, end_to_end, rc.reward_concurrency)] * rc.reward_workers,
                rc=rc, cpus=rc.reward_worker_cpus, resources=rc.reward_worker_resources,
            )
        except BaseException:
            self.rollouts.close()
            raise
        self._weights_ref: Any = None
        self._version = 0
        self._usage: dict[str, float] = {}
        self._seen = {"rollout": (0, 0), "reward": (0, 0)}
        self._redone = {"rollout": 0, "reward": 0}
        self._stats_lock = threading.Lock()
        log(f"train: Ray backend: {rc.rollout_workers} rollout + {rc.reward_workers} reward workers ready in "
            f"{time.perf_counter() - t0:.1f}s")

    # ------------------------------------------------------------------ the step
    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]:
        bounds = shard_bounds(len(examples), len(self.rollouts))
        shards = [([e.question for e in examples[lo:hi]], shard_seed(self.tc.seed, step, j), greedy)
                  for j, (lo, hi) in enumerate(bounds)]
        outs = self.rollouts.map("rollout", shards, first=list(range(len(shards))))
        with self._stats_lock:  # step_stats may be read by the scoring thread meanwhile (training/rollouts/pipeline.py)
            self._redone["rollout"] += sum(bounds[j][1] - bounds[j][0] for j in self.rollouts.last_redone)
        results = [r for out in outs for r in out]
        if len(results) != len(examples):
            raise RuntimeError(f"rollout workers returned {len(results)} results for {len(examples)} questions")
        return results

    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch:
        sent = results if self.needs_trajectories else [r.model_copy(update={"trajectory": None}) for r in results]
        bounds = shard_bounds(len(results), len(self.rewards))
        outs = self.rewards.map("score", [(sent[lo:hi], examples[lo:hi]) for lo, hi in bounds],
                                first=list(range(len(bounds))))
        with self._stats_lock:
            self._redone["reward"] += sum(bounds[j][1] - bounds[j][0] for j in self.rewards.last_redone)
            for _, usage in outs:
                for k, v in usage.items():
                    self._usage[k] = self._usage.get(k, 0.0) + v
        merged = _merge([b for b, _ in outs])
        if len(merged.rewards) != len(results):
            raise RuntimeError(f"reward workers returned {len(merged.rewards)} rewards for {len(results)} rollouts")
        return merged

    def sync(self) -> float | None:
        """The learner's weights (LoRA merged) -> the object store, once -> every rollout engine; seconds taken.
        With a LearnerGroup (`weights_ref`) rank 0 puts them into the object store from its own process."""
        if self.learner is None and self.weights_ref is None:
            return None
        from training.learn.weight_sync import learner_weights

        t0 = time.perf_counter()
        self._version += 1
        if self.weights_ref is not None:
            self._weights_ref = self.weights_ref()
        else:
            assert self.learner is not None
            self._weights_ref = self.ray.put(learner_weights(self.learner()))
        self.rollouts.call_all("load_weights", self._weights_ref, self._version)
        return time.perf_counter() - t0

    def _revive_rollout(self, w: int) -> None:
        """A restarted rollout worker holds base_model's weights again: give it the current ones first."""
        if self._weights_ref is not None:
            self.ray.get(self.rollouts.actors[w].load_weights.remote(self._weights_ref, self._version))

    def step_stats(self) -> dict[str, float]:
        with self._stats_lock:
            row = dict(self._usage)
            self._usage = {}
            for kind, pool in (("rollout", self.rollouts), ("reward", self.rewards)):
                lost0, _ = self._seen[kind]
                lost = pool.lost
                row[f"ray/lost_{kind}_workers"] = float(lost - lost0)
                row[f"ray/redone_{kind}s"] = float(self._redone[kind])
                self._seen[kind] = (lost, 0)
                self._redone[kind] = 0
        row["ray/rollout_workers"] = float(len(self.rollouts))
        row["ray/reward_workers"] = float(len(self.rewards))
        return row

    def close(self) -> None:
        for pool in (getattr(self, "rollouts", None), getattr(self, "rewards", None)):
            if pool is not None:
                pool.close()
