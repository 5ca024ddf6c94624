"""Token-level policy-gradient losses with masks: GRPO and PPO, written with the papers' names.

Shapes: B = sequences in the batch, T = response tokens (everything after the prompt), V = vocabulary.
`mask` is the trajectory mask (1 = token written by the policy, 0 = inserted by the environment, e.g. retrieved
documents) times the padding mask. Every loss is a `masked_mean` over policy tokens, so an environment token
contributes nothing and receives exactly zero gradient.

- GRPO (Shao et al. 2024): sequence advantages broadcast over the sequence; ratio clipped at 1 +- clip_coef; KL to
  the frozen reference policy with the low-variance k3 estimator, weighted by kl_coef (s3 / Search-R1: 0.001).
- PPO (Schulman et al. 2017; s3 paper §3.3): token advantages, clipped value loss; the same clipped policy-gradient
  function as GRPO.

Every loss takes its advantages as given: they are estimated in training/learn/advantages.py (GRPO's group baseline,
the flat groups, GAE).

Pure torch; no model code here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "GRPOLossOutput",
    "PPOLossOutput",
    "behaviour_weight",
    "gather_logprobs",
    "grpo_loss",
    "kl_k3",
    "masked_logprobs",
    "masked_mean",
    "policy_gradient_loss",
    "ppo_loss",
    "value_loss",
]


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over positions where `mask` is 1 (the one masked mean every loss uses).

    With no masked-in position the result is 0 (not NaN), so an all-environment batch adds no gradient.
    x, mask: (B, T) (any broadcastable shapes work).
    """
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def gather_logprobs(logits: Tensor, ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probability of each token under `logits`.

    logits: (B, T, V) — logits[:, t] is the distribution of ids[:, t] (already shifted by the caller);
    ids: (B, T) int64. Returns (B, T). `temperature` divides the logits first (the sampling distribution).
    """
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return torch.gather(logp, -1, ids.unsqueeze(-1)).squeeze(-1)  # (B, T)


def masked_logprobs(
    hidden: Tensor,
    head: Callable[[Tensor], Tensor],
    ids: Tensor,
    mask: Tensor,
    temperature: float = 1.0,
    chunk: int = 1024,
) -> Tensor:
    """`gather_logprobs(head(hidden), ids)` at the positions where `mask` is 1, zero elsewhere — without the
    (B, T, V) logits: the vocabulary projection runs only over the masked positions, `chunk` of them at a time, and
    under autograd each chunk is recomputed in the backward pass (activation checkpointing), so the transient memory
    is ~chunk x V whatever B, T and the number of policy tokens.

    hidden: (B, T, H) final (normed) hidden states, hidden[:, t] predicting ids[:, t]; head: (n, H) -> (n, V) logits
    (the LM head); ids, mask: (B, T). Returns (B, T) float32. Unmasked positions hold 0 and get no gradient (every
    loss multiplies by `mask` anyway).
    """
    rows, cols = mask.nonzero(as_tuple=True)  # (N,) each: the policy tokens
    out = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)  # (B, T)
    if rows.numel() == 0:
        return out + 0.0 * hidden.sum() if hidden.requires_grad else out  # keep the graph connected

    def piece(h: Tensor, tgt: Tensor) -> Tensor:  # (n, H), (n,) -> (n,)
        logits = head(h).float()  # (n, V)
        if temperature != 1.0:
            logits = logits / temperature
        return torch.log_softmax(logits, dim=-1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)

    h_all = hidden[rows, cols]  # (N, H)
    tgt_all = ids[rows, cols]  # (N,)
    grad = torch.is_grad_enabled() and h_all.requires_grad
    parts = []
    for lo in range(0, h_all.shape[0], max(1, chunk)):
        h, tgt = h_all[lo : lo + chunk], tgt_all[lo : lo + chunk]
        if grad:
            from torch.utils.checkpoint import checkpoint

            parts.append(checkpoint(piece, h, tgt, use_reentrant=False))
        else:
            parts.append(piece(h, tgt))
    return out.index_put((rows, cols), torch.cat(parts))


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token KL(pi || pi_ref) with the low-variance k3 estimator (Schulman 2020):
    exp(ref - logp) - (ref - logp) - 1  >= 0. Both (B, T); returns (B, T)."""
    log_ratio = ref_logprobs - logprobs  # (B, T)
    return torch.exp(log_ratio) - log_ratio - 1.0


def behaviour_weight(prox_logprobs: Tensor, behaviour_logprobs: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """The decoupled PPO objective's behaviour weight, truncated: w = min(pi_prox / pi_behaviour, cap) per token,
    detached, and whether the cap cut it. prox_logprobs (the learner's own log-probs before the update),
    behaviour_logprobs (the policy that sampled the tokens, e.g. s updates old): (B, T). Returns (w, truncated), (B, T).

    Token-level, as the ratio is: AReaL's `ppo_actor_loss_fn` and verl's token TIS weight each token by its own
    pi_prox / pi_behaviour; a sequence-level weight (the product over a rollout's tokens) has a variance that grows
    with the length, and our rollouts are hundreds of policy tokens. Truncated, not dropped: AReaL zeroes the tokens
    above its `behav_imp_weight_cap` (they leave the loss), verl's TIS clamps them to the cap (IMPALA / V-trace style);
    clamping keeps every stale token's (bounded) signal, and what the cap cut is counted (losses/is_clipfrac).

    >>> w, cut = behaviour_weight(torch.tensor([[0.0, -1.0]]), torch.tensor([[-0.5, 0.0]]), 1.5)
    >>> [round(v, 4) for v in w[0].tolist()], cut[0].tolist()
    ([1.5, 0.3679], [True, False])
    """
    with torch.no_grad():
        raw = torch.exp(prox_logprobs.detach() - behaviour_logprobs.detach())  # (B, T)
        return torch.clamp(raw, max=cap), raw > cap


@dataclass
class PGStats:
    clipfrac: Tensor
    approx_kl: Tensor


def policy_gradient_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, clip_coef: float,
    is_weight: Tensor | None = None,
) -> tuple[Tensor, PGStats]:
    """The clipped surrogate shared by PPO and GRPO: masked_mean(max(-A r, -A clip(r, 1-eps, 1+eps))).

    logprobs (current policy, with grad), old_logprobs (the proximal policy: the learner's own log-probs before the
    update), advantages, mask: (B, T). `is_weight` (B, T), detached (`behaviour_weight`): the decoupled PPO objective,
    each token's surrogate times its behaviour weight; None (synchronous training) leaves the expression untouched.
    """
    log_ratio = logprobs - old_logprobs  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    pg_losses1 = -advantages * ratio  # (B, T)
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)  # (B, T)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)  # (B, T)
    if is_weight is not None:
        pg_losses = pg_losses * is_weight.detach()
    loss = masked_mean(pg_losses, mask)
    with torch.no_grad():
        clipfrac = masked_mean(((ratio - 1.0).abs() > clip_coef).to(logprobs.dtype), mask)
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask)
    return loss, PGStats(clipfrac=clipfrac, approx_kl=approx_kl)


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, value_clip_coef: float) -> Tensor:
    """PPO clipped value loss: 0.5 * masked_mean(max((V - R)^2, (V_old + clip(V - V_old) - R)^2)). All (B, T)."""
    v_clipped = old_values + torch.clamp(values - old_values, -value_clip_coef, value_clip_coef)  # (B, T)
    losses = torch.maximum((values - returns) ** 2, (v_clipped - returns) ** 2)  # (B, T)
    return 0.5 * masked_mean(losses, mask)


