"""What a training run spends on paid calls, and its cap (`training.budget_usd` / `s3 train --max-cost-usd`).

    executor = BudgetedExecutor(inner, cfg, run_dir, start_step=resumed_step, budget_usd=2.0)
    results = executor.rollout(examples, step)  # the step the reward calls that follow belong to
    batch = executor.score(results, examples)   # BudgetReached before any of the step's calls when they could pass it
    row.update(executor.step_stats())            # cost/usd_step, cost/usd_total, tokens, cache hits, dollars saved

The step's reward calls (the frozen generator on each rollout's documents, and a judge call on each answer) are
projected on the trainer's side before they are made, wherever they then run (here or on Ray reward workers): prompts
measured, completions at max_tokens, answers in the response cache free. A step that could pass the cap is not
started (with asynchronous RL, the batch being admitted for scoring, whatever steps are in flight): the trainer stops with the checkpoint of the step before (`S3Trainer.train`), and the same command with a
higher cap resumes it from there. `cost/usd_total` is carried over a resume from metrics.jsonl (read through
training/rundir.py).

The whole run's projection without a paid call (`s3 train --dry-run`) is training/report/dryrun.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.accuracy import Accuracy
from generator_adapters.budget import Budget, BudgetReached, require_known_prices
from s3core.types import QAExample, SearchResult
from training.config import TrainSettings
from training.rewards import RewardBatch, reward_spec
from training.rollouts.executors import GAUGE_METRICS, StepExecutor
from training.rundir import metrics_rows

__all__ = ["BudgetReached", "BudgetedExecutor", "no_generator_reason", "paid_reward", "projection_accuracy",
           "spent_before"]

COST_METRICS = ("cost/usd_step", "cost/usd_total")


def paid_reward(cfg: TrainSettings) -> bool:
    """Whether the configured reward calls the frozen generator (and the judge): its registry entry says, in s3 mode
    (search_r1 mode never calls it)."""
    tc = cfg.training
    return reward_spec(tc.reward).calls_generator(tc.mode)


def no_generator_reason(cfg: TrainSettings) -> str | None:
    """Why the configured reward makes no generator (or judge) call, in words; None when it does (`paid_reward`)."""
    tc = cfg.training
    if tc.mode == "search_r1":
        return f"in search_r1 mode the reward '{tc.reward}' scores the policy's own answers and calls no generator"
    if not paid_reward(cfg):
        return f"the reward '{tc.reward}' calls no generator"
    return None


def projection_accuracy(cfg: TrainSettings, inner: Any = None) -> Accuracy | None:
    """The Accuracy whose prompts and prices project the reward calls (it makes no call here): the reward's own when
    `inner` (the executor scoring in this process) holds one, so a run builds it once; else one built like it (Ray's
    reward workers hold theirs in other processes). None when the reward calls no generator."""
    if not paid_reward(cfg):
        return None
    own = getattr(getattr(inner, "scorer", None), "accuracy", None)
    if isinstance(own, Accuracy):
        return own
    from eval.build import build_accuracy

    gen = cfg.generator_resolved.model_copy(update={"processes": 1})
    return build_accuracy(gen, cfg.judge_resolved, cfg.eval)


def spent_before(run_dir: Path, step: int) -> float:
    """`cost/usd_total` of the last metrics row at or before `step` (what a resumed run had spent), else 0."""
    totals = [float(r["cost/usd_total"]) for r in metrics_rows(run_dir)
              if int(r["step"]) <= step and isinstance(r.get("cost/usd_total"), int | float)]
    return totals[-1] if totals else 0.0


class BudgetedExecutor:
    """A StepExecutor that prices and caps the reward calls of the one it wraps; everything else passes through."""

    def __init__(self, inner: StepExecutor, cfg: TrainSettings, run_dir: Path, *, start_step: int = 0,
                 budget_usd: float | None = None, setting: str = "training.budget_usd") -> None:
        self.inner = inner
        self.run_dir = run_dir
        self.start_step = start_step  # a resumed run's step: what it had spent by then is in metrics.jsonl
        self._step = start_step  # the step of the last rollout (0-based): the one its reward calls belong to
        self.accuracy = projection_accuracy(cfg, inner)
        if budget_usd is not None and self.accuracy is not None:
            require_known_prices(self.accuracy.clients(), setting)
        self.budget = Budget(budget_usd, setting=setting)
        self._loaded = False
        self._pending: dict[str, float] = {}

    def _load(self) -> None:
        if not self._loaded:
            self.budget.spent_usd = spent_before(self.run_dir, self.start_step)
            self._loaded = True

    def _collect(self) -> float:
        """Move the inner executor's usage since its last report into pending; the dollars it spent."""
        row = self.inner.step_stats()
        for k, v in row.items():  # counts since the last report add up; gauges (worker counts) keep their last value
            self._pending[k] = v if k in GAUGE_METRICS else self._pending.get(k, 0.0) + v
        return float(row.get("reward/cost_usd", 0.0))

    def project(self, results: list[SearchResult], examples: list[QAExample]) -> float:
        """The most the reward calls of these rollouts can cost."""
        if self.accuracy is None:
            return 0.0
        return float(sum(self.accuracy.project([e.question for e in examples], [list(r.documents) for r in results],
                                               [e.golden_answers for e in examples])))

    # ------------------------------------------------------------------ StepExecutor
    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]:
        self._step = step
        return self.inner.rollout(examples, step, greedy)

    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch:
        """The inner executor's scoring of the rollouts of `step` (default: the last rollout's), started only when
        what is spent, plus what every batch being scored has reserved, plus these calls' projection fits the cap;
        their projection is held until they are settled. Asynchronous RL scores the batches in flight one after the
        other, on one thread (training/rollouts/pipeline.py), so the check before each is exact."""
        self._load()
        self.budget.spend(self._collect())  # anything spent outside score (nothing today) is counted too
        projected = self.project(results, examples)
        which = self._step if step is None else step
        self.budget.check(projected, f"step {which + 1} ({len(results)} rollouts to score)")
        self.budget.reserve(projected)
        spent = 0.0
        try:
            return self.inner.score(results, examples)
        finally:
            spent = self._collect()
            self.budget.settle(projected, spent)

    def sync(self) -> float | None:
        return self.inner.sync()

    def step_stats(self) -> dict[str, float]:
        self._load()
        self.budget.spend(self._collect())
        row, self._pending = self._pending, {}
        unknown = row.get("cost/unknown_price_calls", 0.0) > 0 or (
            self.accuracy is not None and any(c.price is None for c in self.accuracy.clients().values()))
        if not unknown:  # an unknown price leaves the dollars out (never 0); cost/unknown_price_calls says why
            row["cost/usd_step"] = row.get("reward/cost_usd", 0.0)
            row["cost/usd_total"] = self.budget.spent_usd
        if self.budget.limit_usd is not None:
            row["cost/budget_usd"] = self.budget.limit_usd
        return row

    def close(self) -> None:
        try:
            self.inner.close()
        finally:  # after the inner executor's work: it may be the reward's own Accuracy (closing twice is harmless)
            if self.accuracy is not None:
                self.accuracy.close()

    def __getattr__(self, name: str) -> Any:  # executor-specific extras (Ray worker stats, ...)
        if name == "inner":  # not set yet (a half-built object): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
