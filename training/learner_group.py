"""Several learners (issue 21, in progress): the pieces of a data-parallel update that need no cluster.

The plan (the actors themselves are not written yet): N learner actors form one torch.distributed group (gloo on CPU,
nccl on GPU; rank 0's address, 127.0.0.1 on a local cluster), each holds the policy (and PPO's value head) wrapped in
torch's DistributedDataParallel. The driver keeps the RL of training/algorithms.py exactly as the single learner runs
it: it computes the advantages and the rows that enter the update, then `split_for_ranks` gives every rank its
micro-batches and their loss weights. Each rank backpropagates `loss_j * weight_j` for its micro-batches under
`ddp.no_sync()` except the last (`accumulate`), so DDP all-reduces (averages) the gradients once per epoch; every
rank then clips and steps the same averaged gradient, so the parameters stay identical on every rank.

Why the weights are what they are. The single learner's update is sum_j loss_j * tokens_j / T, with loss_j the
masked per-token mean of micro-batch j and T the policy tokens of the whole batch: the global token mean. DDP averages
over the N ranks, so rank r backpropagates sum_{j in r} loss_j * N * tokens_j / T: the average over ranks is then the
single learner's gradient, whatever the split. Normalising by a rank's own token count instead gives each rank's
tokens the same total weight however many it has: another gradient (test_learner_group.py shows both).

A rank without rows (fewer rows than ranks) still has to join the all-reduce, or the others wait forever: it gets one
micro-batch (the first row) with weight 0, a gradient of zeros.

    shards = split_for_ranks(rows, tokens, world_size=2, micro_batch_size=4)
    # on rank r: accumulate(ddp, shards[r].micro_batches, shards[r].weights, loss_of)  -> then clip + optimizer.step()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from s3core.errors import ConfigError

__all__ = ["RankShard", "accumulate", "dist_backend", "split_for_ranks"]


@dataclass(frozen=True)
class RankShard:
    """One rank's part of an update: its micro-batches (row indices) and the loss weight of each."""

    micro_batches: list[list[int]]
    weights: list[float]


def split_for_ranks(
    rows: Sequence[int], tokens: Sequence[float], world_size: int, micro_batch_size: int
) -> list[RankShard]:
    """Split the update's rows (`tokens[i]`: policy tokens of rows[i]) over `world_size` ranks: contiguous runs of
    rows with about equal token counts, cut into micro-batches of at most `micro_batch_size` rows, each weighted
    world_size * (its tokens) / (all tokens). Deterministic: every rank computes the same split.

    >>> [s.micro_batches for s in split_for_ranks([0, 1, 2, 3], [1, 1, 1, 1], 2, 1)]
    [[[0], [1]], [[2], [3]]]
    >>> [s.weights for s in split_for_ranks([0, 1, 2, 3], [1, 1, 1, 1], 2, 2)]
    [[1.0], [1.0]]
    >>> split_for_ranks([7], [3], 2, 4)[1]    # a rank without rows joins the all-reduce with a zero gradient
    RankShard(micro_batches=[[7]], weights=[0.0])
    """
    if world_size < 1 or micro_batch_size < 1:
        raise ConfigError(f"world_size and micro_batch_size must be >= 1, got {world_size} and {micro_batch_size}")
    if len(rows) != len(tokens):
        raise ValueError(f"{len(rows)} rows but {len(tokens)} token counts")
    if not rows:
        raise ValueError("no rows to split (the caller skips an update without rows on every rank)")
    total = float(sum(tokens))
    if total <= 0:
        raise ValueError("the rows hold no policy tokens")
    # contiguous runs of rows, balanced by tokens: a row belongs to the rank whose share [r/N, (r+1)/N) of the
    # batch's tokens holds the row's first token
    owner: list[int] = []
    run = 0.0
    for t in tokens:
        owner.append(min(world_size - 1, int(run * world_size / total)))
        run += t
    shards = []
    for r in range(world_size):
        mine = [i for i, o in enumerate(owner) if o == r]
        if not mine:
            shards.append(RankShard(micro_batches=[[rows[0]]], weights=[0.0]))
            continue
        chunks = [mine[i : i + micro_batch_size] for i in range(0, len(mine), micro_batch_size)]
        shards.append(RankShard(
            micro_batches=[[rows[i] for i in c] for c in chunks],
            weights=[world_size * sum(tokens[i] for i in c) / total for c in chunks],
        ))
    return shards


def accumulate(ddp_model: Any, micro_batches: Sequence[Any], weights: Sequence[float], loss_of: Callable[[Any], Any]) -> None:
    """Backpropagate sum_j weight_j * loss_of(micro_batch_j) on a DistributedDataParallel model: the gradients are
    all-reduced once, on the last micro-batch (torch's `no_sync` accumulates the others locally). `loss_of` runs the
    forward through `ddp_model` and returns the micro-batch's scalar loss (training/algorithms.py)."""
    import contextlib

    last = len(micro_batches) - 1
    for j, (mb, w) in enumerate(zip(micro_batches, weights, strict=True)):
        ctx = ddp_model.no_sync() if j < last else contextlib.nullcontext()
        with ctx:
            (loss_of(mb) * w).backward()


def dist_backend(device: str) -> Literal["gloo", "nccl"]:
    """torch.distributed's backend for the learners' device: nccl on CUDA, gloo on CPU.

    >>> dist_backend("cpu"), dist_backend("cuda"), dist_backend("cuda:1")
    ('gloo', 'nccl', 'nccl')
    """
    return "nccl" if device.startswith("cuda") else "gloo"
