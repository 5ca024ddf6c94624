"""Where a training step's rollouts and rewards run: the trainer calls a `StepExecutor`, never the engines directly.

    results = executor.rollout(examples, step)      # B x group_size SearchResults, in the order of `examples`
    scored = executor.score(results, examples, step=step)  # RewardBatch (training/rewards.py), same order
    ... the masked PPO / GRPO update is the learner's (training/learn/api.py) ...
    sync_s = executor.sync()                        # the learner's new weights into every rollout engine (or None)
    row.update(executor.step_stats())               # reward/ usage and, on Ray, ray/ worker losses since the last call

Asynchronous RL (training.rollout.max_staleness > 0, training/rollouts/pipeline.py) calls `rollout` on one thread and `score`
and `step_stats` on another, while the learner updates: `rollout` and `sync` never run at once (the pipeline's engine
lock), scoring jobs run one at a time, and the executors keep their counters under a lock of their own.

`LocalExecutor` is what the trainer always did, in this process (training.backend = "local"); `RayExecutor`
(training/rollouts/ray_backend.py) runs the same two calls on Ray actors (training.backend = "ray"). Both build their pieces
here (`make_scorer`, `rollout_policy`), so a setting means the same thing on either side.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from generator_adapters.client import run_sync
from s3core.types import QAExample, SearchResult
from training.config import TrainSettings
from training.rewards import NO_GENERATOR_REWARDS, RewardBatch, RewardScorer

__all__ = ["GAUGE_METRICS", "USAGE_METRICS", "LocalExecutor", "StepExecutor", "make_scorer", "rollout_policy", "usage_row"]

# Accuracy.usage() key -> metrics.jsonl key (summed over the reward workers on Ray)
USAGE_METRICS = {
    "generator_calls": "reward/generator_calls",
    "generator_failures": "reward/generator_failed_calls",
    "prompt_tokens": "reward/prompt_tokens",
    "completion_tokens": "reward/completion_tokens",
    "cost_usd": "reward/cost_usd",
    "paid_calls": "cost/paid_calls",
    "unknown_cost_calls": "cost/unknown_price_calls",
    "cache_hits": "cost/cache_hits",
    "saved_usd": "cost/saved_usd",
    "reused_baseline": "reward/reused_baseline",  # RewardScorer.counts(): scored from the cached naive-RAG baseline
}


class StepExecutor(Protocol):
    """What a training step asks of its executor (see the module docstring)."""

    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]: ...
    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch: ...
    def sync(self) -> float | None: ...
    def step_stats(self) -> dict[str, float]: ...
    def close(self) -> None: ...


# step_stats() keys that are a state (how many workers there are now), not a count since the last report: a caller that
# collects step_stats() several times a step keeps the last value of these and adds up the others
GAUGE_METRICS = frozenset({"ray/rollout_workers", "ray/reward_workers"})


def usage_row(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Metrics of the generator usage between two Accuracy.usage() snapshots.

    >>> usage_row({"cost_usd": 1.0, "generator_calls": 2}, {"cost_usd": 1.5, "generator_calls": 6})
    {'reward/generator_calls': 4.0, 'reward/cost_usd': 0.5}
    """
    return {USAGE_METRICS[k]: float(after[k] - before.get(k, 0.0)) for k in USAGE_METRICS if k in after}


def make_scorer(
    cfg: TrainSettings,
    baseline: dict[str, float],
    *,
    end_to_end: bool,
    decode: Callable[[list[int]], str] | None,
    generator_concurrency: int | None = None,
) -> RewardScorer:
    """The configured reward (training.reward) with its frozen generator / judge (when it needs them) and the cached
    naive-RAG baseline. `generator_concurrency` overrides generator.concurrency (a Ray reward worker's share)."""
    from eval import metrics
    from eval.build import build_accuracy

    def em(p: str, golds: Any) -> float:
        return float(metrics.exact_match([p], [list(golds)])[0] or 0.0)

    def f1(p: str, golds: Any) -> float:
        return float(metrics.f1([p], [list(golds)])[0] or 0.0)

    tc = cfg.training
    accuracy = None
    if not end_to_end and tc.reward not in NO_GENERATOR_REWARDS:
        gen = cfg.generator_resolved
        if generator_concurrency is not None:
            gen = gen.model_copy(update={"concurrency": generator_concurrency})
        accuracy = build_accuracy(gen, cfg.judge_resolved, cfg.eval)
    return RewardScorer(
        tc.reward,
        accuracy=accuracy,
        baseline=baseline,
        em=em,
        f1=f1,
        decode=decode,
        query_tags=("<search>", "</search>") if end_to_end else ("<query>", "</query>"),
        beta=tc.confidence_beta,
        end_to_end=end_to_end,
        invalid_penalty=tc.invalid_penalty,
        retrieval_cost=tc.retrieval_cost,
        turn_credit=bool(tc.update.turn_credit),
    )


