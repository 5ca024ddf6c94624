"""training/learn/algorithms.py and advantages.py: hand-computed tensors, plain-loop references, and exact zero gradient on masked tokens."""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")

from training.learn.advantages import gae_advantages, group_advantages_missing, token_rewards  # noqa: E402
from training.learn.algorithms import (  # noqa: E402
    gather_logprobs,
    grpo_loss,
    kl_k3,
    masked_logprobs,
    masked_mean,
    policy_gradient_loss,
    ppo_loss,
    value_loss,
)


def test_masked_mean_hand_computed() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 0, 1], [0, 0, 1]])
    assert masked_mean(x, mask).item() == pytest.approx((1 + 3 + 6) / 3)
    assert masked_mean(x, mask, dim=1).tolist() == pytest.approx([2.0, 6.0])
    # nothing masked in -> 0, not NaN
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


def _group_adv_loop(rewards: list[float], group_size: int, eps: float) -> list[float]:
    out: list[float] = []
    for g in range(0, len(rewards), group_size):
        grp = rewards[g : g + group_size]
        mean = sum(grp) / len(grp)
        std = math.sqrt(sum((r - mean) ** 2 for r in grp) / (len(grp) - 1))
        out.extend((r - mean) / (std + eps) for r in grp)
    return out


def test_group_advantages_match_plain_loop() -> None:
    rng = random.Random(0)
    for group_size in (2, 3, 5):
        rewards = [rng.choice([-1.0, 0.0, 1.0, 0.5]) for _ in range(group_size * 4)]
        got = group_advantages_missing(rewards, group_size, eps=1e-6)
        assert got == pytest.approx(_group_adv_loop(rewards, group_size, 1e-6))


def test_group_advantages_hand_values_and_constant_group() -> None:
    adv = group_advantages_missing([1.0, 0.0, 0.0, 0.0, 2.0, 2.0], group_size=2, eps=0.0)
    # group (1, 0): mean 0.5, std sqrt(0.5) -> +-0.7071; constant groups -> 0 (0/0 guarded by eps below)
    assert adv[:2] == pytest.approx([0.70710678, -0.70710678])
    adv = group_advantages_missing([0.0, 0.0, 2.0, 2.0], group_size=2, eps=1e-6)
    assert adv == [0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages_missing([0.0] * 5, group_size=2)


def _gae_loop(rewards: list[float], values: list[float], mask: list[int], gamma: float, lam: float) -> list[float]:
    """Reference: GAE over the policy tokens only, as a plain Python loop on the compressed sequence."""
    idx = [i for i, m in enumerate(mask) if m]
    adv = [0.0] * len(mask)
    last = 0.0
    for j in reversed(range(len(idx))):
        i = idx[j]
        next_v = values[idx[j + 1]] if j + 1 < len(idx) else 0.0
        delta = rewards[i] + gamma * next_v - values[i]
        last = delta + gamma * lam * last
        adv[i] = last
    return adv


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_matches_plain_loop(gamma: float, lam: float) -> None:
    g = torch.Generator().manual_seed(1)
    B, T = 4, 11
    mask = (torch.rand(B, T, generator=g) > 0.35).long()
    mask[3] = 0  # an all-environment row
    values = torch.randn(B, T, generator=g, dtype=torch.float64)
    rewards = token_rewards(torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=torch.float64), mask)
    adv, ret = gae_advantages(rewards, values, mask, gamma=gamma, gae_lambda=lam)
    for b in range(B):
        ref = _gae_loop(rewards[b].tolist(), values[b].tolist(), mask[b].tolist(), gamma, lam)
        assert adv[b].tolist() == pytest.approx(ref)
        for t in range(T):
            expect = (ref[t] + values[b, t].item()) if mask[b, t] else 0.0
            assert ret[b, t].item() == pytest.approx(expect)


def test_gae_lambda_gamma_one_is_reward_minus_value() -> None:
    # with gamma = lambda = 1 and a single terminal reward R, A_t = R - V_t on every policy token
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]])
    values = torch.tensor([[0.1, 0.2, 9.0, 9.0, 0.3, 9.0]])
    rewards = token_rewards(torch.tensor([1.0]), mask)
    assert rewards.tolist() == [[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]
    adv, _ = gae_advantages(rewards, values, mask)
    assert adv[0].tolist() == pytest.approx([0.9, 0.8, 0.0, 0.0, 0.7, 0.0])


def test_kl_k3_hand_value_and_nonnegative() -> None:
    lp = torch.tensor([[math.log(0.5), math.log(0.2)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.2)]])
    # k3 = r - log r - 1 with r = pi_ref / pi = 0.5 -> 0.5 + ln 2 - 1
    assert kl_k3(lp, ref)[0].tolist() == pytest.approx([0.5 + math.log(2) - 1, 0.0])
    g = torch.Generator().manual_seed(0)
    assert (kl_k3(torch.randn(50, generator=g), torch.randn(50, generator=g)) >= 0).all()


