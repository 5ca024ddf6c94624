"""Fakes of training's parts for tests and benchmarks, beside the code they stand in for (as
generator_adapters/testing.py is for its package): a priced executor for the budget, and the toy world the learning
test (tests/unit/test_trainer_learns.py), the self-healing tests and benchmarks/self_healing.py drive the REAL loop
over (`tiny_lm`, `ToyExecutor`, `toy_trainer`), and the check those tests and the vLLM one share
(`saved_weights_finite`).

    inner = PricedExecutor(cost_usd=0.25, stats={"reward/prompt_tokens": 100.0})
    ex = BudgetedExecutor(inner, cfg, run_dir, budget_usd=1.0)   # training/rollouts/budget.py over it
    ex.score([], [])                                            # inner.scored == 1; ex.step_stats()["cost/usd_step"]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3core.types import Document, QAExample, SearchResult, Trajectory
from training.rewards import RewardBatch

__all__ = ["ENV", "PROMPTS", "TARGET", "VOCAB", "NoRetriever", "PricedExecutor", "ToyExecutor", "healing_config",
           "tiny_lm", "toy_reward", "toy_rollouts", "toy_trainer"]


class PricedExecutor:
    """A StepExecutor (training/rollouts/executors.py) whose rollouts are empty and whose every scoring reports, at the
    next `step_stats`, `cost_usd` as reward/cost_usd plus `stats`: what a budget sees of a priced reward. `scored`
    counts the scorings; `before_score` (if given) runs at the start of each (a test's look at the budget then)."""

    def __init__(self, cost_usd: float = 0.25, stats: dict[str, float] | None = None,
                 before_score: Callable[[], None] | None = None) -> None:
        self.cost_usd = cost_usd
        self.stats = dict(stats or {})
        self.before_score = before_score
        self.pending: dict[str, float] = {}
        self.scored = 0

    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]:
        return []

    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch:
        if self.before_score is not None:
            self.before_score()
        self.scored += 1
        self.pending = {"reward/cost_usd": self.cost_usd, **self.stats}
        return RewardBatch(rewards=[])

    def step_stats(self) -> dict[str, float]:
        out, self.pending = self.pending, {}
        return out

    def sync(self) -> float | None:
        return None

    def close(self) -> None:
        return None


# ------------------------------------------------------------------------------------------------ the toy world
# A tiny random Llama (10-token vocabulary, its own word-level tokenizer) reads a prompt and writes one token, the
# environment answers with two tokens of its own (mask 0, as retrieved documents are), and the policy writes one
# more token. The reward is the share of the two policy tokens that are TARGET: ~1/10 untrained, 1 at the optimum.
VOCAB = ["<pad>", "<s>", "a", "b", "c", "d", "p", "q", "x", "y"]
TARGET = VOCAB.index("c")  # the one behaviour that earns the reward
ENV = [VOCAB.index("x"), VOCAB.index("y")]  # what the environment inserts between the two policy turns
PROMPTS = [[1, 6, 6], [1, 6, 7], [1, 7, 6], [1, 7, 7]]  # four "questions", in tokens the environment never writes


