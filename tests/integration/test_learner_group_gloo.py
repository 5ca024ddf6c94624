"""Several learners (issue 21) on the session's real Ray cluster: 2 DDPLearner actors in one gloo process group on
127.0.0.1 (gradients all-reduced, mean) make one GRPO update (training/learn/algorithms.py's loss) from a batch split by
`split_for_ranks`; their parameters equal the single learner's update on the same batch within 1e-5, and each other.
A tiny torch model (embedding + linear over 11 tokens): the mechanism alone; through the trainer (ray.learners = 2):
tests/integration/test_learners_trainer.py."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from training.learn.learner_group import LearnerGroup, LossLearner, grpo_microbatch_loss, split_for_ranks

pytestmark = [pytest.mark.integration]
pytest.importorskip("ray")

VOCAB, T, N = 11, 7, 7


def _batch(rows: list[int], d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"ids": d["ids"][rows], "mask": d["mask"][rows], "adv": d["adv"][rows], "ref": d["ref"][rows]}


def test_two_gloo_learners_update_equals_one_learner(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    from s3runtime.config import RayConfig

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
    mask = torch.zeros(N, T)
    for i in range(N):
        mask[i, T - 1 - (i * 5) % T :] = 1.0  # 1..T policy tokens a row, unequal
    d = {"ids": torch.randint(0, VOCAB, (N, T + 1)), "mask": mask, "adv": torch.randn(N),
         "ref": torch.randn(N, T) * 0.1 - 2.0}
    loss_of = functools.partial(grpo_microbatch_loss, clip_coef=0.2, kl_coef=0.05)
    make_opt = functools.partial(torch.optim.SGD, lr=0.5)
    rows, mbs = list(range(N)), 2
    tokens = mask.sum(1).tolist()

    # the single learner (Learner.update's weighting: each micro-batch's share of the batch's policy tokens)
    single = copy.deepcopy(model)
    opt = make_opt(single.parameters())
    opt.zero_grad()
    for lo in range(0, N, mbs):
        chunk = rows[lo : lo + mbs]
        (loss_of(single, _batch(chunk, d)) * (sum(tokens[i] for i in chunk) / sum(tokens))).backward()
    torch.nn.utils.clip_grad_norm_(single.parameters(), 1.0)
    opt.step()

    shards = split_for_ranks(rows, tokens, 2, mbs)
    assert all(s.micro_batches for s in shards)
    build = functools.partial(LossLearner, copy.deepcopy(model), make_opt, loss_of, 1.0)
    group = LearnerGroup(RayConfig(num_cpus=2), 2, build, cpus=0.5)
    try:
        group.update_shards([[_batch(mb, d) for mb in s.micro_batches] for s in shards], [s.weights for s in shards])
        rank0, rank1 = group.state_dicts()
    finally:
        group.close()
    want = single.state_dict()
    moved = max(float((want[k] - model.state_dict()[k]).abs().max()) for k in want)
    assert moved > 1e-3  # the update did change the parameters
    for k in want:
        torch.testing.assert_close(rank0[k], want[k], rtol=0, atol=1e-5)
        torch.testing.assert_close(rank1[k], rank0[k], rtol=0, atol=0)