def test_policy_gradient_loss_hand_computed_clipping() -> None:
    old = torch.zeros(1, 4)
    # ratios 1.5, 0.5, 0.5, 1.1 ; advantages +1, +1, -1, -1 ; clip 0.2
    new = torch.log(torch.tensor([[1.5, 0.5, 0.5, 1.1]]))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4)
    loss, stats = policy_gradient_loss(new, old, adv, mask, clip_coef=0.2)
    # per token max(-A r, -A clip(r)): -1.2, -0.5, 0.8, 1.1
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 1.1) / 4)
    assert stats.clipfrac.item() == pytest.approx(3 / 4)
    # masking the clipped tokens out changes the mean to the unmasked ones only
    loss2, _ = policy_gradient_loss(new, old, adv, torch.tensor([[0, 1, 0, 1]]), clip_coef=0.2)
    assert loss2.item() == pytest.approx((-0.5 + 1.1) / 2)


def test_value_loss_hand_computed() -> None:
    values = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[0.0, 1.0]])
    # token 0: unclipped (1-0)^2 = 1, clipped V = 0.2 -> 0.04 -> max 1 ; token 1: (0-1)^2 = 1 both -> 1
    assert value_loss(values, old, returns, torch.ones(1, 2), 0.2).item() == pytest.approx(0.5 * 1.0)


def test_grpo_and_ppo_share_the_policy_gradient() -> None:
    g = torch.Generator().manual_seed(3)
    lp, old, ref = (torch.randn(3, 5, generator=g) for _ in range(3))
    mask = (torch.rand(3, 5, generator=g) > 0.3).long()
    adv_seq = torch.tensor([1.0, -0.5, 0.25])
    out = grpo_loss(lp, old, ref, adv_seq, mask, clip_coef=0.2, kl_coef=0.0)
    pg, _ = policy_gradient_loss(lp, old, adv_seq[:, None].expand(3, 5), mask, 0.2)
    assert out.loss.item() == pytest.approx(pg.item())
    zeros = torch.zeros(3, 5)
    p = ppo_loss(lp, old, ref, adv_seq[:, None].expand(3, 5), zeros, zeros, zeros, mask, kl_coef=0.0)
    assert p.pg_loss.item() == pytest.approx(pg.item())
    # the KL term is kl_coef * masked_mean(k3)
    out_kl = grpo_loss(lp, old, ref, adv_seq, mask, clip_coef=0.2, kl_coef=0.001)
    assert (out_kl.loss - out.loss).item() == pytest.approx(0.001 * masked_mean(kl_k3(lp, ref), mask).item(), rel=1e-5)


def test_gather_logprobs_matches_log_softmax() -> None:
    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
    ids = torch.tensor([[2, 1]])
    expect0 = 3.0 - math.log(math.exp(1) + math.exp(2) + math.exp(3))
    assert gather_logprobs(logits, ids)[0].tolist() == pytest.approx([expect0, math.log(1 / 3)])
    # temperature divides logits
    assert gather_logprobs(logits, ids, temperature=2.0)[0, 0].item() == pytest.approx(
        1.5 - math.log(math.exp(0.5) + math.exp(1.0) + math.exp(1.5))
    )


