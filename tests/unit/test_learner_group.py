"""Several learners (issue 21), the pieces without a cluster: how an update's rows are split over the ranks, and
that the loss weights make the gradient averaged over ranks (what DistributedDataParallel's all-reduce computes)
equal the single learner's gradient, with the real GRPO loss of training/learn/algorithms.py on a tiny torch model.
The all-reduce itself (2 gloo ranks as Ray actors): tests/integration/test_learner_group_gloo.py."""

from __future__ import annotations

import doctest
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import training.learn.learner_group as lg
from s3core.errors import ConfigError
from training.learn import algorithms as alg
from training.learn.learner_group import LossLearner, grpo_microbatch_loss, split_for_ranks

VOCAB, T = 11, 7


def _problem(n_rows: int, seed: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB)).double()
    ids = torch.randint(0, VOCAB, (n_rows, T + 1))  # (N, T+1)
    mask = torch.zeros(n_rows, T, dtype=torch.float64)  # (N, T): rows with 1..T policy tokens, very unequal
    for i in range(n_rows):
        n = 1 + (i * 5) % T
        mask[i, T - n :] = 1.0
    data = {"ids": ids, "mask": mask, "adv": torch.randn(n_rows, dtype=torch.float64),
            "ref": torch.randn(n_rows, T, dtype=torch.float64) * 0.1 - 2.0}
    return model, data


def _loss(model: torch.nn.Module, d: dict[str, torch.Tensor], rows: list[int]) -> torch.Tensor:
    mb = {"ids": d["ids"][rows], "mask": d["mask"][rows], "adv": d["adv"][rows], "ref": d["ref"][rows]}
    return grpo_microbatch_loss(model, mb, clip_coef=0.2, kl_coef=0.05)


def test_grpo_microbatch_loss_is_the_algorithms_loss() -> None:
    model, d = _problem(3)
    ids = d["ids"]
    lp = alg.gather_logprobs(model(ids[:, :-1]), ids[:, 1:])  # (B, T)
    want = alg.grpo_loss(lp, lp.detach(), d["ref"], d["adv"], d["mask"], 0.2, 0.05).loss
    torch.testing.assert_close(_loss(model, d, [0, 1, 2]), want)


def test_a_rank_reduces_the_gradients_once_per_update_after_all_its_micro_batches() -> None:
    """The all-reduce runs once, after every micro-batch was backpropagated (weighted), before clipping and the step;
    here the reduction is recorded instead of all-reduced (the real one: tests/integration/test_learner_group_gloo.py)."""
    model, d = _problem(4)
    mbs, ws = [[0], [1, 2], [3]], [0.5, 1.0, 0.5]
    want = _grad(model, d, mbs, ws)
    seen: list[torch.Tensor] = []

    def record(params: list[torch.Tensor]) -> None:
        seen.append(torch.cat([p.grad.flatten() for p in params]))  # type: ignore[union-attr]

    learner = LossLearner(model, lambda ps: torch.optim.SGD(ps, lr=0.0), lambda m, mb: _loss(m, d, mb), 1e9)
    learner.update_shard(mbs, ws, record)
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], want)


def _grad(model: torch.nn.Module, d: dict[str, torch.Tensor], mbs: list[list[int]], weights: list[float]) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    for mb, w in zip(mbs, weights, strict=True):
        (_loss(model, d, mb) * w).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])  # type: ignore[union-attr]


def _single_learner_grad(model: torch.nn.Module, d: dict[str, torch.Tensor], rows: list[int], mbs: int) -> torch.Tensor:
    """What the single Learner.update does: micro-batches weighted by their share of the batch's policy tokens."""
    tokens = d["mask"].sum(1)
    total = float(tokens[rows].sum())
    chunks = [rows[i : i + mbs] for i in range(0, len(rows), mbs)]
    return _grad(model, d, chunks, [float(tokens[c].sum()) / total for c in chunks])


@pytest.mark.parametrize(("n_rows", "world", "mbs"), [(6, 2, 2), (7, 2, 3), (5, 3, 1), (8, 4, 4), (2, 3, 2)])
def test_rank_weights_make_the_averaged_gradient_the_single_learners(n_rows: int, world: int, mbs: int) -> None:
    model, d = _problem(n_rows)
    rows = list(range(n_rows))
    single = _single_learner_grad(model, d, rows, mbs)
    shards = split_for_ranks(rows, d["mask"].sum(1).tolist(), world, mbs)
    per_rank = [_grad(model, d, s.micro_batches, s.weights) for s in shards]
    averaged = torch.stack(per_rank).mean(0)  # DDP's all-reduce: the mean over ranks
    # equal up to float32 rounding (gather_logprobs takes its log-softmax in float32, as the learner does)
    torch.testing.assert_close(averaged, single, rtol=1e-5, atol=1e-6)


def test_per_rank_token_normalisation_would_be_another_gradient() -> None:
    """The pitfall the weights avoid: each rank normalising by its own token count."""
    model, d = _problem(6)
    rows = list(range(6))
    tokens = d["mask"].sum(1).tolist()
    single = _single_learner_grad(model, d, rows, 2)
    shards = split_for_ranks(rows, tokens, 2, 2)
    local = []
    for s in shards:
        own = sum(tokens[i] for mb in s.micro_batches for i in mb)
        local.append(_grad(model, d, s.micro_batches, [sum(tokens[i] for i in mb) / own for mb in s.micro_batches]))
    assert not torch.allclose(torch.stack(local).mean(0), single, rtol=1e-3, atol=1e-6)


