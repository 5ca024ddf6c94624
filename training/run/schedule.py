"""What a training run does when, as small pure objects: the data order (which questions each step draws, and the
record a checkpoint keeps of it) and the held-out schedule (after which steps the policy is evaluated).

    order = DataOrder.of(cfg.training, examples, sft_pool)
    order.batch_indices(step)      # the questions of `step` (0-based): a function of (seed, step) only
    order.record(step)             # trainer_state.pt's "data_order"; order.check(saved, step, ckpt) on resume
    in_groups(examples, idx, group_size)   # the step's rollouts: each question group_size times (one GRPO group)
    HeldoutSchedule.of(cfg.training, len(heldout)).due(step)

Both are read by the loop (training/run/trainer.py) and by `s3 train --dry-run` (training/report/dryrun.py), and tested
without building a model (tests/unit/test_schedule.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3core.errors import S3Error
from s3core.types import QAExample
from training.config import TrainingConfig

__all__ = ["DATA_ORDER", "DataOrder", "HeldoutSchedule", "in_groups"]

DATA_ORDER = "warmup-stream+rl-from-start"  # the batch order scheme (DataOrder.batch_indices); a resume checks it


def in_groups(examples: list[QAExample], idx: list[int], group_size: int) -> list[QAExample]:
    """The questions `idx` of `examples`, each `group_size` times in a row: a step's rollouts, one GRPO group per
    question (consecutive rows)."""
    return [examples[i] for i in idx for _ in range(group_size)]


@dataclass(frozen=True)
class DataOrder:
    """The batch order of a run over its training questions (`ids`, in the prepared order).

    Epochs are seeded permutations, so the order is a pure function of (seed, step): a resumed run sees exactly the
    batches the uninterrupted run would have. The warm-up steps (`warmup_steps`) draw from a stream of their own, and
    the RL steps start the main stream at its beginning: ceil(n / batch_size) RL steps put every training question in a
    rollout batch (`rl_coverage`). With a distillation `pool` (training.sft.keep = 'gbr_positive') the warm-up stream
    permutes the pool's questions only. `shifts` (a run's rollbacks, training/run/recovery.py `skips`): (T, n) = the
    RL steps after step T draw the batch n data steps further on (the skipped batches are never drawn again)."""

    ids: tuple[str, ...]
    batch_size: int
    seed: int = 0
    warmup_steps: int = 0
    pool: tuple[int, ...] | None = None  # indices into ids; None = every question
    shifts: tuple[tuple[int, int], ...] = ()  # (after step T, skip n batches): the rollbacks' skipped batches

    @classmethod
    def of(cls, tc: TrainingConfig, examples: list[QAExample], pool: list[int] | None = None,
           shifts: tuple[tuple[int, int], ...] = ()) -> DataOrder:
        return cls(ids=tuple(e.id for e in examples), batch_size=tc.rollout.batch_size, seed=tc.seed,
                   warmup_steps=tc.sft.steps, pool=None if pool is None else tuple(pool), shifts=shifts)

    def data_step(self, step: int) -> int:
        """The data step step `step` (0-based) draws: itself, past the batches the rollbacks skipped (RL steps only).

        >>> DataOrder(ids=tuple("abcd"), batch_size=1, shifts=((3, 2),)).data_step(3)
        5
        """
        if step < self.warmup_steps:
            return step
        return step + sum(n for after, n in self.shifts if step >= after)

    def batch_indices(self, step: int) -> list[int]:
        """Question indices (into `ids`) of `step` (0-based; past the skipped batches: `data_step`)."""
        import torch

        step = self.data_step(step)
        n, b = len(self.ids), self.batch_size
        warm = step < self.warmup_steps
        stream, pos = (1, step * b) if warm else (0, (step - self.warmup_steps) * b)
        pool = self.pool if warm else None  # distillation: the warm-up's stream runs over the kept questions only
        if pool is not None:
            n = len(pool)
        out: list[int] = []
        while len(out) < b:
            epoch, offset = divmod(pos, n)
            gen = torch.Generator().manual_seed(self.seed * 1000003 + epoch + stream * 7919)
            perm = torch.randperm(n, generator=gen).tolist()
            take = min(b - len(out), n - offset)
            out.extend(perm[offset : offset + take])
            pos += take
        return [pool[i] for i in out] if pool is not None else out

    def rl_coverage(self, step: int) -> float:
        """Share of the training questions that have been in an RL rollout batch once `step` is done. After a
        rollback (`shifts`) the batches it skipped were never trained on, and the stream reaches the next epoch's
        permutation sooner, so the questions the kept steps drew are counted one by one.

        >>> [DataOrder(ids=tuple("abcde"), batch_size=2, warmup_steps=1).rl_coverage(s) for s in range(5)]
        [0.0, 0.4, 0.8, 1.0, 1.0]
        >>> DataOrder(ids=tuple("abcde"), batch_size=2, shifts=((1, 1),)).rl_coverage(0)  # before the skip
        0.4
        """
        if not self.shifts:  # the first epoch is one permutation: its first `seen` positions are distinct questions
            seen = (step + 1 - self.warmup_steps) * self.batch_size
            return min(max(seen, 0), len(self.ids)) / len(self.ids)
        drawn: set[int] = set()
        for s in range(self.warmup_steps, step + 1):
            drawn.update(self.batch_indices(s))
        return len(drawn) / len(self.ids)

    def pool_ids(self) -> list[str] | None:
        """The ids of the questions the warm-up draws from; None = all."""
        return None if self.pool is None else [self.ids[i] for i in self.pool]

    def record(self, step: int) -> dict[str, Any]:
        """What a checkpoint at `step` keeps of the order (trainer_state.pt's "data_order"; `check` reads it back)."""
        return {"seed": self.seed, "batch_size": self.batch_size, "n_questions": len(self.ids), "scheme": DATA_ORDER,
                "sft_warmup_steps": self.warmup_steps, "sft_pool": self.pool_ids(),
                "next_batch": [self.ids[i] for i in self.batch_indices(step)]}

    def check(self, saved: dict[str, Any], step: int, ckpt: str | Path) -> None:
        """Refuse to resume checkpoint `ckpt` (at `step`, order `saved`) when its data order is not this one."""
        if saved.get("scheme") != DATA_ORDER or saved.get("sft_warmup_steps") != self.warmup_steps:
            raise S3Error(f"cannot resume {ckpt}: it was written with another data order (an older s3, or another "
                          "training.sft.steps); use a new training.output_dir")
        if step < self.warmup_steps and saved.get("sft_pool", self.pool_ids()) != self.pool_ids():
            raise S3Error(f"cannot resume {ckpt} inside the warm-up: its distillation pool (training.sft.keep / "
                          "candidates) is not this run's; use a new training.output_dir")
        now = (self.seed, self.batch_size, len(self.ids))
        if (saved["seed"], saved["batch_size"], saved["n_questions"]) != now:
            raise S3Error(
                f"cannot resume {ckpt}: data order changed (seed/batch_size/questions {saved['seed']}/"
                f"{saved['batch_size']}/{saved['n_questions']} vs {now[0]}/{now[1]}/{now[2]}); "
                "use a new training.output_dir"
            )


@dataclass(frozen=True)
class HeldoutSchedule:
    """After which steps the policy is evaluated on the held-out questions (training.heldout.every): at the end of the
    warm-up (the policy RL starts from), every `every` steps after it, and at the last step; never without held-out
    questions.

    >>> s = HeldoutSchedule(every=10, warmup_steps=8, total_steps=35, questions=1)
    >>> [step for step in range(1, 36) if s.due(step)]
    [8, 10, 20, 30, 35]
    """

    every: int
    warmup_steps: int
    total_steps: int
    questions: int

    @classmethod
    def of(cls, tc: TrainingConfig, questions: int) -> HeldoutSchedule:
        return cls(every=tc.heldout.every, warmup_steps=tc.sft.steps, total_steps=tc.total_steps, questions=questions)

    def due(self, step: int) -> bool:
        """Whether the policy after `step` steps is evaluated."""
        if not self.every or not self.questions or step < self.warmup_steps:
            return False
        return step == self.warmup_steps or step % self.every == 0 or step == self.total_steps
