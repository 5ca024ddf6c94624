"""Several learners (issue 21): one data-parallel update over N learner actors (ray.learners = N > 1).

N learner actors (`LearnerGroup`, `DDPLearner`) form one torch.distributed process group (gloo on CPU, nccl on GPU; the
rendezvous on rank 0's node address, 127.0.0.1 on a local cluster). Each rank builds the same learner (the trainer's:
training.learn.learner.Learner, from the configuration and the checkpoint to resume from) and takes rank 0's trainable
parameters when the group forms. The group is the training loop's learner as the single Learner is (both implement
training/learn/api.py's `PolicyLearner`): the loop computes the advantages and the rows that enter the update and
hands them over (`UpdateRows`); the group's `update` pads them, `split_for_ranks` gives every rank its micro-batches
and their loss weights, and the ranks' stats are merged into the single learner's (`merge_rank_stats`). Each rank
backpropagates `loss_j * weight_j` for its micro-batches (`training.learner.masked_update` through
`Learner.update_shard`, the single learner's code), the gradients are all-reduced (mean) once per epoch
(`allreduce_mean_`, flat buckets), and every rank clips and steps the same averaged gradient, so the parameters and the
optimizer state stay identical on every rank. Rank 0 writes the checkpoint's model folders and hands its optimizer /
scheduler state to the driver (trainer_state.pt, the single learner's format); on resume every rank loads the
checkpoint's weights and that state. Rank 0's weights go to the rollout engines through the object store.

Why an explicit all-reduce rather than wrapping the model in DistributedDataParallel: the trainer's forward computes a
shared prompt prefix once and continues every row on its KV cache (two forward calls per backward), and PPO's critic is
a separate module; DDP's one-forward-one-backward contract fits neither. The reduction is the same mean DDP's reducer
computes; what is given up is DDP's overlap of communication with the backward pass (a GPU-cluster optimisation).
FSDP is not offered: it could not be tested here.

Why the weights are what they are. The single learner's update is sum_j loss_j * tokens_j / T, with loss_j the
masked per-token mean of micro-batch j and T the policy tokens of the whole batch: the global token mean. The all-reduce
averages over the N ranks, so rank r backpropagates sum_{j in r} loss_j * N * tokens_j / T: the average over ranks is
then the single learner's gradient, whatever the split. Normalising by a rank's own token count instead gives each
rank's tokens the same total weight however many it has: another gradient (tests/unit/test_learner_group.py shows both). The
loss stats are weighted the same way, so their mean over ranks is the single learner's.

A rank without rows (fewer rows than ranks) still has to join the all-reduce, or the others wait forever: it gets one
micro-batch (the first row) with weight 0, a gradient of zeros.

A lost learner is not restarted (a restarted rank could not re-enter the running group): the step fails and the run
resumes from its last checkpoint (the same data order).

    report = group.update(UpdateRows(rows, tokens, micro, micro_batch_size=4))   # the loop's call
    shards = split_for_ranks(rows, tokens, world_size=2, micro_batch_size=4)     # what it does with them:
    group.update_shards([[micro(b) for b in s.micro_batches] ...], [s.weights for s in shards])   # rank r: shards[r]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from s3core.errors import ConfigError, S3Error
from s3runtime.config import RayConfig
from s3runtime.raycluster import RayWorker, WorkerPool, connect, require_ray, worker_threads
from training.learn.api import UpdateReport, UpdateRows, token_chunks

if TYPE_CHECKING:
    from training.learn.api import Batch
    from training.learn.learner import UpdateOut

__all__ = ["DDPLearner", "LearnerGroup", "LossLearner", "RankShard", "allreduce_mean_", "dist_backend",
           "grpo_microbatch_loss", "merge_rank_stats", "split_for_ranks"]


@dataclass(frozen=True)
class RankShard:
    """One rank's part of an update: its micro-batches (row indices) and the loss weight of each."""

    micro_batches: list[list[int]]
    weights: list[float]


