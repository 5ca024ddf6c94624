"""One RL step's batch, from its rollouts to its update rows and its metrics row: the pieces S3Trainer's loop
(training/run/trainer.py) calls, each a function of its inputs (no trainer inside, so a test calls them without models):

    RolloutBatch / ScoredBatch     a step's rollouts and its rewards, as training/rollouts/pipeline.py carries them (and a
                                   checkpoint keeps them)
    measured_batch(...)            a step's rollouts and what is measured of them then: search/ behaviour and, for
                                   vLLM rollouts under the confidence-gated reward, the learner's log-probs where the
                                   engine's are too far from them (confidence_logprobs)
    update_rows(tc, results, ...)  the rows of scored rollouts that enter the update, with their GRPO advantages
    rl_row(batch, scored, ...)     the step's metrics row (reward/, search/, rollout/, the loop's charts/)
    timeline_row(...) / sync_row   RUN_DIR/timeline.jsonl's row of a step; charts/weight_sync_*
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eval.behavior import rollout_row
from s3core.types import QAExample, SearchResult
from training.config import TrainingConfig
from training.learn.api import Batch, MicroBatch, UpdateRows, token_chunks
from training.rewards import RewardBatch

__all__ = [
    "RolloutBatch",
    "ScoredBatch",
    "confidence_logprobs",
    "measured_batch",
    "micro_chunks",
    "over_budget_note",
    "rl_row",
    "row_lengths",
    "sync_row",
    "timeline_row",
    "update_rows",
]

Pad = Callable[[list[SearchResult], list[int]], Batch]  # (results, rows) -> their padded batch (S3Trainer._pad)


@dataclass
class RolloutBatch:
    """One step's rollouts, as the pipeline carries (and a checkpoint keeps) them: the data order's question indices,
    the group_size rollouts of each, and what was measured of them when they were made."""

    idx: list[int]
    results: list[SearchResult]
    behaviour: dict[str, float]  # eval/behavior.py's rollout_row (search/ keys), probed with the retriever then
    conf_stats: dict[str, float]  # rollout/confidence_from_learner (confidence-gated reward on vLLM rollouts)


@dataclass
class ScoredBatch:
    """One step's rewards and the generator usage its reward calls made (executor.step_stats() right after them)."""

    reward: RewardBatch
    usage: dict[str, float]


def measured_batch(tc: TrainingConfig, idx: list[int], examples: list[QAExample], results: list[SearchResult], *,
                   max_turns: int, probe: Callable[[list[str]], list[list[str]]], pad: Pad,
                   logprobs: Callable[[Batch], Any]) -> RolloutBatch:
    """A step's rollouts (`results`, of `examples`: the questions `idx`, group_size times each) with what is measured
    of them when they are made: under the confidence-gated reward on vLLM rollouts the learner's log-probs where the
    engine's are too far (`confidence_logprobs`), then eval/behavior.py's search/ row (`probe`: the retriever's ids
    for one more search of each query)."""
    conf: dict[str, float] = {}
    if tc.reward == "confidence_gated" and tc.rollout.engine == "vllm":
        conf = confidence_logprobs(tc, results, pad, logprobs)
    behaviour = rollout_row(results, [e.supporting_ids for e in examples], max_turns, probe=probe)
    return RolloutBatch(idx, results, behaviour, conf)


def confidence_logprobs(tc: TrainingConfig, results: list[SearchResult], pad: Pad,
                        logprobs: Callable[[Batch], Any]) -> dict[str, float]:
    """vLLM rollouts under the confidence-gated reward: a trajectory whose vLLM log-probs are further than
    training.rollout.logprob_gap_tolerance (mean |gap| per policy token) from the learner's recomputation (`logprobs`,
    the learner's) feeds the confidence C(T) the learner's log-probs instead (written into its trajectory)."""
    rows = [i for i, r in enumerate(results) if r.trajectory is not None and any(r.trajectory.mask)]
    replaced = 0
    for chunk in micro_chunks(tc, results, rows):
        batch = pad(results, chunk)
        lp = logprobs(batch).float()  # (B, T) over the shifted positions from batch.start
        for j, i in enumerate(chunk):
            tr = results[i].trajectory
            assert tr is not None
            m = batch.loss_mask[j]
            gap = float(((lp[j] - batch.rollout_lp[j]).abs() * m).sum() / m.sum().clamp(min=1))
            if gap <= tc.rollout.logprob_gap_tolerance:
                continue
            # response token k sits at shifted position len(prompt) - 1 + k, i.e. column that - start
            off = len(tr.prompt_ids) - 1 - batch.start
            own = lp[j, off : off + len(tr.response_ids)].tolist()
            tr.logprobs = [lj if mk else old for lj, mk, old in zip(own, tr.mask, tr.logprobs, strict=True)]
            replaced += 1
    return {"rollout/confidence_from_learner": float(replaced)}