@dataclass
class GRPOLossOutput:
    loss: Tensor
    pg_loss: Tensor
    kl: Tensor
    clipfrac: Tensor
    approx_kl: Tensor


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    clip_coef: float = 0.2,
    kl_coef: float = 0.001,
    is_weight: Tensor | None = None,
) -> GRPOLossOutput:
    """GRPO: clipped surrogate with sequence advantages broadcast over tokens, plus kl_coef * k3 KL to pi_ref.

    logprobs, old_logprobs, ref_logprobs, mask: (B, T); advantages: (B,) (from `group_advantages_missing`), or (B, T)
    when each token has its own (training.update.turn_credit: the sequence's plus its reply's credit).
    is_weight (B, T): the decoupled PPO behaviour weight of the surrogate (`policy_gradient_loss`); the KL term is
    not weighted (see `masked_update`'s note in training/learn/learner.py).
    """
    adv = advantages.unsqueeze(1).expand_as(logprobs) if advantages.dim() == 1 else advantages  # (B, T)
    pg, stats = policy_gradient_loss(logprobs, old_logprobs, adv, mask, clip_coef, is_weight)
    if ref_logprobs is not None and kl_coef > 0:
        kl = masked_mean(kl_k3(logprobs, ref_logprobs), mask)
    else:
        kl = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    return GRPOLossOutput(loss=pg + kl_coef * kl, pg_loss=pg, kl=kl, clipfrac=stats.clipfrac, approx_kl=stats.approx_kl)


@dataclass
class PPOLossOutput:
    loss: Tensor
    pg_loss: Tensor
    value_loss: Tensor
    kl: Tensor
    clipfrac: Tensor
    approx_kl: Tensor


def ppo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    advantages: Tensor,
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_coef: float = 0.2,
    value_clip_coef: float = 0.2,
    kl_coef: float = 0.001,
    vf_coef: float = 1.0,
    is_weight: Tensor | None = None,
) -> PPOLossOutput:
    """PPO: the same clipped surrogate with token advantages (from `gae_advantages`), a clipped value loss and the
    k3 KL penalty to the reference policy (as a loss term, like GRPO; verl's `use_kl_loss`). All tensors (B, T).
    is_weight: the decoupled PPO behaviour weight of the surrogate only (neither the value loss nor the KL term).
    """
    pg, stats = policy_gradient_loss(logprobs, old_logprobs, advantages, mask, clip_coef, is_weight)
    v_loss = value_loss(values, old_values, returns, mask, value_clip_coef)
    if ref_logprobs is not None and kl_coef > 0:
        kl = masked_mean(kl_k3(logprobs, ref_logprobs), mask)
    else:
        kl = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    return PPOLossOutput(
        loss=pg + kl_coef * kl + vf_coef * v_loss,
        pg_loss=pg,
        value_loss=v_loss,
        kl=kl,
        clipfrac=stats.clipfrac,
        approx_kl=stats.approx_kl,
    )
