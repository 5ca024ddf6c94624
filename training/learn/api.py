"""The one learner interface the training loop drives (training/run/trainer.py): this process's `Learner`
(training/learn/learner.py) and the Ray `LearnerGroup` (training/learn/learner_group.py, ray.learners > 1) both implement it,
so the loop never asks which one it has.

    report = learner.update(UpdateRows(rows, tokens, micro, micro_batch_size))   # one masked PPO / GRPO update
    lr = learner.step_scheduler()                                                 # after each update
    state = learner.save(checkpoint_dir)        # policy/ (+ adapter/) written; optimizer / scheduler / critic state
    learner.load_state(state)                   # on resume (every rank of a group)

The loop picks the rows that enter an update and knows how to pad any run of them (`UpdateRows.micro`); how the rows
are cut into micro-batches and weighted is the learner's: the single learner's micro-batches (`token_chunks`: at most
micro_batch_size rows and max_tokens_per_micro_batch padded tokens each) carry their share of the batch's policy
tokens, a group splits the rows over its ranks (`split_for_ranks`) and merges the ranks' stats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from s3core.types import SearchResult

__all__ = ["Batch", "MicroBatch", "PolicyLearner", "UpdateReport", "UpdateRows", "over_budget", "pad_rollouts",
           "token_chunks"]


@dataclass
class Batch:
    """Padded tensors for one micro-batch; T' = L - 1 - start next-token positions (the prompt part is cut)."""

    ids: Any  # (B, L) int64
    attention: Any  # (B, L)
    loss_mask: Any  # (B, T'): 1 where ids[:, start+t+1] is a policy-written response token
    start: int = 0  # first shifted position kept (min prompt length - 1)
    prefix: int = 0  # leading tokens every row shares (<= start), computed once per forward (0 = plain forward)
    rollout_lp: Any = None  # (B, T'): the rollout engine's log-prob of each policy token (0 elsewhere)

    def to(self, device: str) -> Batch:
        """The same batch on `device` (a learner rank's; the driver pads on the CPU)."""
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731  (no copy when already there)
        return replace(self, ids=mv(self.ids), attention=mv(self.attention), loss_mask=mv(self.loss_mask),
                       rollout_lp=mv(self.rollout_lp))


@dataclass
class MicroBatch:
    """What the update needs of one micro-batch: its padded tokens, and per row the GRPO advantage (grpo) or the
    sequence reward (ppo: the critic's GAE turns it into token advantages)."""

    batch: Batch
    adv: list[float] | None = None  # (B,) GRPO
    turn_adv: Any = None  # (B, T') GRPO with training.update.turn_credit: added to `adv` token by token
    rewards: list[float] | None = None  # (B,) PPO


