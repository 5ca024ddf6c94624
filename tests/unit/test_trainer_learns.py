"""The trainer provably learns (docs STYLE 13; issue 45, step 0): the REAL masked GRPO and PPO updates
(training/learn/learner.py `Learner`, built from a [training] config the way the trainer builds it, and its `update` with
training/learn/algorithms.py's losses and GRPO advantages) on a task whose optimum is known, with LoRA and with full
fine-tuning, must raise the reward to near its optimum within a fixed budget of steps.

The task: a tiny random Llama (10-token vocabulary, saved as a Hugging Face dir with its own word-level tokenizer) reads
a prompt and writes one token, the environment answers with two tokens of its own (mask 0, as retrieved documents
are), and the policy writes one more token. The reward is the share of the two policy tokens that are the target
token: ~1/10 for the untrained policy, 1 at the optimum. The reward is measured on a fresh sample of rollouts.

A test that a flipped sign would still pass proves nothing: the same loop with the advantage sign flipped (the rewards
fed to the learner negated, which negates GRPO's group-normalised advantages exactly) or with the policy mask inverted
(the environment's tokens marked as the policy's and the policy's as the environment's) is asserted NOT to learn.
`S3_PLANTED_DEFECT=sign` (or `mask`) plants the defect in the learning test itself, to watch it fail:

    S3_PLANTED_DEFECT=sign .venv/bin/python -m pytest tests/unit/test_trainer_learns.py -k trainer_learns_the

Asynchronous RL (issue 47): `test_trainer_learns_from_stale_rollouts` samples each step's rollouts from a copy of the
policy as it was s = 1 or 2 updates earlier (as training/rollouts/pipeline.py does at training.rollout.max_staleness = s: batch k
rolled out by weights version max(0, k - s)), their log-probs the behaviour log-probs, and updates the current learner
with the decoupled PPO correction; it must reach the synchronous threshold in the same step budget (the same number of
samples). `S3_PLANTED_DEFECT=sign` fails it too. The reward per step is printed (pytest -s).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from s3core.types import SearchResult, Trajectory  # noqa: E402
from training.config import TrainingConfig  # noqa: E402
from training.learn.advantages import group_advantages_missing  # noqa: E402
from training.learn.api import MicroBatch, UpdateRows, pad_rollouts  # noqa: E402
from training.learn.learner import Learner  # noqa: E402

VOCAB = ["<pad>", "<s>", "a", "b", "c", "d", "p", "q", "x", "y"]
TARGET = VOCAB.index("c")  # the one behaviour that earns the reward
ENV = [VOCAB.index("x"), VOCAB.index("y")]  # what the environment inserts between the two policy turns
PROMPTS = [[1, 6, 6], [1, 6, 7], [1, 7, 6], [1, 7, 7]]  # four "questions", in tokens the environment never writes
GROUP = 8  # rollouts per prompt (GRPO's group)
STEPS = 12  # the fixed budget of optimizer steps (the learning runs reach >= 0.96 by step 5)
EVAL_SAMPLES = 64  # fresh rollouts per prompt for the measured reward
OPTIMUM, THRESHOLD, DEFECT_CEILING = 1.0, 0.9, 0.5


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """One torch thread: a model this small gains nothing from two, and on a busy machine two threads' barriers
    turn a 2-second test into a minute."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer random Llama over VOCAB with a word-level tokenizer, saved as a plain HF dir (training.base_model).
    Hidden size 128: LoRA leaves the output head frozen, so the largest logit the adapters can reach is about
    |head row| x sqrt(hidden) (the final RMSNorm fixes the hidden state's norm); at hidden 64 LoRA stalls near 0.72."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    out = tmp_path_factory.mktemp("tiny_lm") / "tiny"
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>",
                                                pad_token="<pad>")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(VOCAB), hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=16,
                                   tie_word_embeddings=False, initializer_range=0.05, bos_token_id=1, eos_token_id=1,
                                   pad_token_id=0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(out))
    fast.save_pretrained(str(out))
    return out


def _config(base: Path, algorithm: str, lora: bool, staleness: int = 0, offpolicy: str = "decoupled",
            scale: str = "group_std") -> TrainingConfig:
    return TrainingConfig(
        algorithm=algorithm, base_model=str(base), seed=0,
        rollout={"group_size": GROUP, "batch_size": len(PROMPTS), "temperature": 1.0, "max_staleness": staleness},
        update={"learning_rate": 1e-2, "critic_learning_rate": 1e-2, "kl_coef": 0.001, "clip_coef": 0.2,
                "offpolicy": offpolicy, "advantage_scale": scale},
        learner={"lora": lora, "lora_r": 8, "lora_alpha": 16, "micro_batch_size": 16},
    )