def tiny_lm(out: Path) -> Path:
    """A 1-layer random Llama over VOCAB with a word-level tokenizer, saved as a plain HF dir (training.base_model)
    at `out`. Hidden size 128: LoRA leaves the output head frozen, so the largest logit the adapters can reach is
    about |head row| x sqrt(hidden) (the final RMSNorm fixes the hidden state's norm); at hidden 64 LoRA stalls near
    0.72."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

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


def toy_rollouts(model: Any, prompts: list[list[int]], gen: Any, invert_mask: bool = False) -> list[SearchResult]:
    """One rollout of each prompt, sampled from the model at temperature 1: policy token, environment tokens, policy
    token, each policy token with its log-prob (the rollout engine's)."""
    import torch

    model.eval()
    with torch.no_grad():
        x = torch.tensor(prompts)  # (N, 3)
        lp1 = torch.log_softmax(model(input_ids=x).logits[:, -1].float(), -1)
        a1 = torch.multinomial(lp1.exp(), 1, generator=gen)  # (N, 1)
        x2 = torch.cat([x, a1, torch.tensor([ENV] * len(x))], dim=1)
        lp2 = torch.log_softmax(model(input_ids=x2).logits[:, -1].float(), -1)
        a2 = torch.multinomial(lp2.exp(), 1, generator=gen)
    results = []
    for i, prompt in enumerate(x.tolist()):
        t1, t2 = int(a1[i]), int(a2[i])
        tr = Trajectory(prompt_ids=prompt)
        tr.append([t1], not invert_mask, [float(lp1[i, t1])])
        tr.append(list(ENV), invert_mask)
        tr.append([t2], not invert_mask, [float(lp2[i, t2])])
        results.append(SearchResult(question=str(prompt), trajectory=tr))
    return results


def toy_reward(result: SearchResult) -> float:
    """The share of the two policy tokens (response positions 0 and 3, whatever the mask says) that are TARGET."""
    assert result.trajectory is not None
    ids = result.trajectory.response_ids
    return ((ids[0] == TARGET) + (ids[3] == TARGET)) / 2


class ToyExecutor:
    """The StepExecutor of the toy task: rollouts sampled from the learner's own model (the engine is the learner, as
    with training.rollout.engine = 'transformers': sync has nothing to load), rewards from their tokens. Question
    ids are a letter and a number (p0..p3 the training prompts, h0, h1, ... held-out ones: the prompts in turn).
    `defect`: 'sign' returns the rewards negated, 'mask' marks the environment's tokens as the policy's and back.
    `credit` (training.update.turn_credit's world): every outcome reward is 0, so the outcome tells no rollout apart,
    and each reply's credit (RewardBatch.turn_credits) is 1 where the FIRST reply is TARGET, 0 otherwise (negated
    under the 'sign' defect)."""

    def __init__(self, learner: Any, defect: str | None = None, credit: bool = False) -> None:
        import torch

        self.learner, self.defect, self.credit = learner, defect, credit
        self.gen = torch.Generator().manual_seed(0)

    def rollout(self, examples: list[QAExample], step: int, greedy: bool = False) -> list[SearchResult]:
        prompts = [PROMPTS[int(e.id[1:]) % len(PROMPTS)] for e in examples]
        return toy_rollouts(self.learner.model, prompts, self.gen, invert_mask=self.defect == "mask")

    def score(self, results: list[SearchResult], examples: list[QAExample], step: int | None = None) -> RewardBatch:
        sign = -1.0 if self.defect == "sign" else 1.0
        if self.credit:
            first = [float(r.trajectory is not None and r.trajectory.response_ids[0] == TARGET) for r in results]
            return RewardBatch(rewards=[0.0] * len(results), turn_credits=[[sign * f, 0.0] for f in first])
        return RewardBatch(rewards=[sign * toy_reward(r) for r in results])

    def sync(self) -> float | None:
        return None

    def step_stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        return None


class NoRetriever:
    """The toy world has no documents (the loop's search/ probe asks it for none)."""

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        return [[] for _ in queries]


def toy_trainer(settings: Any, run_dir: Path, *, heldout: int = 0, defect: str | None = None, resume: bool = True,
                log: Callable[[str], None] = lambda s: None, credit: bool = False) -> Any:
    """An S3Trainer over the toy world's parts with `settings` (the whole settings, e.g. `load_config(None, [])`
    with the toy's [training]: training/ does not import the CLI's loader): the four prompts its questions,
    `heldout` held-out questions; `credit`: ToyExecutor's turn-credit world. resume: from the run's latest checkpoint with its
    rollbacks' changes (what make_trainer does for `s3 train`, so `train_healing(lambda: toy_trainer(...))` is
    `s3 train` over the toy)."""
    import torch

    from training import rundir
    from training.learn.learner import Learner
    from training.prep.data import TrainingSet
    from training.run.build import TrainingParts
    from training.run.recovery import healed
    from training.run.trainer import S3Trainer

    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = healed(settings, run_dir) if resume else settings
    start = rundir.latest_checkpoint(run_dir) if resume else None
    torch.manual_seed(0)
    learner = Learner(cfg.training, "cpu", run_dir, start)
    examples = [QAExample(id=f"p{i}", question=f"prompt {i}", golden_answers=["c"]) for i in range(len(PROMPTS))]
    held = [QAExample(id=f"h{i}", question=f"held {i}", golden_answers=["c"]) for i in range(heldout)]
    data = TrainingSet(directory=run_dir, examples=examples, baseline={}, index_dir=None, manifest={})  # type: ignore[arg-type]
    parts = TrainingParts(cfg=cfg, run_dir=run_dir, device="cpu", data=data, examples=examples, heldout=held,
                          retriever=NoRetriever(), loop_cfg=cfg.searcher, learner=learner,  # type: ignore[arg-type]
                          tokenizer=learner.tokenizer, executor=ToyExecutor(learner, defect, credit), resume_dir=start)
    return S3Trainer(parts, log=log)


def healing_config(base: Path, steps: int, *, lora: bool = False, staleness: int = 0, heldout: int = 0,
                   recovery: dict[str, Any] | None = None, every: int = 2) -> Any:
    """The toy's [training] for the self-healing runs (tests/unit/test_self_healing.py, benchmarks/self_healing.py):
    GRPO over the four prompts (8 rollouts each), flat groups dropped, `heldout` questions evaluated and a checkpoint
    kept every `every` steps, training.recovery as given (its KL bound off: the toy's optimum is far from its random
    reference, KL ~ log 10 a token; the bound is for real runs)."""
    from training.config import TrainingConfig

    return TrainingConfig(
        algorithm="grpo", base_model=str(base), seed=0,
        rollout={"group_size": 8, "batch_size": len(PROMPTS), "temperature": 1.0, "max_staleness": staleness},
        update={"learning_rate": 1e-2, "kl_coef": 0.001, "drop_flat_groups": True},
        learner={"lora": lora, "lora_r": 8, "lora_alpha": 16, "micro_batch_size": 16},
        heldout={"questions": heldout, "every": every if heldout else 0},
        total_steps=steps, checkpoint={"every": every, "keep": 2},
        recovery={"kl_max": None, **(recovery or {})},
    )


def saved_weights_finite(run_dir: Path) -> bool:
    """Whether every weight the run's checkpoints saved is finite (the self-healing tests: a NaN step rolled back must
    leave none behind); at least one saved weights file must exist."""
    import torch
    from safetensors.torch import load_file

    files = list((run_dir / "checkpoints").glob("step_*/policy/*.safetensors"))
    assert files, f"no saved weights under {run_dir / 'checkpoints'}"
    return all(bool(torch.isfinite(t).all()) for f in files for t in load_file(str(f)).values())
