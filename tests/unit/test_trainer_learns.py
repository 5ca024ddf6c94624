"""The trainer provably learns (docs STYLE 13; issues 45, 59): the REAL training loop (training/run/trainer.py
`S3Trainer.train`: the data order, the pipeline, `update_rows` with the default advantage path of
training/learn/advantages.py, the learner's masked GRPO / PPO update with training/learn/algorithms.py's losses, the
scheduler, the metrics and the checkpoint) on a task whose optimum is known, with LoRA and with full fine-tuning, must
raise the reward to near its optimum within a fixed budget of steps. Only the world is a toy: the executor samples
the rollouts from the learner's own model (as the transformers engine does) and scores them from their tokens.

The task: a tiny random Llama (10-token vocabulary, saved as a Hugging Face dir with its own word-level tokenizer) reads
a prompt and writes one token, the environment answers with two tokens of its own (mask 0, as retrieved documents
are), and the policy writes one more token. The reward is the share of the two policy tokens that are the target
token: ~1/10 for the untrained policy, 1 at the optimum. The reward is measured on a fresh sample of rollouts.

A test that a flipped sign would still pass proves nothing: the same loop with the advantage sign flipped (the rewards
the executor returns negated, which negates GRPO's group-normalised advantages exactly) or with the policy mask inverted
(the environment's tokens marked as the policy's and the policy's as the environment's) is asserted NOT to learn.
`S3_PLANTED_DEFECT=sign` (or `mask`) plants the defect in the learning test itself, to watch it fail:

    S3_PLANTED_DEFECT=sign .venv/bin/python -m pytest tests/unit/test_trainer_learns.py -k trainer_learns_the

Asynchronous RL (issue 47): `test_trainer_learns_from_stale_rollouts` runs the loop at training.rollout.max_staleness
= s = 1 or 2: training/rollouts/pipeline.py rolls batch k out at admission, with the weights after max(0, k - s)
updates, their log-probs the behaviour log-probs, and the learner updates with the decoupled PPO correction; it must
reach the synchronous threshold in the same step budget (the same number of samples). `S3_PLANTED_DEFECT=sign` fails
it too. The reward per step is printed (pytest -s).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from s3.config import load_config  # noqa: E402
from training.config import TrainingConfig  # noqa: E402
from training.learn.learner import Learner  # noqa: E402
from training.testing import PROMPTS, TARGET, VOCAB, toy_reward, toy_rollouts, toy_trainer  # noqa: E402

GROUP = 8  # rollouts per prompt (GRPO's group)
STEPS = 12  # the fixed budget of optimizer steps (the learning runs reach >= 0.96 by step 5)
EVAL_SAMPLES = 64  # fresh rollouts per prompt for the measured reward
OPTIMUM, THRESHOLD, DEFECT_CEILING = 1.0, 0.9, 0.5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(base: Path, algorithm: str, lora: bool, staleness: int = 0, offpolicy: str = "decoupled",
            scale: str = "group_std", turn_credit: float | None = None) -> TrainingConfig:
    """The toy's [training]. GRPO as the transfer recipes run it: the flat groups dropped (training.update.
    drop_flat_groups) and a format term on (training.invalid_penalty: its advantage centred, the default
    training.format_advantage; the toy's rollouts have no invalid turn, so it adds 0)."""
    grpo = algorithm == "grpo"
    credit = {} if turn_credit is None else {"turn_credit": turn_credit, "drop_flat_groups": False}
    return TrainingConfig(
        algorithm=algorithm, base_model=str(base), seed=0, invalid_penalty=0.05 if grpo else 0.0,
        rollout={"group_size": GROUP, "batch_size": len(PROMPTS), "temperature": 1.0, "max_staleness": staleness},
        update={"learning_rate": 1e-2, "critic_learning_rate": 1e-2, "kl_coef": 0.001, "clip_coef": 0.2,
                "offpolicy": offpolicy, "advantage_scale": scale, "drop_flat_groups": grpo, **credit},
        learner={"lora": lora, "lora_r": 8, "lora_alpha": 16, "micro_batch_size": 16},
        total_steps=STEPS, checkpoint={"every": STEPS},
        # the toy's optimum is far from its random reference (KL ~ log 10 a token): the recovery's KL bound
        # (training.recovery.kl_max, for real runs) is not for it; the other triggers stay on
        recovery={"kl_max": None},
    )


def _mean_reward(learner: Learner, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    prompts = [p for p in PROMPTS for _ in range(EVAL_SAMPLES)]
    return sum(toy_reward(r) for r in toy_rollouts(learner.model, prompts, gen)) / len(prompts)


def _train(base: Path, run_dir: Path, algorithm: str, lora: bool, defect: str | None, staleness: int = 0,
           offpolicy: str = "decoupled", curve: list[float] | None = None, scale: str = "group_std") -> tuple[float, float]:
    """`S3Trainer.train` for STEPS steps over the toy task's parts (the four prompts its questions, GROUP rollouts
    of each a step); the fresh-sample mean reward before and after. staleness s > 0: training.rollout.max_staleness
    = s (the pipeline rolls batches out ahead). `curve` (if given) receives the fresh-sample reward after every
    step."""
    tc = _config(base, algorithm, lora, staleness, offpolicy, scale)  # the default settings, the toy's [training]
    trainer = toy_trainer(load_config(None, []).model_copy(update={"training": tc}), run_dir, defect=defect,
                          resume=False)
    learner = trainer.learner
    before = _mean_reward(learner, seed=1000)
    try:
        if curve is None:
            trainer.train()
        for k in range(STEPS if curve is not None else 0):  # step by step (a later train() continues the run)
            trainer.train(max_steps=1)
            curve.append(_mean_reward(learner, seed=3000 + k))
        assert trainer.step == STEPS
        return before, _mean_reward(learner, seed=2000)
    finally:
        trainer.close()


CASES = [pytest.param(a, lora, id=f"{a}-{'lora' if lora else 'full'}") for a in ("grpo", "ppo") for lora in (True, False)]


@pytest.mark.parametrize(("algorithm", "lora"), CASES)
def test_trainer_learns_the_rewarded_token(tiny_lm_dir: Path, tmp_path: Path, algorithm: str, lora: bool) -> None:
    defect = os.environ.get("S3_PLANTED_DEFECT") or None  # unset in CI: see the module docstring
    before, after = _train(tiny_lm_dir, tmp_path, algorithm, lora, defect)
    assert before < 0.3, f"the untrained policy should be near 1/{len(VOCAB)}: {before:.3f}"
    assert after >= THRESHOLD, f"{algorithm} ({'LoRA' if lora else 'full'}): reward {before:.3f} -> {after:.3f} " \
        f"after {STEPS} steps, below {THRESHOLD} (optimum {OPTIMUM})"


@pytest.mark.parametrize("defect", ["sign", "mask"])
@pytest.mark.parametrize(("algorithm", "lora"), CASES)
def test_trainer_learns_nothing_with_a_planted_defect(tiny_lm_dir: Path, tmp_path: Path, algorithm: str, lora: bool,
                                                      defect: str) -> None:
    """The threshold above is meaningful: the advantage sign flipped, or the policy mask inverted, and the same budget
    leaves the reward far below it."""
    before, after = _train(tiny_lm_dir, tmp_path, algorithm, lora, defect)
    assert after <= DEFECT_CEILING, f"{defect} defect, {algorithm} ({'LoRA' if lora else 'full'}): " \
        f"reward {before:.3f} -> {after:.3f} (should not learn)"


@pytest.mark.parametrize("defect", [None, "sign"])
def test_trainer_learns_with_unscaled_advantages(tiny_lm_dir: Path, tmp_path: Path, defect: str | None) -> None:
    """training.update.advantage_scale = 'none' (Dr. GRPO: r - group mean, no division by the group's std; the
    third transfer attempt's phase 1b): the real LoRA GRPO update still reaches the threshold in the same budget, and
    the flipped sign still learns nothing."""
    before, after = _train(tiny_lm_dir, tmp_path, "grpo", True, defect, scale="none")
    if defect is None:
        assert after >= THRESHOLD, f"unscaled GRPO (LoRA): reward {before:.3f} -> {after:.3f} below {THRESHOLD}"
    else:
        assert after <= DEFECT_CEILING, f"unscaled GRPO, sign defect: reward {before:.3f} -> {after:.3f}"


STALE_CASES = [pytest.param("grpo", True, s, id=f"grpo-lora-s{s}") for s in (1, 2)] + \
    [pytest.param("ppo", False, s, id=f"ppo-full-s{s}") for s in (1, 2)]


@pytest.mark.parametrize(("algorithm", "lora", "staleness"), STALE_CASES)
def test_trainer_learns_from_stale_rollouts(tiny_lm_dir: Path, tmp_path: Path, algorithm: str, lora: bool,
                                            staleness: int) -> None:
    """Rollouts s updates stale, corrected by the decoupled PPO objective: the synchronous threshold within the same
    STEPS steps, i.e. the same number of samples (GROUP x len(PROMPTS) a step either way)."""
    defect = os.environ.get("S3_PLANTED_DEFECT") or None
    curve: list[float] = []
    before, after = _train(tiny_lm_dir, tmp_path, algorithm, lora, defect, staleness=staleness, curve=curve)
    print(f"{algorithm} {'lora' if lora else 'full'} s={staleness}: reward per step",
          " ".join(f"{r:.3f}" for r in curve))
    assert before < 0.3, f"the untrained policy should be near 1/{len(VOCAB)}: {before:.3f}"
    assert after >= THRESHOLD, f"{algorithm} ({'LoRA' if lora else 'full'}) at staleness {staleness}: reward " \
        f"{before:.3f} -> {after:.3f} after {STEPS} steps, below {THRESHOLD} (optimum {OPTIMUM})"


def _first_reply_target(learner: Learner, seed: int) -> float:
    """The share of fresh rollouts whose FIRST reply is the target token."""
    gen = torch.Generator().manual_seed(seed)
    rollouts = toy_rollouts(learner.model, [p for p in PROMPTS for _ in range(EVAL_SAMPLES)], gen)
    return sum(r.trajectory.response_ids[0] == TARGET for r in rollouts if r.trajectory) / len(rollouts)


@pytest.mark.parametrize("case", ["credit", "off", "sign"])
def test_turn_credit_teaches_the_reply_it_credits(tiny_lm_dir: Path, tmp_path: Path, case: str) -> None:
    """training.update.turn_credit (issue 60 build step 4) through the real loop and LoRA GRPO update: every outcome
    reward is 0 (a flat group: GRPO's sequence advantage is 0 for every rollout), and only each reply's credit says
    which rollouts did well (1 where the first reply is the target token). With the credit on, the first reply learns
    the target; off, nothing moves it (the outcome alone cannot); with its sign flipped, it learns to avoid it."""
    tc = _config(tiny_lm_dir, "grpo", True, turn_credit=0.0 if case == "off" else 1.0)
    trainer = toy_trainer(load_config(None, []).model_copy(update={"training": tc}), tmp_path, resume=False,
                          credit=True, defect="sign" if case == "sign" else None)
    try:
        before = _first_reply_target(trainer.learner, seed=1000)
        trainer.train()
        after = _first_reply_target(trainer.learner, seed=2000)
        rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    finally:
        trainer.close()
    print(f"turn credit {case}: first reply target {before:.3f} -> {after:.3f}")  # pytest -s
    assert before < 0.3
    if case == "credit":
        assert after >= THRESHOLD, f"turn credit: first reply target {before:.3f} -> {after:.3f} after {STEPS} steps"
        assert all(r["reward/turn_credit_unaligned"] == 0.0 for r in rows)  # two replies, two policy spans
    else:
        assert after <= max(before, 0.15) + 0.1, f"{case}: first reply target {before:.3f} -> {after:.3f}"
