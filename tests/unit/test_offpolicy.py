"""The decoupled PPO correction of stale rollouts (issue 47; training/learn/algorithms.py `behaviour_weight`, the
`is_weight` of the losses, training/learn/learner.py `masked_update`): the weight is min(pi_prox / pi_behaviour, is_cap) per
token, detached (the gradient flows through pi_theta only), it multiplies the clipped surrogate of GRPO and PPO, and at
staleness 0 or offpolicy = "none" nothing changes, bit for bit."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from training.config import TrainingConfig  # noqa: E402
from training.learn import algorithms as alg  # noqa: E402
from training.learn.api import Batch, MicroBatch  # noqa: E402
from training.learn.learner import masked_update  # noqa: E402

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])


def test_weight_is_the_hand_computed_truncated_ratio() -> None:
    prox = torch.tensor([[-0.2, -1.0, -3.0], [-0.1, 0.0, -2.0]])
    behav = torch.tensor([[-0.5, -0.4, 0.0], [-2.0, 0.0, -2.0]])
    w, cut = alg.behaviour_weight(prox, behav, cap=2.0)
    assert w[0, 0].item() == pytest.approx(math.exp(0.3))
    assert w[0, 1].item() == pytest.approx(math.exp(-0.6))
    assert w[1, 0].item() == 2.0 and bool(cut[1, 0])  # exp(1.9) = 6.7, truncated at the cap
    assert w[1, 2].item() == 1.0 and not bool(cut[1, 2])
    assert cut.tolist() == [[False, False, False], [True, False, False]]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_weighted_surrogate_and_gradient_through_pi_theta_only(algorithm: str) -> None:
    torch.manual_seed(0)
    lp = torch.randn(2, 3, requires_grad=True)
    prox = (lp.detach() + 0.1 * torch.randn(2, 3)).requires_grad_(True)  # even with a graph, the weight is detached
    behav = torch.randn(2, 3)
    w, _ = alg.behaviour_weight(prox, behav, cap=2.0)
    assert not w.requires_grad
    out: Any
    base: Any
    if algorithm == "grpo":
        adv = torch.tensor([1.0, -0.5])
        out = alg.grpo_loss(lp, prox.detach(), None, adv, MASK, 0.2, 0.0, is_weight=w)
        base = alg.grpo_loss(lp, prox.detach(), None, adv, MASK, 0.2, 0.0)
        adv_t = adv.unsqueeze(1).expand(2, 3)
    else:
        adv_t = torch.randn(2, 3)
        v = torch.zeros(2, 3)
        out = alg.ppo_loss(lp, prox.detach(), None, adv_t, v, v, v, MASK, 0.2, 0.2, 0.0, 1.0, is_weight=w)
        base = alg.ppo_loss(lp, prox.detach(), None, adv_t, v, v, v, MASK, 0.2, 0.2, 0.0, 1.0)
    ratio = torch.exp(lp - prox.detach())
    surr = torch.maximum(-adv_t * ratio, -adv_t * ratio.clamp(0.8, 1.2))
    assert out.pg_loss.item() == pytest.approx(((surr * w * MASK).sum() / MASK.sum()).item(), rel=1e-6)
    assert base.pg_loss.item() == pytest.approx(((surr * MASK).sum() / MASK.sum()).item(), rel=1e-6)
    out.loss.backward()
    assert lp.grad is not None and lp.grad.abs().sum() > 0
    assert prox.grad is None  # nothing reaches pi_prox (nor pi_behaviour)
    assert (lp.grad * (1 - MASK)).abs().sum() == 0  # environment tokens: exactly zero gradient


class _Core:
    """A bare UpdateCore over a tiny real model (the learner's own forward and update)."""

    def __init__(self, tc: TrainingConfig, model: Any, value_head: Any | None) -> None:
        self.tc, self.model, self.value_head, self.ref_model = tc, model, value_head, None
        params = list(model.parameters()) + (list(value_head.parameters()) if value_head is not None else [])
        self.optimizer = torch.optim.AdamW(params, lr=1e-2)


def _tiny_lm() -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=12, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16,
                                   tie_word_embeddings=False, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def _run(algorithm: str, staleness: int, offpolicy: str) -> tuple[dict[str, float], dict[str, Any]]:
    tc = TrainingConfig(algorithm=algorithm, rollout={"max_staleness": staleness, "temperature": 1.0},
                        update={"offpolicy": offpolicy, "is_cap": 1.5, "kl_coef": 0.0})
    model = _tiny_lm()
    head = torch.nn.Linear(32, 1) if algorithm == "ppo" else None
    core = _Core(tc, model, head)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 12, (4, 7), generator=gen)
    mask = torch.tensor([[1, 1, 0, 0, 1], [1, 0, 0, 1, 1], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.float32)
    rollout_lp = (-torch.rand(4, 5, generator=gen) * 4.0) * mask  # behaviour log-probs, some far from the learner's
    batch = Batch(ids=ids, attention=torch.ones_like(ids), loss_mask=mask, start=1, rollout_lp=rollout_lp)
    mb = MicroBatch(batch, adv=[1.0, -1.0, 0.5, -0.5]) if algorithm == "grpo" else \
        MicroBatch(batch, rewards=[1.0, 0.0, 1.0, 0.0])
    out = masked_update(core, [mb], [1.0])
    return {**out.stats, **out.gaps.stats()}, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_staleness_zero_and_none_are_bit_identical(algorithm: str) -> None:
    """The weight is applied only when max_staleness > 0 and offpolicy = 'decoupled': at staleness 0 (either setting)
    and at staleness 2 with 'none' the stats and the updated weights are identical bit for bit, no is_* stat exists;
    the decoupled run differs and reports its weights."""
    sync, sync_w = _run(algorithm, 0, "decoupled")
    assert not any(k.startswith("losses/is_") for k in sync)
    for stale, off in ((0, "none"), (2, "none")):
        stats, weights = _run(algorithm, stale, off)
        assert stats == sync
        assert all(torch.equal(weights[k], sync_w[k]) for k in sync_w)
    dec, dec_w = _run(algorithm, 2, "decoupled")
    assert 0.0 < dec["losses/is_clipfrac"] < 1.0  # the gap is up to 4 nats: some tokens cut at 1.5, not all
    assert 0.0 < dec["losses/is_weight_mean"] <= 1.5
    assert dec["rollout/logprob_gap_mean_abs"] == sync["rollout/logprob_gap_mean_abs"]  # the behaviour gap, reused
    assert dec["losses/policy"] != sync["losses/policy"]
    assert any(not torch.equal(dec_w[k], sync_w[k]) for k in sync_w)