def pad_rollouts(results: list[SearchResult], rows: list[int], pad_id: int | None, *, share_prefix: bool,
                 device: str = "cpu") -> Batch:
    """The trajectories of `results[rows]` as one padded Batch: prompt + response tokens, the loss mask on the
    policy's own tokens (the prompt and the retrieved windows masked out), the rollout engine's log-probs, the first
    response position (`start`) and, with `share_prefix`, the prefix every row shares (searcher.policy.prefix_kv)."""
    import torch

    from searcher.policy.prefix_kv import MIN_SHARED_PREFIX, common_prefix_len

    pad = pad_id if pad_id is not None else 0
    seqs, masks, lps, prompt_lens = [], [], [], []
    for i in rows:
        tr = results[i].trajectory
        assert tr is not None
        seqs.append(list(tr.prompt_ids) + list(tr.response_ids))
        # position t of the shifted sequence predicts token t+1: prompt tokens are never trained on
        masks.append([0] * (len(tr.prompt_ids) - 1) + list(tr.mask))
        lps.append([0.0] * (len(tr.prompt_ids) - 1) + [lp if m else 0.0 for lp, m in zip(tr.logprobs, tr.mask, strict=True)])
        prompt_lens.append(len(tr.prompt_ids))
    L = max(len(s) for s in seqs)
    start = max(min(prompt_lens) - 1, 0)  # first position that predicts a response token
    ids = torch.full((len(seqs), L), pad, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    lm = torch.zeros((len(seqs), L - 1), dtype=torch.float32)
    rl = torch.zeros((len(seqs), L - 1), dtype=torch.float32)
    for j, (s, m, lp) in enumerate(zip(seqs, masks, lps, strict=True)):
        ids[j, : len(s)] = torch.tensor(s)
        att[j, : len(s)] = 1
        lm[j, : len(m)] = torch.tensor(m, dtype=torch.float32)
        rl[j, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
    prefix = 0
    if share_prefix and len(seqs) > 1:
        prefix = common_prefix_len(seqs, limit=start)
        if prefix < MIN_SHARED_PREFIX:
            prefix = 0
    return Batch(ids=ids.to(device), attention=att.to(device), loss_mask=lm[:, start:].to(device), start=start,
                 prefix=prefix, rollout_lp=rl[:, start:].to(device))


def token_chunks(items: Sequence[int], lengths: Sequence[int] | None, micro_batch_size: int,
                 max_tokens: int | None) -> list[list[int]]:
    """`items` cut, in order, into micro-batches of at most `micro_batch_size` whose padded size (items x the longest
    one's length, `lengths[i]` the length of items[i]) stays within `max_tokens`; an item longer than `max_tokens`
    goes alone. In order: a GRPO group's rows stay together where they fit (their shared prompt is computed once).
    Without `max_tokens` (or `lengths`) the cut is by count alone.

    >>> token_chunks([0, 1, 2, 3, 4], [100, 300, 100, 900, 50], 4, 600)
    [[0, 1], [2], [3], [4]]
    >>> token_chunks([0, 1, 2, 3, 4], [100, 300, 100, 900, 50], 2, None)
    [[0, 1], [2, 3], [4]]
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    if max_tokens is None or lengths is None:
        return [list(items[i : i + micro_batch_size]) for i in range(0, len(items), micro_batch_size)]
    if len(lengths) != len(items):
        raise ValueError(f"{len(items)} items but {len(lengths)} lengths")
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for item, n in zip(items, lengths, strict=True):
        if cur and (len(cur) == micro_batch_size or (len(cur) + 1) * max(longest, n) > max_tokens):
            out.append(cur)
            cur, longest = [], 0
        cur.append(item)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def over_budget(lengths: Sequence[int], max_tokens: int | None) -> tuple[int, int]:
    """(how many rows are longer than the token budget, the longest row): the rows that went alone.

    >>> over_budget([100, 900, 700], 600), over_budget([100], None)
    ((2, 900), (0, 100))
    """
    longest = max(lengths, default=0)
    return (0 if max_tokens is None else sum(n > max_tokens for n in lengths)), longest


@dataclass
class UpdateRows:
    """The rows of one update: which rollouts enter it (`rows`), each one's policy tokens (`tokens`, same order), and
    `micro(run_of_rows)` -> the padded MicroBatch of those rows with their advantages (GRPO) or rewards (PPO).
    `lengths` (same order): each row's tokens, prompt included, so the rows can be cut by the token budget
    (`max_tokens`: training.learner.max_tokens_per_micro_batch; None = by micro_batch_size alone)."""

    rows: list[int]
    tokens: list[float]
    micro: Callable[[list[int]], MicroBatch]
    micro_batch_size: int
    lengths: list[int] | None = None
    max_tokens: int | None = None

    def chunks(self) -> list[list[int]]:
        """The rows cut, in order, into micro-batches of at most micro_batch_size rows and, with a token budget, of
        at most max_tokens padded tokens (`token_chunks`; a longer row alone)."""
        return token_chunks(self.rows, self.lengths, self.micro_batch_size, self.max_tokens)

    def over_budget(self) -> tuple[int, int]:
        """(rows longer than max_tokens, each trained alone; the longest row's tokens)."""
        return over_budget(self.lengths or [], self.max_tokens)


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
