"""Advantages: how good each sampled rollout (GRPO, per sequence) or each policy token (PPO) was, relative to a
baseline. The one place an advantage is estimated; the losses (training/learn/algorithms.py) take them as given.

    adv, stats = sequence_advantages(tc, results, rewards)   # GRPO: group baseline, format term, flat groups dropped
    adv_t, returns = token_advantages(tc, rewards, values, mask)   # PPO: GAE over the policy tokens (the critic's)

- GRPO (Shao et al. 2024): the group-normalised outcome rewards (r - mean_group) / (std_group + eps), consecutive
  `group_size` rows sharing a question (`group_advantages_missing`; training.update.advantage_scale = 'none': not
  divided by the std, Dr. GRPO); a format term (training.invalid_penalty) kept at its own scale
  (`group_advantages_format_centred`, training.format_advantage); with training.update.drop_flat_groups a group whose
  rewards are all equal (`flat_groups`) leaves the update. None = the row leaves the update.
- PPO (Schulman et al. 2017; s3 paper §3.3): the sequence reward on its last policy token (`token_rewards`), GAE over
  policy tokens only with gamma = gae_lambda = 1 by default (`gae_advantages`).
- Per-reply credit (GRPO, training.update.turn_credit; issue 60 build step 4): each reply's retrieval credit
  (training/rewards.py `turn_credits`) as reward-to-go, less the group's mean reward-to-go at the same reply
  (`turn_advantages`), added x turn_credit to the sequence advantage on that reply's tokens (`reply_spans`,
  `turn_advantage_tokens`). A reply is then credited with the gold its selection admits and the gold later replies
  admit from the windows its query opened, apart from the rest of the trajectory: the turn-level credit of IGPO /
  StepSearch, from gold labels the training data carries rather than a learned critic.

A new estimator is a function here, chosen in `sequence_advantages` (or `token_advantages`) from its setting in
training/config.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import accumulate

import torch
from torch import Tensor

from s3core.types import SearchResult
from training.config import TrainingConfig
from training.rewards import format_terms

__all__ = ["flat_groups", "format_only_groups", "gae_advantages", "group_advantages_format_centred",
           "group_advantages_missing", "grpo_advantages", "reply_spans", "sequence_advantages", "token_advantages",
           "token_rewards", "turn_advantage_tokens", "turn_advantages"]


def sequence_advantages(tc: TrainingConfig, results: Sequence[SearchResult],
                        rewards: list[float | None]) -> tuple[list[float | None], dict[str, float]]:
    """Each scored rollout's sequence advantage for the update (None: the row leaves it) and the stats of the choice
    (reward/format_only_groups, reward/flat_groups). GRPO: `grpo_advantages`, then, with
    training.update.drop_flat_groups, the flat groups set to None. PPO: 0.0 for every scored row (the learner's
    critic turns its reward into token advantages: `token_advantages`)."""
    if tc.algorithm != "grpo":
        return [None if r is None else 0.0 for r in rewards], {}
    group = tc.rollout.group_size
    adv, stats = grpo_advantages(rewards, results, group, tc.invalid_penalty, tc.format_advantage,
                                 tc.update.advantage_scale)
    if tc.update.drop_flat_groups:
        flat = flat_groups(rewards, group)
        for g in flat:
            adv[g : g + group] = [None] * group
        stats["reward/flat_groups"] = float(len(flat))
    return adv, stats


def token_advantages(tc: TrainingConfig, rewards: Tensor, values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """PPO's token advantages and returns, both (B, T), from the sequence rewards (B,), the critic's values before
    the update (B, T) and the policy-token mask (B, T): GAE with training.update.gamma / gae_lambda, no gradient."""
    with torch.no_grad():
        return gae_advantages(token_rewards(rewards, mask), values, mask, tc.update.gamma, tc.update.gae_lambda)


def grpo_advantages(rewards: list[float | None], results: Sequence[SearchResult], group_size: int,
                    invalid_penalty: float, format_advantage: str = "centred",
                    scale: str = "group_std") -> tuple[list[float | None], dict[str, float]]:
    """GRPO's sequence advantages of scored rollouts (consecutive `group_size` rows = one question), and the count
    of format-only groups (task rewards all equal, rewards not: reward/format_only_groups, logged when a format term
    is on). `format_advantage` (training.format_advantage): 'centred' keeps the format term (`invalid_penalty`) at its
    own scale, so it can never outweigh the task reward (`group_advantages_format_centred` below); 'normalised'
    normalises reward + format term together (attempts 1-2).
    `scale` (training.update.advantage_scale): 'group_std' divides by the group's std, 'none' does not (Dr. GRPO).

    >>> from s3core.types import SearchStep
    >>> from training.rewards import invalid_fraction, penalize_invalid
    >>> ok, bad = SearchStep(turn=1), SearchStep(turn=1, invalid_reason="no action")
    >>> rs = [SearchResult(question="q", steps=s) for s in ([ok, ok], [ok, bad], [ok, ok], [ok, ok])]
    >>> adv, stats = grpo_advantages(penalize_invalid([1.0, 1.0, 1.0, 1.0], [invalid_fraction(r) for r in rs], 0.5),
    ...                              rs, 4, 0.5)
    >>> [round(a, 4) for a in adv], stats  # one rollout's invalid turn, nothing else differs: small advantages
    ([0.0625, -0.1875, 0.0625, 0.0625], {'reward/format_only_groups': 1.0})
    """
    if format_advantage not in ("centred", "normalised"):
        raise ValueError(f"format_advantage must be 'centred' or 'normalised', got {format_advantage!r}")
    if not invalid_penalty:
        return group_advantages_missing(rewards, group_size, scale=scale), {}
    terms = format_terms(results, invalid_penalty)
    stats = {"reward/format_only_groups": float(len(format_only_groups(rewards, terms, group_size)))}
    if format_advantage == "normalised":
        return group_advantages_missing(rewards, group_size, scale=scale), stats
    return group_advantages_format_centred(rewards, terms, group_size, scale=scale), stats


def group_advantages_missing(rewards: list[float | None], group_size: int, eps: float = 1e-6,
                             scale: str = "group_std") -> list[float | None]:
    """GRPO outcome advantages: (r - mean_group) / (std_group + eps), std the unbiased sample std (as in TRL / verl);
    consecutive `group_size` entries share a question, and a group of identical rewards gets advantage 0. Missing
    rewards (None = a failed generator call): each group is normalised over its scored members only; a missing sample,
    and every member of a group with fewer than two scored members, gets None and leaves the update.
    `scale` (training.update.advantage_scale): 'group_std' as above; 'none' = r - mean_group, not divided by the
    group's std (Dr. GRPO, Liu et al. 2025): a group whose rewards differ by 0.25 then moves the policy a quarter as
    far as one whose rewards differ by 1, where the std makes both full size.

    >>> group_advantages_missing([1.0, 0.0, None, 2.0, None, None], 3, eps=0.0)
    [0.7071067811865475, -0.7071067811865475, None, None, None, None]
    >>> group_advantages_missing([0.0, -0.25, 1.0, -0.25], 2, scale="none")  # a 0.25 gap stays 0.25
    [0.125, -0.125, 0.625, -0.625]
    >>> group_advantages_missing([0.0, -0.25, 1.0, -0.25], 2, eps=0.0)  # normalised: both groups full size
    [0.7071067811865475, -0.7071067811865475, 0.7071067811865475, -0.7071067811865475]
    """
    if scale not in ("group_std", "none"):
        raise ValueError(f"advantage scale must be 'group_std' or 'none', got {scale!r}")
    if len(rewards) % group_size != 0:
        raise ValueError(f"{len(rewards)} rewards is not a multiple of group_size={group_size}")
    out: list[float | None] = [None] * len(rewards)
    for g in range(0, len(rewards), group_size):
        idx = [i for i in range(g, g + group_size) if rewards[i] is not None]
        if len(idx) < 2:
            continue
        vals = torch.tensor([float(rewards[i]) for i in idx], dtype=torch.float64)  # type: ignore[arg-type]
        adv = vals - vals.mean()
        if scale == "group_std":
            adv = adv / (vals.std() + eps)
        for i, a in zip(idx, adv.tolist(), strict=True):
            out[i] = a
    return out


def group_advantages_format_centred(rewards: list[float | None], format_terms: list[float], group_size: int,
                                    eps: float = 1e-6, scale: str = "group_std") -> list[float | None]:
    """GRPO advantages where a format term (`rewards` = task reward + format term, e.g. training.invalid_penalty's
    minus penalty x invalid-turn fraction) keeps its own scale: the task reward (reward - format term) is
    group-normalised as in `group_advantages_missing`, the format term is only centred on its group's mean, never
    divided by the group's std. A format term therefore moves an advantage by at most its own range within the group
    (<= the penalty), whatever the group: a group whose task rewards are all equal (format-only) gets advantages of
    that size, not the +-1.5 a correct answer earns; and where the task rewards differ, two members' task advantages
    differ by (their task-reward difference) / std >= 1.41 for two-level rewards, so a format term below that never
    reverses the task's order. Missing rewards (None) and groups with < 2 scored members: as in
    `group_advantages_missing`.

    >>> adv = group_advantages_format_centred([0.0, 0.0, 0.0, -0.25, 1.0, 0.0, 1.0, -0.5], [0.0, 0.0, 0.0, -0.25,
    ...                                       0.0, 0.0, 0.0, -0.5], 4)
    >>> [round(a, 3) for a in adv]  # group 1: format only; group 2: task 1, 0, 1, 0 and one invalid rollout
    [0.062, 0.062, 0.062, -0.188, 0.991, -0.741, 0.991, -1.241]
    >>> [round(a, 3) for a in group_advantages_missing([0.0, 0.0, 0.0, -0.25], 4)]  # normalised: full size
    [0.5, 0.5, 0.5, -1.5]
    """
    if len(format_terms) != len(rewards):
        raise ValueError(f"{len(format_terms)} format terms for {len(rewards)} rewards")
    # rounded: reward - term recovers the task reward up to float error, and a flat task group must stay exactly flat
    task: list[float | None] = [None if r is None else round(float(r) - f, 9) for r, f in zip(rewards, format_terms, strict=True)]
    out = group_advantages_missing(task, group_size, eps, scale)
    for g in range(0, len(rewards), group_size):
        idx = [i for i in range(g, g + group_size) if out[i] is not None]
        if not idx:
            continue
        mean_f = sum(format_terms[i] for i in idx) / len(idx)
        for i in idx:
            out[i] = float(out[i]) + (format_terms[i] - mean_f)  # type: ignore[arg-type]
    return out


def format_only_groups(rewards: list[float | None], format_terms: list[float], group_size: int) -> list[int]:
    """Start indices of the groups whose task rewards (reward - format term; two or more scored) are all equal while
    their rewards are not: the groups whose whole GRPO advantage comes from the format term (metric
    reward/format_only_groups). Under `group_advantages_missing` they get full-size advantages.

    >>> format_only_groups([0.0, -0.5, 1.0, 0.5, 0.0, 0.0], [0.0, -0.5, -0.5, 0.0, 0.0, 0.0], 2)
    [0]
    """
    if len(format_terms) != len(rewards):
        raise ValueError(f"{len(format_terms)} format terms for {len(rewards)} rewards")
    out = []
    for g in range(0, len(rewards), group_size):
        idx = [i for i in range(g, g + group_size) if rewards[i] is not None]
        if len(idx) < 2:
            continue
        task = {round(float(rewards[i]) - format_terms[i], 9) for i in idx}  # type: ignore[arg-type]
        total = {float(rewards[i]) for i in idx}  # type: ignore[arg-type]
        if len(task) == 1 and len(total) > 1:
            out.append(g)
    return out


def flat_groups(rewards: list[float | None], group_size: int) -> list[int]:
    """Start indices of the groups whose scored rewards (two or more) are all equal: their GRPO advantages are all
    zero, so only the KL term would reach them (`training.update.drop_flat_groups` leaves them out of the update).

    >>> flat_groups([1.0, 1.0, 0.0, 1.0, None, 0.5, 0.5, 0.5], 4)
    [4]
    """
    if len(rewards) % group_size != 0:
        raise ValueError(f"{len(rewards)} rewards is not a multiple of group_size={group_size}")
    out = []
    for g in range(0, len(rewards), group_size):
        vals = [r for r in rewards[g : g + group_size] if r is not None]
        if len(vals) >= 2 and max(vals) - min(vals) == 0.0:
            out.append(g)
    return out


def token_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """Place each sequence's outcome reward on its last policy token. rewards: (B,), mask: (B, T) -> (B, T)."""
    B, T = mask.shape
    positions = torch.arange(T, device=mask.device).expand(B, T)  # (B, T)
    last = torch.where(mask.bool(), positions, torch.full_like(positions, -1)).max(dim=1).values  # (B,)
    out = torch.zeros(B, T, dtype=rewards.dtype, device=rewards.device)
    has = last >= 0
    out[has, last[has]] = rewards[has]
    return out


