"""The one learner interface the training loop drives (training/trainer.py): this process's `Learner`
(training/learner.py) and the Ray `LearnerGroup` (training/learner_group.py, ray.learners > 1) both implement it,
so the loop never asks which one it has.

    report = learner.update(UpdateRows(rows, tokens, micro, micro_batch_size))   # one masked PPO / GRPO update
    lr = learner.step_scheduler()                                                 # after each update
    state = learner.save(checkpoint_dir)        # policy/ (+ adapter/) written; optimizer / scheduler / critic state
    learner.load_state(state)                   # on resume (every rank of a group)

The loop picks the rows that enter an update and knows how to pad any run of them (`UpdateRows.micro`); how the rows
are cut into micro-batches and weighted is the learner's: the single learner's micro-batches carry their share of the
batch's policy tokens, a group splits the rows over its ranks (`split_for_ranks`) and merges the ranks' stats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from training.learner import Batch, MicroBatch

__all__ = ["PolicyLearner", "UpdateReport", "UpdateRows"]


@dataclass
class UpdateRows:
    """The rows of one update: which rollouts enter it (`rows`), each one's policy tokens (`tokens`, same order), and
    `micro(run_of_rows)` -> the padded MicroBatch of those rows with their advantages (GRPO) or rewards (PPO)."""

    rows: list[int]
    tokens: list[float]
    micro: Callable[[list[int]], MicroBatch]
    micro_batch_size: int

    def chunks(self) -> list[list[int]]:
        """The rows cut into micro-batches of at most micro_batch_size, in order."""
        b = self.micro_batch_size
        return [self.rows[i : i + b] for i in range(0, len(self.rows), b)]


@dataclass
class UpdateReport:
    """What an update did: its stats (losses/..., rollout/logprob_gap_...), the policy tokens it trained on and the
    padded micro-batches that carried weight (what tests inspect)."""

    stats: dict[str, float]
    tokens: float
    batches: list[Batch] = field(default_factory=list)


class PolicyLearner(Protocol):
    """What the training loop asks of its learner (see the module docstring)."""

    @property
    def batch_device(self) -> str:
        """Where the loop pads the batches it hands over (a group's ranks move them to their own device)."""
        ...

    def update(self, rows: UpdateRows) -> UpdateReport: ...

    def sft_update(self, batches: list[Batch]) -> dict[str, float]:
        """One supervised warm-up step (training.sft)."""
        ...

    def step_scheduler(self) -> float:
        """The learning-rate scheduler's step after an update; the new rate."""
        ...

    def logprobs(self, batch: Batch) -> Any:
        """The policy's token log-probs of `batch` (no gradient)."""
        ...

    def end_warmup(self) -> Path | None:
        """The warm-up is over: RL's reference becomes the warmed policy; where it was saved (None: no reference)."""
        ...

    def save(self, out: Path) -> dict[str, Any]:
        """Write the checkpoint's model folders into `out`; the optimizer / scheduler / critic state to keep."""
        ...

    def load_state(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...
