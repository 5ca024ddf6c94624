"""`s3 train --dry-run`: what a training run would spend on paid calls, projected without one.

`dry_run` projects the whole run without one paid call. A resumed run projects each remaining RL step at the mean
cost its measured steps had. A fresh run rolls out its first RL step (the policy's own rollouts: no paid call) and
prices what those rollouts would ask the generator — the documents the searcher really gathered, a group's identical
contexts once (the second is the response cache's), answers already in the cache free — and projects every RL step at
that price; the held-out evaluations are priced with naive RAG's top-k. Completions are counted at max_tokens, so a
projection stays an upper estimate of the answers' length. A reward that calls no generator (training/rewards.py
NO_GENERATOR_REWARDS; search_r1 mode) counts 0 generator calls and says why (`dry_run_message`).

Before any of it, building the parts estimated a step's learner memory from the model's shape, the token budget and
the longest trajectory the searcher allows, and refused a run that would not fit (training/learn/memory.py, through
training/run/build.py `step_memory`); the estimate is reported with the projection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.accuracy import Accuracy
from s3core.types import QAExample
from training.learn.memory import GB
from training.rollouts.budget import BudgetedExecutor, no_generator_reason, projection_accuracy, spent_before
from training.run.build import TrainingParts
from training.run.rng import capture_rng, restore_rng
from training.run.schedule import DataOrder, HeldoutSchedule, in_groups
from training.rundir import metrics_rows

__all__ = ["dry_run", "dry_run_message", "measured_step_costs"]


def dry_run(parts: TrainingParts, start: int) -> dict[str, Any]:
    """The projected spend of the run's steps from `start` on (see the module docstring), without a paid call: its
    executor (priced, when a BudgetedExecutor), retriever, questions and run directory; no trainer."""
    ex, cfg, run_dir = parts.executor, parts.cfg, Path(parts.run_dir)
    acc: Accuracy | None = ex.accuracy if isinstance(ex, BudgetedExecutor) else projection_accuracy(cfg, ex)
    tc = cfg.training
    k = cfg.retriever.k
    spent = spent_before(run_dir, start)

    def price(examples: list[QAExample], docs: list[list[Any]] | None = None) -> float:
        if acc is None or not examples:
            return 0.0
        if docs is None:
            docs = parts.retriever.search([e.question for e in examples], k)
        return float(sum(acc.project([e.question for e in examples], docs, [e.golden_answers for e in examples])))

    rl_steps = [s for s in range(start, tc.total_steps) if s >= tc.sft.steps]
    measured = measured_step_costs(run_dir, start)
    if measured:
        per_step, basis = sum(measured) / len(measured), f"the mean of {len(measured)} measured steps"
    elif rl_steps and acc is not None:
        per_step = price(*_unique_contexts(parts, rl_steps[0]))
        basis = (f"the rollouts of step {rl_steps[0] + 1} (the policy's own, no paid call; a group's identical "
                 "contexts priced once)")
    else:
        per_step, basis = 0.0, "no paid reward call"
    no_generator = no_generator_reason(cfg)
    per_rollout = 0 if no_generator is not None else 1  # a reward that calls no generator asks nothing of it
    total, calls = per_step * len(rl_steps), per_rollout * len(rl_steps) * tc.rollout.batch_size * tc.rollout.group_size
    schedule = HeldoutSchedule.of(tc, len(parts.heldout))
    for step in range(start, tc.total_steps):
        if schedule.due(step + 1):
            total += price(list(parts.heldout))
            calls += per_rollout * len(parts.heldout)
    memory = getattr(parts, "memory", None)  # training/learn/memory.py: estimated, checked when the parts were built
    return {"steps": len(rl_steps), "reward_calls": calls, "projected_usd": total, "spent_usd": spent, "basis": basis,
            "per_step_usd": per_step, "no_generator": no_generator,
            "budget_usd": ex.budget.limit_usd if isinstance(ex, BudgetedExecutor) else None,
            "step_memory_gb": None if memory is None else memory.total / GB,
            "step_memory": None if memory is None else memory.describe()}


def dry_run_message(d: dict[str, Any]) -> str:
    """`s3 train --dry-run`'s line for `dry_run`'s answer: the generator calls and their projected price, or why the
    reward makes none."""
    budget = d["budget_usd"]
    tail = f"${d['spent_usd']:.6f} already spent" + (f"; budget ${budget:.6f}" if budget is not None else "")
    memory = f"\ndry run: a step's learner memory ~{d['step_memory']}" if d.get("step_memory") else ""
    if d.get("no_generator"):
        return (f"dry run: {d['steps']} RL steps to run, 0 generator calls: {d['no_generator']} (nothing to pay); "
                f"{tail}; no paid API was called{memory}")
    return (f"dry run: {d['steps']} RL steps to run, {d['reward_calls']} reward calls: projected "
            f"${d['projected_usd']:.6f} (from {d['basis']}; prompts measured, completions at max_tokens); "
            f"{tail}; no paid API was called{memory}")


def _unique_contexts(parts: TrainingParts, step: int) -> tuple[list[QAExample], list[list[Any]]]:
    """The questions and documents the generator would be asked about in `step`: the step's rollouts (batch x group),
    each (question, documents) once."""
    idx = DataOrder.of(parts.cfg.training, parts.examples, parts.sft_pool).batch_indices(step)
    examples = in_groups(parts.examples, idx, parts.cfg.training.rollout.group_size)
    rng = capture_rng()
    try:
        results = parts.executor.rollout(examples, step)
    finally:
        restore_rng(rng)  # the run that follows samples what it would have without the dry run
    unique: dict[tuple[str, tuple[str, ...]], tuple[QAExample, list[Any]]] = {}
    for e, r in zip(examples, results, strict=True):
        unique.setdefault((e.id, tuple(d.id for d in r.documents)), (e, list(r.documents)))
    return [e for e, _ in unique.values()], [d for _, d in unique.values()]


def measured_step_costs(run_dir: Path, step: int) -> list[float]:
    """`cost/usd_step` of the RL steps already run (a resumed run's dry run projects from what steps really cost)."""
    return [float(r["cost/usd_step"]) for r in metrics_rows(run_dir)
            if isinstance(r.get("cost/usd_step"), int | float) and "reward/mean" in r and int(r["step"]) <= step]