def test_split_covers_every_row_once_in_order_balanced_by_tokens() -> None:
    rows = [3, 4, 8, 9, 10, 15]
    tokens = [10.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    shards = split_for_ranks(rows, tokens, 2, 2)
    assert [s.micro_batches for s in shards] == [[[3]], [[4, 8], [9, 10], [15]]]  # 10 tokens | 10 tokens
    assert [sum(s.weights) for s in shards] == [1.0, 1.0]  # each rank holds half the tokens: N * 1/2
    flat = [i for s in shards for mb in s.micro_batches for i in mb]
    assert flat == rows
    # more ranks than rows: the idle ranks get a zero-weight micro-batch (they must join the all-reduce)
    idle = split_for_ranks([5, 6], [1.0, 1.0], 4, 2)
    assert [s.weights for s in idle] == [[2.0], [0.0], [2.0], [0.0]]
    assert sorted(i for s in idle for mb, w in zip(s.micro_batches, s.weights, strict=True) if w for i in mb) == [5, 6]


def test_split_refuses_bad_input() -> None:
    with pytest.raises(ConfigError, match="world_size"):
        split_for_ranks([0], [1.0], 0, 1)
    with pytest.raises(ValueError, match="no rows"):
        split_for_ranks([], [], 2, 1)
    with pytest.raises(ValueError, match="token counts"):
        split_for_ranks([0, 1], [1.0], 2, 1)


def test_doctests() -> None:
    assert doctest.testmod(lg).failed == 0


def test_allreduce_mean_copies_every_bucket_back_and_fills_missing_gradients(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`allreduce_mean_` in a one-rank gloo group (all_reduce = identity) with buckets smaller than the tensors and
    `world_size=2` passed: every gradient comes back divided by 2 across the bucket boundaries; a parameter without a
    gradient gets zeros (ranks must agree on the tensors they reduce)."""
    import torch.distributed as dist

    from training.learn.learner_group import allreduce_mean_

    # an in-process vLLM engine (the session's, in the full suite) leaves a one-rank default group behind: use it then
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    assert dist.get_world_size() == 1
    try:
        ps = [torch.nn.Parameter(torch.zeros(n)) for n in (3, 7, 1, 4)]
        for i, p in enumerate(ps[:3]):
            p.grad = torch.arange(len(p), dtype=torch.float32) + 10 * i
        want = [p.grad.clone() / 2 for p in ps[:3]]  # type: ignore[union-attr]
        allreduce_mean_(ps, world_size=2, bucket=5)
        for p, w in zip(ps[:3], want, strict=True):
            torch.testing.assert_close(p.grad, w)
        assert ps[3].grad is not None and torch.equal(ps[3].grad, torch.zeros(4))
    finally:
        if owned:
            dist.destroy_process_group()


def test_the_group_splits_the_loops_rows_over_its_ranks_and_merges_their_stats_into_the_single_learners() -> None:
    """LearnerGroup.update (the learner interface's `update`) without a cluster: its ranks replaced by one that records
    what each got. Rows go out as `split_for_ranks` cuts them, padded per micro-batch by the loop's `micro`; the ranks'
    stats come back as their mean (each carries weight N * tokens / T), the gradient norm as rank 0's (the same
    averaged gradient), the log-prob gap sums added up; idle ranks' zero-weight micro-batches are left out."""
    from training.learn.api import MicroBatch, UpdateRows
    from training.learn.learner import GapSums, UpdateOut

    got: list[tuple[list[list[int]], list[list[float]]]] = []

    class Recorded(lg.LearnerGroup):
        def __init__(self) -> None:  # no actors: the split and the merge alone
            pass

        def __len__(self) -> int:
            return 3

        def update_shards(self, micro_batches: list[list[Any]], weights: list[list[float]]) -> list[Any]:
            got.append(([mb.adv for mbs in micro_batches for mb in mbs], weights))
            return [UpdateOut({"losses/total": 3.0 * (r + 1), "losses/grad_norm": 0.5}, GapSums(2.0 * r, 4.0, r))
                    for r in range(3)]

    def micro(rows: list[int]) -> MicroBatch:
        return MicroBatch(batch=SimpleNamespace(rows=rows), adv=[float(i) for i in rows])  # type: ignore[arg-type]

    report = Recorded().update(UpdateRows(rows=[4, 5], tokens=[3.0, 1.0], micro=micro, micro_batch_size=2))
    [(advs, weights)] = got
    assert advs == [[4.0], [4.0], [5.0]] and weights == [[2.25], [0.0], [0.75]]  # rank 1 idle: row 4, weight 0
    assert [b.rows for b in report.batches] == [[4], [5]] and report.tokens == 4.0
    assert report.stats == {"losses/total": 6.0, "losses/grad_norm": 0.5,
                            "rollout/logprob_gap_mean_abs": 6.0 / 12.0, "rollout/logprob_gap_max": 2.0}
    assert lg.merge_rank_stats([UpdateOut({"losses/grad_norm": 1.0})]) == {"losses/grad_norm": 1.0}
