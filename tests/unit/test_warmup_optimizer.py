"""RL after a supervised warm-up starts from a fresh optimizer (issue 45: attempt 2 carried AdamW's warm-up moments into
RL; at step 18 the first moment's norm was 0.115 against ~0.03 of RL gradient, and the second moment made the
effective RL learning rate 2.4-3.5x below the configured one). `Learner.end_warmup` builds a fresh AdamW and
scheduler; a run resumed from a checkpoint after the warm-up loads the RL optimizer state it saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from training.config import TrainingConfig  # noqa: E402
from training.learn.api import Batch, MicroBatch, UpdateRows  # noqa: E402
from training.learn.learner import Learner  # noqa: E402

LR = 1e-3


def _learner(base: Path, run_dir: Path, lora: bool, resume_dir: Path | None = None) -> Learner:
    tc = TrainingConfig(base_model=str(base), rollout={"group_size": 2},
                        update={"learning_rate": LR, "kl_coef": 0.001, "max_grad_norm": 1e9},
                        sft={"steps": 2, "learning_rate": 1e-2}, learner={"lora": lora, "lora_r": 4})
    torch.manual_seed(0)
    return Learner(tc, "cpu", run_dir, resume_dir)


def _batch(seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (2, 10), generator=g)
    mask = torch.ones(2, 9)
    mask[:, :3] = 0  # a prompt part, as the trainer's batches have
    return Batch(ids=ids, attention=torch.ones_like(ids), loss_mask=mask, start=0, rollout_lp=torch.zeros(2, 9))


def _rl_step(learner: Learner) -> dict[str, Any]:
    """One GRPO update (advantages +1 / -1) through the loop's interface; the trainable parameters before it."""
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters() if p.requires_grad}
    batch = _batch(7)
    learner.update(UpdateRows([0, 1], [6.0, 6.0], lambda rows: MicroBatch(batch, adv=[1.0, -1.0]), 2))
    return before


def _matches_fresh_adamw(learner: Learner, before: dict[str, Any]) -> bool:
    """Whether the step just taken is a fresh AdamW's first step: theta -= lr * g / (|g| + eps) (bias-corrected
    moments m = g, v = g^2; weight decay 0), g = the gradient the step used (still in .grad)."""
    ok = True
    for n, p in learner.model.named_parameters():
        if not p.requires_grad or p.grad is None:
            continue
        expected = before[n] - LR * p.grad / (p.grad.abs() + 1e-8)
        ok &= torch.allclose(p.detach(), expected, atol=2e-6, rtol=0)
    return ok


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_rl_after_the_warm_up_starts_from_a_fresh_optimizer(tiny_policy_dir: Path, tmp_path: Path, lora: bool) -> None:
    learner = _learner(tiny_policy_dir, tmp_path / "run", lora)
    for seed in (1, 2):
        learner.sft_update([_batch(seed)])
    assert len(learner.optimizer.state) > 0  # the warm-up's moments
    old = learner.optimizer
    learner.end_warmup()
    assert learner.optimizer is not old and len(learner.optimizer.state) == 0  # nothing carried into RL
    assert learner.scheduler.optimizer is learner.optimizer and learner.learning_rate() == LR
    trainable = [p for p in learner.model.parameters() if p.requires_grad]
    assert len(learner.parameters()) == len(trainable)
    assert all(a is b for a, b in zip(learner.parameters(), trainable, strict=True))  # the same weights
    before = _rl_step(learner)
    assert _matches_fresh_adamw(learner, before)  # the first RL step moves every weight by lr, as configured

    # the check can fail: without the fresh optimizer the same warm-up and RL step is not a fresh AdamW's step
    carried = _learner(tiny_policy_dir, tmp_path / "carried", lora)
    for seed in (1, 2):
        carried.sft_update([_batch(seed)])
    assert not _matches_fresh_adamw(carried, _rl_step(carried))

    # a run resumed from a checkpoint after the warm-up loads the RL optimizer state it saved (no reset)
    state = learner.save(tmp_path / "ckpt")
    resumed = _learner(tiny_policy_dir, tmp_path / "run", lora, resume_dir=tmp_path / "ckpt")
    resumed.load_state(state)
    saved, loaded = learner.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys() and len(saved) > 0
    for k in saved:
        assert torch.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"])
        assert torch.equal(saved[k]["exp_avg_sq"], loaded[k]["exp_avg_sq"])