def update_rows(tc: TrainingConfig, results: list[SearchResult], rewards: list[float | None], pad: Pad,
                credits: list[list[float] | None] | None = None) -> tuple[UpdateRows | None, dict[str, float]]:
    """The rows of scored rollouts that enter an update (consecutive group_size rows = one question) with their GRPO
    advantages (or PPO's rewards: the learner's critic turns them into advantages), padded by `pad`; and the stats of
    the choice (reward/flat_groups). Samples whose reward is None (or, in GRPO, whose group has < 2 scored members,
    or with training.update.drop_flat_groups a group whose rewards are all equal) and rollouts without policy tokens
    leave the update; None when no row is left. With training.update.turn_credit, `credits` (RewardBatch.turn_credits)
    add each reply's credit advantage to its tokens (`turn_rows`)."""
    from training.learn.advantages import sequence_advantages  # torch: imported when an update runs

    adv, stats = sequence_advantages(tc, results, rewards)
    tokens = {i: float(sum(r.trajectory.mask)) for i, r in enumerate(results) if r.trajectory is not None}
    rows = [i for i in range(len(results)) if adv[i] is not None and tokens.get(i, 0.0) > 0]
    if not rows:
        return None, stats
    turns: list[list[float] | None] | None = None
    if tc.algorithm == "grpo" and tc.update.turn_credit and credits is not None:
        turns, turn_stats = turn_rows(results, credits, tc.rollout.group_size)
        stats.update(turn_stats)

    def micro(b: list[int]) -> MicroBatch:
        if tc.algorithm == "grpo":
            batch = pad(results, b)
            turn_adv = None
            if turns is not None:
                from training.learn.advantages import turn_advantage_tokens

                turn_adv = turn_advantage_tokens(batch.loss_mask.cpu(), [turns[i] for i in b], tc.update.turn_credit)
            return MicroBatch(batch, adv=[float(adv[i] or 0.0) for i in b], turn_adv=turn_adv)
        return MicroBatch(pad(results, b), rewards=[float(rewards[i] or 0.0) for i in b])

    lengths = row_lengths(results, rows)
    return UpdateRows(rows, [tokens[i] for i in rows], micro, tc.learner.micro_batch_size, lengths=lengths,
                      max_tokens=tc.learner.max_tokens_per_micro_batch), stats


def row_lengths(results: list[SearchResult], rows: list[int]) -> list[int]:
    """Each row's tokens, prompt included (what a padded micro-batch holds of it): the token budget's measure."""
    out = []
    for i in rows:
        tr = results[i].trajectory
        out.append(0 if tr is None else len(tr.prompt_ids) + len(tr.response_ids))
    return out


def micro_chunks(tc: TrainingConfig, results: list[SearchResult], rows: list[int]) -> list[list[int]]:
    """`rows` cut into the learner's micro-batches (training.learner.micro_batch_size rows and
    max_tokens_per_micro_batch padded tokens at most; training/learn/api.py `token_chunks`)."""
    return token_chunks(rows, row_lengths(results, rows), tc.learner.micro_batch_size,
                        tc.learner.max_tokens_per_micro_batch)


def over_budget_note(rows: UpdateRows) -> str | None:
    """The log line for an update whose rows longer than the token budget went alone into their micro-batches, None
    when none did."""
    alone, longest = rows.over_budget()
    if not alone:
        return None
    return (f"train: {alone} row(s) longer than training.learner.max_tokens_per_micro_batch = {rows.max_tokens} went "
            f"alone into their micro-batches (the longest: {longest} tokens)")


