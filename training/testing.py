"""Fakes of training's parts for tests and benchmarks, beside the code they stand in for (as
generator_adapters/testing.py is for its package).

    inner = PricedExecutor(cost_usd=0.25, stats={"reward/prompt_tokens": 100.0})
    ex = BudgetedExecutor(inner, cfg, run_dir, budget_usd=1.0)   # training/rollouts/budget.py over it
    ex.score([], [])                                            # inner.scored == 1; ex.step_stats()["cost/usd_step"]
"""

from __future__ import annotations

from collections.abc import Callable

from s3core.types import QAExample, SearchResult
from training.rewards import RewardBatch

__all__ = ["PricedExecutor"]


class PricedExecutor:
    """A StepExecutor (training/rollouts/executors.py) whose rollouts are empty and whose every scoring reports, at the
    next `step_stats`, `cost_usd` as reward/cost_usd plus `stats`: what a budget sees of a priced reward. `scored`
    counts the scorings; `before_score` (if given) runs at the start of each (a test's look at the budget then)."""

    def __init__(self, cost_usd: float = 0.25, stats: dict[str, float] | None = None,
                 before_score: Callable[[], None] | None = None) -> None:
        self.cost_usd = cost_usd
        self.stats = dict(stats or {})
        self.before_score = before_score
        self.pending: dict[str, float] = {}
        self.scored = 0

    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]:
        return []

    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch:
        if self.before_score is not None:
            self.before_score()
        self.scored += 1
        self.pending = {"reward/cost_usd": self.cost_usd, **self.stats}
        return RewardBatch(rewards=[])

    def step_stats(self) -> dict[str, float]:
        out, self.pending = self.pending, {}
        return out

    def sync(self) -> float | None:
        return None

    def close(self) -> None:
        return None
