"""Budgets you can trust: a run's spend on paid LLM calls never passes its cap.

    budget = Budget(limit_usd=2.0, spent_usd=already_spent, setting="eval.budget_usd")
    require_known_prices({"generator": gen.client, "judge": judge.client}, "eval.budget_usd")  # before anything runs
    projected = project_calls(gen.client, gen_messages) + project_calls(judge.client, judge_messages)
    budget.check(projected, "batch 7 (16 questions)")   # raises BudgetReached before any of its calls is made
    ... the calls ...
    budget.spend(delta_usd)                               # what they really cost (LLMClient.usage() differences)

The check happens before a unit of work (an evaluation batch, a training step) whose every paid call is known:
prompt tokens are measured (s3core.pricing.count_prompt_tokens), completions are counted at their max_tokens bound,
answers the response cache holds cost nothing, and everything already spent, reserved by calls in flight, or spent
by other workers of the same run (the step's calls are projected as a whole, wherever they run) is counted. So a
run stops with its rows or its checkpoint written, before the call that would pass the cap, never mid-write; the
same command with a higher cap resumes it.

A remote model whose price is unknown (neither litellm's cost map nor the section's `input_cost_per_mtok` /
`output_cost_per_mtok`) makes a budgeted run refuse to start, naming the settings to add.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from generator_adapters.client import USAGE_FIELDS, LLMClient
from s3core.errors import ConfigError, S3Error

__all__ = ["BUDGET_EXIT_CODE", "Budget", "BudgetReached", "project_calls", "require_known_prices", "usage_delta"]

BUDGET_EXIT_CODE = 3  # `s3 eval` / `s3 train` stopped by their budget: resumable, not an error


class BudgetReached(S3Error):
    """The next unit of work would pass the budget; nothing of it was started. Carries the figures."""

    code = "budget_reached"

    def __init__(self, message: str, *, limit_usd: float, spent_usd: float, projected_usd: float) -> None:
        super().__init__(message)
        self.limit_usd, self.spent_usd, self.projected_usd = limit_usd, spent_usd, projected_usd


class Budget:
    """A cap in dollars, what was spent, and what calls in flight have reserved (thread-safe)."""

    def __init__(self, limit_usd: float | None, spent_usd: float = 0.0, setting: str = "budget_usd") -> None:
        if limit_usd is not None and limit_usd < 0:
            raise ConfigError(f"{setting} must be >= 0, got {limit_usd}")
        self.limit_usd = limit_usd
        self.spent_usd = float(spent_usd)
        self.reserved_usd = 0.0
        self.setting = setting
        self._lock = threading.Lock()

    @property
    def remaining_usd(self) -> float | None:
        if self.limit_usd is None:
            return None
        with self._lock:
            return self.limit_usd - self.spent_usd - self.reserved_usd

    def fits(self, projected_usd: float) -> bool:
        """Whether `projected_usd` more stays within the cap (always, without one)."""
        if self.limit_usd is None:
            return True
        with self._lock:
            return self.spent_usd + self.reserved_usd + projected_usd <= self.limit_usd + 1e-12

    def check(self, projected_usd: float, what: str) -> None:
        """Raise BudgetReached when `what` (costing at most `projected_usd`) would pass the cap."""
        if self.fits(projected_usd):
            return
        raise self.stop(projected_usd, what)

    def stop(self, projected_usd: float, what: str) -> BudgetReached:
        """The BudgetReached for `what` (costing at most `projected_usd` by itself), with the spend as it is NOW: build
        it after the work before `what` has been paid for, so the message says what was really spent.

        >>> b = Budget(0.01, spent_usd=0.007132, setting="eval.budget_usd")
        >>> print(b.stop(0.0031, "question 'q7'"))
        budget reached: question 'q7' would cost up to $0.003100, and $0.007132 of the $0.010000 budget (eval.budget_usd) is spent; raise it to resume
        """
        assert self.limit_usd is not None
        with self._lock:
            spent, reserved = self.spent_usd, self.reserved_usd
        held = f" (${reserved:.6f} more held by calls in flight)" if reserved > 0 else ""
        return BudgetReached(
            f"budget reached: {what} would cost up to ${projected_usd:.6f}, and ${spent:.6f} of the "
            f"${self.limit_usd:.6f} budget ({self.setting}) is spent{held}; raise it to resume",
            limit_usd=self.limit_usd, spent_usd=spent, projected_usd=projected_usd,
        )

    def reserve(self, usd: float) -> None:
        """Hold `usd` for calls about to start (counted by `fits` until `settle`)."""
        with self._lock:
            self.reserved_usd += usd

    def settle(self, reserved_usd: float, spent_usd: float) -> None:
        """Calls that held `reserved_usd` finished having cost `spent_usd`."""
        with self._lock:
            self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
            self.spent_usd += spent_usd

    def spend(self, usd: float) -> None:
        self.settle(0.0, usd)


def project_calls(client: LLMClient, batch: Sequence[list[dict[str, Any]]]) -> float:
    """The most `batch` can cost on `client` (measured prompts, completions at max_tokens, cache hits free). A model
    of unknown price is refused before a budgeted run starts (`require_known_prices`), so None here is a bug."""
    usd = client.project(batch)
    if usd is None:
        raise ConfigError(f"the price of {client.cfg.model!r} is unknown (litellm's cost map does not list it), so a "
                          "budget cannot be kept: set its section's input_cost_per_mtok and output_cost_per_mtok")
    return usd


def require_known_prices(clients: Mapping[str, LLMClient | None], budget_setting: str) -> None:
    """Refuse to start a budgeted run that calls a model of unknown price; the message names the settings to add."""
    for section, client in clients.items():
        if client is None or client.price is not None:
            continue
        raise ConfigError(
            f"{budget_setting} is set but the price of {section}.model = {client.cfg.model!r} is unknown (litellm's "
            f"cost map does not list it): set {section}.input_cost_per_mtok and {section}.output_cost_per_mtok "
            f"(dollars per million tokens; 0 for a self-hosted server)"
        )


def usage_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What happened between two LLMClient.usage() snapshots.

    >>> usage_delta({"cost_usd": 1.0, "paid_calls": 2}, {"cost_usd": 1.5, "paid_calls": 6})["paid_calls"]
    4.0
    """
    return {k: float(after.get(k, 0.0)) - float(before.get(k, 0.0)) for k in USAGE_FIELDS}


def add_usage(*parts: Mapping[str, float]) -> dict[str, float]:
    """The field-wise sum of usage dicts (generator + judge, or several workers)."""
    out = dict.fromkeys(USAGE_FIELDS, 0.0)
    for p in parts:
        for k in USAGE_FIELDS:
            out[k] += float(p.get(k, 0.0))
    return out