def _rollouts(model: Any, n: int, gen: Any, invert_mask: bool = False) -> tuple[list[SearchResult], list[float]]:
    """n rollouts of every prompt, sampled from the model at temperature 1: policy token, environment tokens, policy
    token. Consecutive n rows share a prompt (a GRPO group). Returns the trajectories and their rewards."""
    model.eval()
    with torch.no_grad():
        x = torch.tensor([p for p in PROMPTS for _ in range(n)])  # (4n, 3)
        lp1 = torch.log_softmax(model(input_ids=x).logits[:, -1].float(), -1)
        a1 = torch.multinomial(lp1.exp(), 1, generator=gen)  # (4n, 1)
        x2 = torch.cat([x, a1, torch.tensor([ENV] * len(x))], dim=1)
        lp2 = torch.log_softmax(model(input_ids=x2).logits[:, -1].float(), -1)
        a2 = torch.multinomial(lp2.exp(), 1, generator=gen)
    results, rewards = [], []
    for i, prompt in enumerate(x.tolist()):
        t1, t2 = int(a1[i]), int(a2[i])
        tr = Trajectory(prompt_ids=prompt)
        tr.append([t1], not invert_mask, [float(lp1[i, t1])])
        tr.append(list(ENV), invert_mask)
        tr.append([t2], not invert_mask, [float(lp2[i, t2])])
        results.append(SearchResult(question=f"q{i // n}", trajectory=tr))
        rewards.append(((t1 == TARGET) + (t2 == TARGET)) / 2)
    return results, rewards


def _mean_reward(learner: Learner, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    return sum(_rollouts(learner.model, EVAL_SAMPLES, gen)[1]) / (EVAL_SAMPLES * len(PROMPTS))


def _update(learner: Learner, results: list[SearchResult], fed: list[float]) -> None:
    """One update through the interface the training loop drives (training/learn/api.py `UpdateRows`): every
    rollout enters, GRPO with the group-normalised advantages of `fed`, PPO with `fed` as the sequence rewards."""
    tc = learner.tc
    adv = group_advantages_missing(list(fed), GROUP, scale=tc.update.advantage_scale) if tc.algorithm == "grpo" else None

    def micro(b: list[int]) -> MicroBatch:
        batch = pad_rollouts(results, b, 0, share_prefix=tc.learner.share_prefix)
        if adv is not None:
            return MicroBatch(batch, adv=[float(adv[i] or 0.0) for i in b])
        return MicroBatch(batch, rewards=[fed[i] for i in b])

    rows = list(range(len(results)))
    tokens = [float(sum(r.trajectory.mask)) for r in results if r.trajectory is not None]
    learner.update(UpdateRows(rows, tokens, micro, tc.learner.micro_batch_size))
    learner.step_scheduler()


def _train(base: Path, run_dir: Path, algorithm: str, lora: bool, defect: str | None, staleness: int = 0,
           offpolicy: str = "decoupled", curve: list[float] | None = None, scale: str = "group_std") -> tuple[float, float]:
    """STEPS steps of the real update; the fresh-sample mean reward before and after. staleness s > 0: step k's
    rollouts are sampled by the policy's copy after max(0, k - s) updates (the lagged weights are kept), their
    log-probs the behaviour's, and the learner runs with training.rollout.max_staleness = s. `curve` (if given)
    receives the fresh-sample reward after every step."""
    torch.manual_seed(0)
    learner = Learner(_config(base, algorithm, lora, staleness, offpolicy, scale), "cpu", run_dir)
    before = _mean_reward(learner, seed=1000)
    gen = torch.Generator().manual_seed(0)
    versions = [copy.deepcopy(learner.model)] if staleness else []  # versions[v]: the policy after v updates
    for k in range(STEPS):
        sampler = versions[max(0, k - staleness)] if staleness else learner.model
        results, rewards = _rollouts(sampler, GROUP, gen, invert_mask=defect == "mask")
        _update(learner, results, [-r for r in rewards] if defect == "sign" else rewards)
        if staleness:
            versions.append(copy.deepcopy(learner.model))  # a 1-layer model: keeping all 13 costs nothing
        if curve is not None:
            curve.append(_mean_reward(learner, seed=3000 + k))
    return before, _mean_reward(learner, seed=2000)


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