class _TinyLM(torch.nn.Module):
    """A tiny causal LM: each position's logits depend on its own token only (embedding -> linear)."""

    def __init__(self, vocab: int = 12, dim: int = 8) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_masked_tokens_get_exactly_zero_gradient(algorithm: str) -> None:
    torch.manual_seed(0)
    model = _TinyLM()
    # response: policy writes tokens 1,2 ; environment inserts "retrieved" tokens 9,10,11 ; policy writes 3
    seq = torch.tensor([[0, 1, 2, 9, 10, 11, 3], [0, 2, 1, 9, 10, 11, 4]])  # (B, T+1) incl. one prompt token
    mask = torch.tensor([[1, 1, 0, 0, 0, 1], [1, 1, 0, 0, 0, 1]])  # over seq[:, 1:]
    logits = model(seq[:, :-1])  # (B, T, V): logits[:, t] predicts seq[:, t+1]
    logits.retain_grad()
    lp = gather_logprobs(logits, seq[:, 1:])
    old = lp.detach() + 0.05
    ref = lp.detach() - 0.1
    if algorithm == "grpo":
        loss = grpo_loss(lp, old, ref, torch.tensor([1.0, -1.0]), mask, kl_coef=0.1).loss
    else:
        values = torch.zeros_like(lp, requires_grad=True)
        adv, ret = gae_advantages(token_rewards(torch.tensor([1.0, -1.0]), mask), values.detach(), mask)
        loss = ppo_loss(lp, old, ref, adv, values, values.detach(), ret, mask, kl_coef=0.1).loss
    loss.backward()
    assert logits.grad is not None
    g = logits.grad.abs().sum(-1)  # (B, T)
    assert (g[mask == 0] == 0).all(), "environment tokens must get exactly zero gradient"
    assert (g[mask == 1] > 0).all()
    # tokens 9 and 10 appear only as inputs at masked positions -> their embeddings get exactly zero gradient
    assert model.emb.weight.grad is not None
    assert (model.emb.weight.grad[[9, 10]] == 0).all()
    assert model.emb.weight.grad[[0, 1, 2, 11]].abs().sum() > 0


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_masked_logprobs_equal_the_full_vocabulary_log_softmax_in_values_and_gradients(chunk: int) -> None:
    """The learner's log-probs project only the policy positions onto the vocabulary, `chunk` rows at a time (each
    recomputed in the backward pass): same values and gradients as the full (B, T, V) log-softmax."""
    torch.manual_seed(0)
    B, T, H, V = 2, 7, 5, 11
    hidden0 = torch.randn(B, T, H)
    head = torch.nn.Linear(H, V)
    ids = torch.randint(0, V, (B, T))
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 1, 1, 0]])
    calls: list[int] = []

    def counted(h: torch.Tensor) -> torch.Tensor:
        calls.append(h.shape[0])
        return head(h)

    def run(fast: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = hidden0.clone().requires_grad_(True)
        head.zero_grad(set_to_none=True)
        if fast:
            lp = masked_logprobs(hidden, counted, ids, mask, temperature=0.6, chunk=chunk)
        else:
            lp = gather_logprobs(head(hidden), ids, temperature=0.6) * mask
        (lp * torch.linspace(0.5, 1.5, T)).sum().backward()
        assert hidden.grad is not None and head.weight.grad is not None
        return lp.detach(), hidden.grad, head.weight.grad.clone()

    ref_lp, ref_gh, ref_gw = run(False)
    lp, gh, gw = run(True)
    assert torch.allclose(lp, ref_lp, atol=1e-6)
    assert (lp[mask == 0] == 0).all()
    assert torch.allclose(gh, ref_gh, atol=1e-6) and torch.allclose(gw, ref_gw, atol=1e-6)
    # only the 8 policy positions reach the vocabulary head, never more than `chunk` rows at once (forward and the
    # backward's recomputation)
    assert max(calls) <= chunk
    assert sum(calls) == 2 * int(mask.sum())  # each policy position once forward, once recomputed backward


def test_masked_logprobs_without_policy_tokens_keep_the_graph() -> None:
    hidden = torch.randn(1, 3, 4, requires_grad=True)
    lp = masked_logprobs(hidden, torch.nn.Linear(4, 6), torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3))
    assert lp.shape == (1, 3) and (lp == 0).all()
    lp.sum().backward()  # no "does not require grad" error: an all-environment micro-batch adds a zero gradient
    assert hidden.grad is not None and (hidden.grad == 0).all()


def test_group_advantages_missing_leave_the_update() -> None:
    import doctest

    import training.learn.algorithms as alg

    assert doctest.testmod(alg).failed == 0
    out = group_advantages_missing([1.0, None, 0.0, 0.0, 0.0, 0.0], 3)
    assert out[1] is None
    assert out[0] == pytest.approx(_group_adv_loop([1.0, 0.0], 2, 1e-6)[0])
    assert out[3:] == [0.0, 0.0, 0.0]  # a constant group: no signal, but scored


def test_flat_groups_are_the_all_equal_scored_groups() -> None:
    from training.learn.advantages import flat_groups

    assert flat_groups([1.0, 1.0, 0.0, 1.0, None, 0.5, 0.5, 0.5], 4) == [4]
    assert flat_groups([0.0, 0.0, None, None], 2) == [0]  # the all-missing group is not "flat": it is already out
    assert flat_groups([0.0, None, 1.0, 1.0], 2) == [2]  # one scored member: no advantage at all (already out)
    with pytest.raises(ValueError, match="multiple of group_size"):
        flat_groups([1.0, 2.0, 3.0], 2)
