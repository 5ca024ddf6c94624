"""Several learners (issue 21, in progress): a data-parallel update over N learner actors.

N learner actors (`LearnerGroup`, `DDPLearner`) form one torch.distributed group (gloo on CPU, nccl on GPU; the
rendezvous on rank 0's node address, 127.0.0.1 on a local cluster), each holds the model wrapped in torch's
DistributedDataParallel (which broadcasts rank 0's parameters when it wraps them, so every rank starts equal).
Not yet: the trainer does not use it (S3Trainer.update still runs in the driver; its per-micro-batch loss must move into
`loss_of`), checkpoints (rank 0 writes, every rank loads), weight sync from rank 0 to the rollout engines, and a lost
learner (the group would have to be formed again: the actors have no restarts for now). The driver keeps the RL of training/algorithms.py exactly as the single learner runs
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

from eval.config import RayConfig
from eval.raycluster import RayWorker, WorkerPool, connect, require_ray, worker_threads
from s3core.errors import ConfigError

__all__ = ["DDPLearner", "LearnerGroup", "RankShard", "accumulate", "dist_backend", "grpo_microbatch_loss",
           "split_for_ranks"]


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


def grpo_microbatch_loss(model: Any, mb: dict[str, Any], clip_coef: float = 0.2, kl_coef: float = 0.001) -> Any:
    """The GRPO loss of one padded micro-batch (training/algorithms.py): mb = {"ids": (B, T+1) token ids, "mask":
    (B, T) policy-token mask, "adv": (B,) advantages, "ref": (B, T) reference log-probs or None, "old": (B, T) rollout
    log-probs or None (= the current ones, detached: the first epoch)}. `model(ids)` gives logits (or has `.logits`)."""
    from training import algorithms as alg

    ids = mb["ids"]
    out = model(ids[:, :-1])
    logits = getattr(out, "logits", out)
    lp = alg.gather_logprobs(logits, ids[:, 1:])  # (B, T)
    old = mb.get("old")
    return alg.grpo_loss(lp, lp.detach() if old is None else old, mb.get("ref"), mb["adv"], mb["mask"], clip_coef,
                         kl_coef).loss


class DDPLearner(RayWorker):
    """One rank of a LearnerGroup: the model (DDP-wrapped once the group has formed), its optimizer, the loss."""

    def __init__(self, rank: int, world_size: int, model: Any, make_optimizer: Callable[[Any], Any],
                 loss_of: Callable[[Any, Any], Any], max_grad_norm: float, device: str = "cpu", cpus: float = 1.0) -> None:
        import torch

        torch.set_num_threads(worker_threads(cpus))
        self.rank, self.world_size, self.device = rank, world_size, device
        self.model = model.to(device)
        self.optimizer = make_optimizer(self.model.parameters())
        self.loss_of = loss_of
        self.max_grad_norm = max_grad_norm
        self.ddp: Any = None

    def free_port(self) -> int:
        """A free TCP port on this node for the rendezvous (asked of rank 0)."""
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def join(self, addr: str, port: int, timeout_s: float = 300.0) -> None:
        """Enter the process group (every rank at once: it blocks until all have come) and wrap the model."""
        import os
        from datetime import timedelta

        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        if addr.startswith("127.") and dist_backend(self.device) == "gloo":
            # a local group stays on loopback: gloo otherwise connects over the interface its hostname resolves to
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(dist_backend(self.device), init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                world_size=self.world_size, timeout=timedelta(seconds=timeout_s))
        ids = [int(self.device.split(":")[1])] if self.device.startswith("cuda:") else None
        self.ddp = DistributedDataParallel(self.model, device_ids=ids)

    def update(self, micro_batches: list[Any], weights: list[float]) -> dict[str, float]:
        """One update: this rank's weighted micro-batches, the all-reduce (DDP), clipping, the optimizer step."""
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        accumulate(self.ddp, micro_batches, weights, lambda mb: self.loss_of(self.ddp, mb))
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return {"losses/grad_norm": float(gn)}

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class LearnerGroup:
    """N DDPLearner actors in one process group (see the module docstring).

        group = LearnerGroup(cfg.ray, 2, model, functools.partial(torch.optim.AdamW, lr=1e-6), loss_of, 1.0)
        shards = split_for_ranks(rows, tokens, 2, micro_batch_size)
        group.update([[batch_of(mb) for mb in s.micro_batches] for s in shards], [s.weights for s in shards])
    """

    def __init__(self, rc: RayConfig, world_size: int, model: Any, make_optimizer: Callable[[Any], Any],
                 loss_of: Callable[[Any, Any], Any], max_grad_norm: float, *, device: str = "cpu",
                 cpus: float = 0.5) -> None:
        connect(rc)
        ray = require_ray()
        # no restarts: a restarted rank could not re-enter the running group (not handled yet)
        self.pool = WorkerPool.start(
            "learner", DDPLearner,
            [(r, world_size, model, make_optimizer, loss_of, max_grad_norm, device, cpus) for r in range(world_size)],
            rc=rc.model_copy(update={"max_restarts": 0}), cpus=cpus, gpus=1.0 if device.startswith("cuda") else 0.0,
        )
        rank0 = self.pool.actors[0]
        addr, port = ray.get(rank0.node.remote()), ray.get(rank0.free_port.remote())
        try:
            ray.get([a.join.remote(addr, port) for a in self.pool.actors])  # all at once: the rendezvous blocks
        except Exception:
            self.close()
            raise

    def update(self, micro_batches: list[list[Any]], weights: list[list[float]]) -> list[dict[str, float]]:
        """One update on every rank at once (rank r: micro_batches[r] with weights[r]); each rank's stats."""
        ray = require_ray()
        if len(micro_batches) != len(self.pool) or len(weights) != len(self.pool):
            raise ValueError(f"{len(self.pool)} ranks, but {len(micro_batches)} shards / {len(weights)} weight lists")
        return list(ray.get([a.update.remote(m, w) for a, m, w in zip(self.pool.actors, micro_batches, weights,
                                                                         strict=True)]))

    def state_dicts(self) -> list[dict[str, Any]]:
        """Every rank's parameters (equal after every update: the test of the group)."""
        ray = require_ray()
        return list(ray.get([a.state_dict.remote() for a in self.pool.actors]))

    def close(self) -> None:
        import contextlib

        ray = require_ray()
        with contextlib.suppress(Exception):
            ray.get([a.close.remote() for a in self.pool.actors], timeout=60)
        self.pool.close()