def split_for_ranks(
    rows: Sequence[int], tokens: Sequence[float], world_size: int, micro_batch_size: int,
    lengths: Sequence[int] | None = None, max_tokens: int | None = None,
) -> list[RankShard]:
    """Split the update's rows (`tokens[i]`: policy tokens of rows[i]) over `world_size` ranks: contiguous runs of
    rows with about equal token counts, cut into micro-batches of at most `micro_batch_size` rows (and, with
    `lengths` and a token budget `max_tokens`, of at most max_tokens padded tokens: training/learn/api.py
    `token_chunks`), each weighted world_size * (its tokens) / (all tokens). Deterministic: every rank computes the
    same split.

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
        chunks = token_chunks(mine, None if lengths is None else [lengths[i] for i in mine], micro_batch_size,
                              max_tokens)
        shards.append(RankShard(
            micro_batches=[[rows[i] for i in c] for c in chunks],
            weights=[world_size * sum(tokens[i] for i in c) / total for c in chunks],
        ))
    return shards


def merge_rank_stats(outs: Sequence[UpdateOut]) -> dict[str, float]:
    """The ranks' update outputs as the single learner's stats: each rank's stats carry weight N * tokens / T, so their
    mean is the single learner's; the gradient norm is the same on every rank (the averaged gradient); the log-prob
    gap sums add up."""
    from training.learn.learner import GapSums

    stats: dict[str, float] = {}
    gaps = GapSums()
    for o in outs:
        gaps = gaps.add(o.gaps)
        for key, v in o.stats.items():
            stats[key] = stats.get(key, 0.0) + v / len(outs)
    stats["losses/grad_norm"] = outs[0].stats["losses/grad_norm"]
    stats.update(gaps.stats())
    return stats


def allreduce_mean_(params: Sequence[Any], world_size: int, bucket: int = 1 << 24) -> None:
    """Replace every parameter's gradient by its mean over the ranks (what DistributedDataParallel's reducer computes),
    in flat buckets of at most `bucket` elements: one all-reduce per bucket. A parameter without a gradient on this
    rank counts as zeros (every rank runs the same model on its micro-batches, so they agree on which have one)."""
    import torch
    import torch.distributed as dist

    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    i = 0
    while i < len(grads):
        j, n = i, 0
        while j < len(grads) and (j == i or n + grads[j].numel() <= bucket):
            n += grads[j].numel()
            j += 1
        flat = torch.cat([g.reshape(-1) for g in grads[i:j]])
        dist.all_reduce(flat)
        flat /= world_size
        off = 0
        for g in grads[i:j]:
            g.copy_(flat[off : off + g.numel()].view_as(g))
            off += g.numel()
        i = j


def dist_backend(device: str) -> Literal["gloo", "nccl"]:
    """torch.distributed's backend for the learners' device: nccl on CUDA, gloo on CPU.

    >>> dist_backend("cpu"), dist_backend("cuda"), dist_backend("cuda:1")
    ('gloo', 'nccl', 'nccl')
    """
    return "nccl" if device.startswith("cuda") else "gloo"


def grpo_microbatch_loss(model: Any, mb: dict[str, Any], clip_coef: float = 0.2, kl_coef: float = 0.001) -> Any:
    """The GRPO loss of one padded micro-batch (training/learn/algorithms.py): mb = {"ids": (B, T+1) token ids, "mask":
    (B, T) policy-token mask, "adv": (B,) advantages, "ref": (B, T) reference log-probs or None, "old": (B, T) rollout
    log-probs or None (= the current ones, detached: the first epoch)}. `model(ids)` gives logits (or has `.logits`)."""
    from training.learn import algorithms as alg

    ids = mb["ids"]
    out = model(ids[:, :-1])
    logits = getattr(out, "logits", out)
    lp = alg.gather_logprobs(logits, ids[:, 1:])  # (B, T)
    old = mb.get("old")
    return alg.grpo_loss(lp, lp.detach() if old is None else old, mb.get("ref"), mb["adv"], mb["mask"], clip_coef,
                         kl_coef).loss


class LossLearner:
    """The smallest learner a rank can hold: any torch model, an optimizer, a loss function of (model, micro-batch).
    The trainer's ranks hold a training.learn.learner.Learner instead (the masked PPO / GRPO update); both answer
    `update_shard(micro_batches, weights, reduce_grads)`, `parameters()` and `state_dict()`."""

    def __init__(self, model: Any, make_optimizer: Callable[[Any], Any], loss_of: Callable[[Any, Any], Any],
                 max_grad_norm: float) -> None:
        self.model, self.loss_of, self.max_grad_norm = model, loss_of, max_grad_norm
        self.optimizer = make_optimizer(model.parameters())

    def parameters(self) -> list[Any]:
        return [q for g in self.optimizer.param_groups for q in g["params"]]

    def update_shard(self, micro_batches: Sequence[Any], weights: Sequence[float],
                     reduce_grads: Callable[[list[Any]], None] | None = None) -> dict[str, float]:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        for mb, w in zip(micro_batches, weights, strict=True):
            (self.loss_of(self.model, mb) * w).backward()
        if reduce_grads is not None:
            reduce_grads(self.parameters())
        gn = torch.nn.utils.clip_grad_norm_(self.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return {"losses/grad_norm": float(gn)}

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}


class DDPLearner(RayWorker):
    """One rank of a LearnerGroup: a learner built in this actor by `build()` (a training.learn.learner.Learner, or a
    LossLearner), a member of the group's torch.distributed process group."""

    def __init__(self, rank: int, world_size: int, build: Callable[[], Any], device: str = "cpu",
                 cpus: float = 1.0) -> None:
        import torch

        torch.set_num_threads(worker_threads(cpus))
        self.rank, self.world_size, self.device = rank, world_size, device
        self.learner = build()

    def free_port(self) -> int:
        """A free TCP port on this node for the rendezvous (asked of rank 0)."""
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def join(self, addr: str, port: int, timeout_s: float = 300.0) -> None:
        """Enter the process group (every rank at once: it blocks until all have come), then take rank 0's trainable
        parameters (as DistributedDataParallel does when it wraps a model: e.g. a LoRA's random initialisation)."""
        import os
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        if addr.startswith("127.") and dist_backend(self.device) == "gloo":
            # a local group stays on loopback: gloo otherwise connects over the interface its hostname resolves to
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(dist_backend(self.device), init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                world_size=self.world_size, timeout=timedelta(seconds=timeout_s))
        with torch.no_grad():
            for p in self.learner.parameters():
                dist.broadcast(p.data, src=0)

    def update_shard(self, micro_batches: list[Any], weights: list[float]) -> Any:
        """This rank's weighted micro-batches, the all-reduce (mean) of the gradients, clipping, the optimizer step:
        the learner's own `update_shard` with the group's gradient reduction."""
        return self.learner.update_shard(micro_batches, weights, lambda ps: allreduce_mean_(ps, self.world_size))

    def call(self, method: str, *args: Any) -> Any:
        """Any other method of the learner (save, state, load_state, step_scheduler, state_dict, ...)."""
        return getattr(self.learner, method)(*args)

    def weights_ref(self) -> list[Any]:
        """The learner's weights (checkpoint names, LoRA merged) put into the object store from this rank; the
        reference comes back wrapped in a list (Ray hands a nested reference over as it is)."""
        import ray

        return [ray.put(self.learner.weights())]

    def state_dict(self) -> dict[str, Any]:
        return dict(self.learner.state_dict())

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class LearnerGroup:
    """N DDPLearner actors in one process group (see the module docstring). With training.learn.learner.Learner ranks it is
    the training loop's learner (training/learn/api.py `PolicyLearner`); with any rank learner it runs shards.

        group = LearnerGroup(cfg.ray, 2, functools.partial(LossLearner, model, make_optimizer, loss_of, 1.0))
        shards = split_for_ranks(rows, tokens, 2, micro_batch_size)
        group.update_shards([[batch_of(mb) for mb in s.micro_batches] for s in shards], [s.weights for s in shards])
    """

    def __init__(self, rc: RayConfig, world_size: int, build: Callable[[], Any], *, device: str = "cpu",
                 cpus: float = 0.5, gpus: float = 0.0, resources: dict[str, float] | None = None) -> None:
        connect(rc)
        ray = require_ray()
        self.world_size = world_size
        # no restarts: a restarted rank could not re-enter the running group (a lost learner fails the step; the run
        # resumes from its last checkpoint)
        self.pool = WorkerPool.start(
            "learner", DDPLearner,
            [(r, world_size, build, device, cpus) for r in range(world_size)],
            rc=rc.model_copy(update={"max_restarts": 0}), cpus=cpus, gpus=gpus, resources=resources,
        )
        rank0 = self.pool.actors[0]
        addr, port = ray.get(rank0.node.remote()), ray.get(rank0.free_port.remote())
        try:
            ray.get([a.join.remote(addr, port) for a in self.pool.actors])  # all at once: the rendezvous blocks
        except Exception:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.pool)

    # -------------------------------------------------------------- the loop's learner (training/learn/api.py)
    batch_device = "cpu"  # the driver pads on the CPU; each rank moves its micro-batches to its own device

    def update(self, rows: UpdateRows) -> UpdateReport:
        """One update of the loop's rows: split over the ranks by policy tokens, padded per micro-batch, run on every
        rank at once; the ranks' stats merged into the single learner's."""
        shards = split_for_ranks(rows.rows, rows.tokens, len(self), rows.micro_batch_size, rows.lengths, rows.max_tokens)
        per_rank = [[rows.micro(b) for b in s.micro_batches] for s in shards]
        outs = self.update_shards(per_rank, [s.weights for s in shards])
        batches = [mb.batch for r, s in zip(per_rank, shards, strict=True) for mb, w in zip(r, s.weights, strict=True) if w]
        return UpdateReport(stats=merge_rank_stats(outs), tokens=float(sum(rows.tokens)), batches=batches)

    def step_scheduler(self) -> float:
        return float(self.call_all("step_scheduler")[0])  # every rank's scheduler steps; the same rate

    def save(self, out: Path) -> dict[str, Any]:
        """Rank 0 writes the checkpoint's model folders (every rank holds the same) and returns its state."""
        return dict(self.call_rank0("save", str(out)))

    def load_state(self, state: dict[str, Any]) -> None:
        self.call_all("load_state", require_ray().put(state))  # every rank resumes the same optimizer / scheduler

    def sft_update(self, batches: list[Batch]) -> dict[str, float]:
        raise S3Error("the format warm-up (training.sft.steps) runs with one learner: set ray.learners = 1")

    def end_warmup(self) -> Path | None:
        raise S3Error("the format warm-up (training.sft.steps) runs with one learner: set ray.learners = 1")

    def logprobs(self, batch: Batch) -> Any:
        raise S3Error("the confidence-gated reward's log-prob check runs with one learner: set ray.learners = 1")

    # -------------------------------------------------------------- the ranks
    def update_shards(self, micro_batches: list[list[Any]], weights: list[list[float]]) -> list[Any]:
        """One update on every rank at once (rank r: micro_batches[r] with weights[r]); each rank's output."""
        ray = require_ray()
        if len(micro_batches) != len(self.pool) or len(weights) != len(self.pool):
            raise ValueError(f"{len(self.pool)} ranks, but {len(micro_batches)} shards / {len(weights)} weight lists")
        return list(ray.get([a.update_shard.remote(m, w) for a, m, w in zip(self.pool.actors, micro_batches, weights,
                                                                               strict=True)]))

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """The learner's `method(*args)` on every rank at once; the outputs in rank order."""
        ray = require_ray()
        return list(ray.get([a.call.remote(method, *args) for a in self.pool.actors]))

    def call_rank0(self, method: str, *args: Any) -> Any:
        """The learner's `method(*args)` on rank 0 only (the checkpoint is written once, by rank 0)."""
        ray = require_ray()
        return ray.get(self.pool.actors[0].call.remote(method, *args))

    def weights_ref(self) -> Any:
        """A reference to rank 0's weights in the object store (every rank holds the same ones)."""
        ray = require_ray()
        return ray.get(self.pool.actors[0].weights_ref.remote())[0]

    def pids(self) -> list[int]:
        return self.pool.pids()

    def nodes(self) -> list[str]:
        """Each rank's node address."""
        return [str(n) for n in self.pool.call_all("node")]

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