def turn_rows(results: list[SearchResult], credits: list[list[float] | None],
              group_size: int) -> tuple[list[list[float] | None], dict[str, float]]:
    """Each rollout's per-reply credit advantages (training/learn/advantages.py `turn_advantages`), None for a rollout
    whose replies do not match its trajectory's policy spans one to one (it keeps its sequence advantage alone), and
    the stats: reward/turn_credit_mean (credit per rollout) and reward/turn_credit_unaligned (rollouts left without)."""
    from training.learn.advantages import reply_spans, turn_advantages

    aligned: list[list[float] | None] = []
    for r, c in zip(results, credits, strict=True):
        ok = c is not None and r.trajectory is not None and len(reply_spans(r.trajectory.mask)) == len(c)
        aligned.append(c if ok else None)
    scored = [sum(c) for c in aligned if c is not None]
    stats = {"reward/turn_credit_mean": sum(scored) / len(scored) if scored else float("nan"),
             "reward/turn_credit_unaligned": float(sum(c is not None and a is None for c, a in zip(credits, aligned, strict=True)))}
    return turn_advantages(aligned, group_size), stats


def rl_row(batch: RolloutBatch, scored: ScoredBatch, *, samples_in_update: int, loop: dict[str, float],
           sync: dict[str, float], stats: dict[str, float]) -> dict[str, float]:
    """The metrics row of an RL step: the batch's reward/ and search/ keys, then the loop's own (`loop`: data/ and
    charts/ keys, staleness; `sync`: sync_row's), the batch's rollout/ and search/ behaviour keys and generator usage,
    the accuracies, and the update's `stats`, in that order (a later key wins)."""
    results, rewards = batch.results, scored.reward.rewards
    scored_r = [r for r in rewards if r is not None]
    turns = [r.turns for r in results]
    steps_n = sum(len([s for s in r.steps if s.turn > 0]) for r in results)
    invalid = sum(1 for r in results for s in r.steps if s.turn > 0 and s.invalid_reason)
    row: dict[str, float] = {
        "reward/mean": sum(scored_r) / len(scored_r) if scored_r else float("nan"),
        "reward/max": max(scored_r) if scored_r else float("nan"),
        "reward/min": min(scored_r) if scored_r else float("nan"),
        "reward/missing": float(len(rewards) - len(scored_r)),
        "reward/samples_in_update": float(samples_in_update),
        "search/turns": sum(turns) / len(turns),
        "search/invalid_action_rate": invalid / steps_n if steps_n else 0.0,
        "search/docs": sum(len(r.documents) for r in results) / len(results),
        **loop,
    }
    row.update(sync)
    row.update(batch.conf_stats)
    row.update(batch.behaviour)
    row.update(scored.usage)
    rb = scored.reward
    if rb.acc_s3 is not None:
        a = [x for x in rb.acc_s3 if x is not None]
        row["reward/acc_s3"] = sum(a) / len(a) if a else float("nan")
    if rb.acc_rag is not None:
        row["reward/acc_rag"] = sum(x for x in rb.acc_rag if x is not None) / max(1, len(rb.acc_rag))
    for key, col in (("reward/gold_added", rb.gold_added), ("reward/other_added", rb.other_added)):
        if col is not None:
            vals = [x for x in col if x is not None]
            row[key] = sum(vals) / len(vals) if vals else float("nan")
    row.update(stats)
    return row


def timeline_row(step: int, batch_step: int, version: int, staleness: float, times: dict[str, float],
                 marks: tuple[float, float, float, float]) -> dict[str, Any]:
    """RUN_DIR/timeline.jsonl's row of update `step` (1-based) on batch `batch_step`, rolled out with the weights of
    `version` updates: its rollout and reward spans (`times`: the pipeline's Flight.times) and the loop's wait, update
    and sync spans (`marks`: the wall clock at the step's start, the update's start, its end, the sync's end)."""
    w0, w2, w3, w4 = marks
    return {
        "step": step, "batch": batch_step, "version": version, "staleness": staleness,
        "rollout": [times["rollout_start"], times["rollout_end"]],
        "reward": [times["reward_start"], times["reward_end"]],
        "wait": [w0, w2], "update": [w2, w3], "sync": [w3, w4],
    }


def sync_row(sync_s: float | None, step_s: float) -> dict[str, float]:
    """charts/weight_sync_* of a step (nothing when no rollout engine needs the weights)."""
    if sync_s is None:
        return {}
    return {"charts/weight_sync_s": sync_s, "charts/weight_sync_share": sync_s / max(step_s, 1e-9)}