def accuracy_usage(scorer: RewardScorer) -> dict[str, float]:
    """The scorer's generator usage so far (none when the reward calls no generator) and the calls it spared."""
    usage, counts = getattr(scorer.accuracy, "usage", None), getattr(scorer, "counts", None)
    return {**(dict(usage()) if callable(usage) else {}), **(dict(counts()) if callable(counts) else {})}


def rollout_policy(cfg: TrainSettings, device: str, *, seed_offset: int = 0) -> Any:
    """The rollout engine training.rollout.engine names, over training.base_model's files: a vLLM engine
    (searcher.vllm settings, sampling what the learner would), or a transformers policy (a Ray rollout worker's own
    copy of the learner; the learner's weights come in by `sync`)."""
    from searcher.policy.transformers_policy import TransformersPolicy, full_weights

    tc = cfg.training
    if tc.rollout.engine == "vllm":
        from searcher.policy.vllm_policy import VLLMPolicy

        # rollouts sample what the learner scores: no serving-time penalty (searcher.vllm.presence_penalty)
        update: dict[str, Any] = {"seed": tc.seed + seed_offset, "presence_penalty": 0.0}
        if cfg.searcher.vllm.dtype == "auto":
            # vLLM's own 'auto' serves a float32 checkpoint in bfloat16: ~0.04 mean log-prob gap to a float32 learner
            update["dtype"] = tc.learner.dtype
        # a LoRA base_model (a trained searcher) merged: vLLM loads full weights
        return VLLMPolicy(str(full_weights(tc.base_model)), engine=cfg.searcher.vllm.model_copy(update=update))
    return TransformersPolicy.load(tc.base_model, device=device, dtype=tc.learner.dtype, gen_batch=cfg.searcher.generate_batch,
                                   merge_adapter=True)  # an engine only samples: a LoRA base_model folded in


def self_sampling(stack: contextlib.ExitStack[Any], model: Any, autocast_mode: str, merge_lora: bool) -> int | None:
    """Enter, on `stack`, how the learner's own model samples (inside the caller's no_grad): with merge_lora
    (training.rollout.merge_lora) its LoRA adapters merged for the rollout only, in the weights' own dtype (so before
    autocast) if the copies fit in half the device's free memory; then the learner's autocast. Returns how many weights
    were merged (None: merge_lora off). LocalExecutor.rollout and the doctor's shape step sample through it."""
    from training.learn.learner import autocast
    from training.learn.weight_sync import lora_merged, merge_budget

    merged = stack.enter_context(lora_merged(model, merge_budget(model))) if merge_lora else None
    stack.enter_context(autocast(autocast_mode, model))
    return merged


class LocalExecutor:
    """Rollouts and rewards in this process, from the parts training/run/build.py gives it: the sampling agent (over the
    learner itself, or its vLLM engine), the greedy agent of the held-out evaluation, the scorer, the learner's model
    and the engine its weights go into after each update."""

    def __init__(self, *, agent: Any, greedy_agent: Any, scorer: RewardScorer, model: Any, engine: Any = None,
                 autocast: str = "off", merge_lora: bool = False) -> None:
        self.agent, self.greedy_agent, self.scorer = agent, greedy_agent, scorer
        self.model, self.engine, self.autocast, self.merge_lora = model, engine, autocast, merge_lora
        self._merged: int | None = None  # weights the last rollout sampled merged (rollout/lora_merged)
        self._usage = accuracy_usage(scorer)

    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]:
        """The rollouts of a step (training.rollout.temperature), or with `greedy` the held-out evaluation's."""
        import torch

        if self.engine is None:  # the learner samples itself; a vLLM engine leaves the learner's model alone (it may be
            self.model.eval()    # updating in another thread: training/rollouts/pipeline.py)
        agent = self.greedy_agent if greedy else self.agent
        # autocast is the learner's; the vLLM engine computes in its own dtype (searcher.vllm.dtype)
        with contextlib.ExitStack() as ctx:
            ctx.enter_context(torch.no_grad())
            if self.engine is None:
                self._merged = self_sampling(ctx, self.model, self.autocast, self.merge_lora)
            return list(agent.search([e.question for e in examples]))

    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch:
        return run_sync(self.scorer.score(results, examples))

    def sync(self) -> float | None:
        """The learner's weights into the vLLM engine (None without one: the learner samples itself)."""
        if self.engine is None:
            return None
        from training.learn.weight_sync import learner_weights

        t0 = time.perf_counter()
        self.engine.load_weights(learner_weights(self.model))
        return time.perf_counter() - t0

    def step_stats(self) -> dict[str, float]:
        now = accuracy_usage(self.scorer)
        row = usage_row(self._usage, now)
        self._usage = now
        if self._merged is not None:  # 0: merge_lora on, but nothing merged (no LoRA, or the copies did not fit)
            row["rollout/lora_merged"] = float(self._merged)
        return row

    def close(self) -> None:
        return None