def gae_advantages(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, gae_lambda: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over POLICY tokens only (environment tokens are skipped: the next
    state of a policy token is the next policy token, as in verl's multi-turn `response_mask`).

    rewards, values, mask: (B, T). Returns (advantages, returns), both (B, T), zero where mask is 0.
    returns = advantages + values (the critic's regression target).
    """
    B, T = rewards.shape
    m = mask.to(values.dtype)
    advantages = torch.zeros_like(values)
    last_gae = torch.zeros(B, dtype=values.dtype, device=values.device)  # (B,)
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)  # (B,)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        gae_t = delta + gamma * gae_lambda * last_gae  # (B,)
        advantages[:, t] = gae_t * m[:, t]
        keep = m[:, t] > 0
        last_gae = torch.where(keep, gae_t, last_gae)
        next_value = torch.where(keep, values[:, t], next_value)
    returns = (advantages + values) * m
    return advantages, returns


def turn_advantages(credits: Sequence[Sequence[float] | None], group_size: int) -> list[list[float] | None]:
    """Each reply's credit advantage: its reward-to-go (its own credit plus every later reply's, gamma 1) less the mean
    reward-to-go at the same reply index over the group's members that reached it (consecutive `group_size` rows = one
    question; a baseline per index, so a rollout is not credited for having more replies than another). Not divided
    by a std: a gold paragraph stays worth 1. None rows (no credit) keep None; a reply index only one member reached
    gets 0.

    >>> turn_advantages([[0.0, 1.0, 0.0], [0.0, -0.25], None, [0.0, 0.0, 0.0]], 4)
    [[0.75, 0.75, 0.0], [-0.5, -0.5], None, [-0.25, -0.25, 0.0]]
    """
    if len(credits) % group_size != 0:
        raise ValueError(f"{len(credits)} credit rows is not a multiple of group_size={group_size}")
    togo = [None if c is None else list(accumulate(reversed(c)))[::-1] for c in credits]
    out: list[list[float] | None] = []
    for g in range(0, len(credits), group_size):
        group = togo[g : g + group_size]
        members = [t for t in group if t is not None]
        depth = max((len(t) for t in members), default=0)
        means = [statistics.fmean(t[k] for t in members if len(t) > k) for k in range(depth)]
        out += [None if t is None else [v - m for v, m in zip(t, means, strict=False)] for t in group]
    return out


def reply_spans(mask: Sequence[int] | Tensor) -> list[tuple[int, int]]:
    """The (start, end) of each run of policy tokens (1s) in a mask, in order: one per reply of the rollout.

    >>> reply_spans([0, 1, 1, 0, 0, 1, 0, 1])
    [(1, 3), (5, 6), (7, 8)]
    """
    values = mask.tolist() if isinstance(mask, Tensor) else list(mask)
    spans, start = [], None
    for t, m in enumerate(values):
        if m and start is None:
            start = t
        elif not m and start is not None:
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, len(values)))
    return spans


def turn_advantage_tokens(loss_mask: Tensor, rows: Sequence[Sequence[float] | None], coef: float) -> Tensor:
    """(B, T) token advantages from per-reply values: `coef` x row b's value k on the tokens of its k-th reply span in
    `loss_mask` (B, T); 0 for a row without values and off the mask. A row whose span count differs from its values
    is an error (callers leave such rows without values: training/run/step.py `turn_rows`).

    >>> turn_advantage_tokens(torch.tensor([[1, 1, 0, 1], [0, 1, 0, 0]]), [[0.5, -1.0], None], 2.0).tolist()
    [[1.0, 1.0, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0]]
    """
    out = torch.zeros(loss_mask.shape, dtype=torch.float32)
    for b, values in enumerate(rows):
        if values is None:
            continue
        spans = reply_spans(loss_mask[b])
        if len(spans) != len(values):
            raise ValueError(f"row {b}: {len(values)} reply values for {len(spans)} policy spans of its padded mask")
        for (s, e), v in zip(spans, values, strict=True):
            out[b, s:e] = coef * v
    return out
