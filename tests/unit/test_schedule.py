"""training/run/schedule.py without a trainer: the data order (warm-up stream, RL from the start, a distillation pool,
purity in (seed, step)), what a checkpoint records of it and the resume check, and the held-out schedule."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import training.run.schedule as schedule
from s3core.errors import S3Error
from training.config import TrainingConfig
from training.run.schedule import DATA_ORDER, DataOrder, HeldoutSchedule


def _order(n: int, batch: int, seed: int = 0, warmup: int = 0, pool: list[int] | None = None) -> DataOrder:
    return DataOrder(ids=tuple(f"q{i}" for i in range(n)), batch_size=batch, seed=seed, warmup_steps=warmup,
                     pool=None if pool is None else tuple(pool))


def test_rl_steps_start_the_order_afresh_after_the_warm_up_so_ceil_n_over_b_steps_cover_every_question() -> None:
    pytest.importorskip("torch")
    t = _order(10, 4, warmup=3)
    warm = [i for s in range(3) for i in t.batch_indices(s)]
    rl = [i for s in range(3, 6) for i in t.batch_indices(s)]  # ceil(10 / 4) = 3 RL steps
    assert set(rl[:10]) == set(range(10))  # every question in an RL batch, whatever the warm-up drew
    assert warm[:4] != rl[:4]  # the warm-up draws from a stream of its own
    assert rl == [i for s in range(3) for i in _order(10, 4).batch_indices(s)]  # RL step k = no-warm-up step k
    assert [t.rl_coverage(s) for s in (2, 3, 4, 5, 6)] == [0.0, 0.4, 0.8, 1.0, 1.0]


def test_a_distillation_pool_limits_the_warm_up_to_its_questions_and_leaves_the_rl_order_alone() -> None:
    """training.sft.keep = 'gbr_positive': the warm-up permutes the kept questions (every one before any repeats);
    the RL steps see every training question in the order a run without a pool would."""
    pytest.importorskip("torch")
    pool = [1, 4, 6, 9]
    t = _order(10, 3, warmup=4, pool=pool)
    warm = [i for s in range(4) for i in t.batch_indices(s)]
    assert set(warm) == set(pool) and sorted(warm[:4]) == pool  # an epoch over the pool, then the next
    rl = [i for s in range(4, 8) for i in t.batch_indices(s)]
    assert rl == [i for s in range(4, 8) for i in _order(10, 3, warmup=4).batch_indices(s)]
    assert set(rl[:10]) == set(range(10))


def test_data_order_is_a_pure_function_of_seed_and_step() -> None:
    pytest.importorskip("torch")
    t = _order(7, 3)
    first = [t.batch_indices(s) for s in range(5)]
    assert first == [_order(7, 3).batch_indices(s) for s in range(5)]  # a "resumed" run: same batches
    # epoch 0 covers every question exactly once before epoch 1 starts (7 = 3 + 3 + 1 | 2 ...)
    flat = [i for b in first for i in b]
    assert sorted(flat[:7]) == list(range(7))
    assert sorted(flat[7:14]) == list(range(7))
    assert all(len(b) == 3 for b in first)
    assert _order(7, 3, seed=1).batch_indices(0) != first[0] or _order(7, 3, seed=2).batch_indices(0) != first[0]


def test_the_order_is_built_from_the_training_config() -> None:
    from s3core.types import QAExample

    tc = TrainingConfig(seed=3, rollout={"batch_size": 2}, sft={"steps": 1})
    examples = [QAExample(id=f"x{i}", question="?", golden_answers=["a"]) for i in range(5)]
    order = DataOrder.of(tc, examples, [0, 2])
    assert order == DataOrder(ids=("x0", "x1", "x2", "x3", "x4"), batch_size=2, seed=3, warmup_steps=1, pool=(0, 2))
    assert order.pool_ids() == ["x0", "x2"] and DataOrder.of(tc, examples).pool_ids() is None


def test_a_checkpoint_records_the_order_and_a_resume_refuses_another(tmp_path: Path) -> None:
    """What trainer_state.pt keeps ("data_order": the keys a checkpoint of the parent commit holds) and the refusals
    on resume: another scheme or warm-up, another pool inside the warm-up, another seed / batch size / question count."""
    pytest.importorskip("torch")
    order = _order(6, 2, seed=5, warmup=2, pool=[0, 3, 4])
    saved = order.record(3)
    assert saved == {"seed": 5, "batch_size": 2, "n_questions": 6, "scheme": DATA_ORDER, "sft_warmup_steps": 2,
                     "sft_pool": ["q0", "q3", "q4"], "next_batch": [f"q{i}" for i in order.batch_indices(3)]}
    ckpt = tmp_path / "step_000003"
    order.check(saved, 3, ckpt)  # its own order resumes
    order.check({k: v for k, v in saved.items() if k != "sft_pool"}, 1, ckpt)  # an older record without a pool
    with pytest.raises(S3Error, match="another data order"):
        order.check({**saved, "scheme": "old"}, 3, ckpt)
    with pytest.raises(S3Error, match="another data order"):
        _order(6, 2, seed=5, warmup=1, pool=[0, 3, 4]).check(saved, 3, ckpt)
    with pytest.raises(S3Error, match="inside the warm-up"):
        _order(6, 2, seed=5, warmup=2, pool=[1, 2]).check(saved, 1, ckpt)
    _order(6, 2, seed=5, warmup=2, pool=[1, 2]).check(saved, 2, ckpt)  # after the warm-up the pool no longer matters
    with pytest.raises(S3Error, match=r"data order changed \(seed/batch_size/questions 5/2/6 vs 5/4/6\)"):
        _order(6, 4, seed=5, warmup=2, pool=[0, 3, 4]).check(saved, 3, ckpt)


def test_heldout_evaluations_are_due_at_the_warm_up_end_every_n_steps_and_at_the_last() -> None:
    tc = TrainingConfig(heldout={"every": 10, "questions": 1}, sft={"steps": 8}, total_steps=35)
    due = [s for s in range(1, 36) if HeldoutSchedule.of(tc, 1).due(s)]
    assert due == [8, 10, 20, 30, 35]
    assert not any(HeldoutSchedule.of(tc, 0).due(s) for s in range(1, 36))  # no held-out questions
    assert not any(HeldoutSchedule(every=0, warmup_steps=0, total_steps=9, questions=4).due(s) for s in range(1, 10))


def test_doctests() -> None:
    assert doctest.testmod(schedule).failed == 0


def test_rl_coverage_after_a_rollback_counts_the_questions_the_kept_steps_drew_not_the_skipped_batches() -> None:
    """A rollback's skipped batches were never trained on: with them the old count (steps x batch size) said 1.0
    while a quarter of the questions had never been in a kept batch."""
    pytest.importorskip("torch")
    t = DataOrder(ids=tuple(str(i) for i in range(8)), batch_size=2, warmup_steps=1, shifts=((2, 2),))
    for step in range(1, 8):
        drawn = {i for s in range(1, step + 1) for i in t.batch_indices(s)}
        assert t.rl_coverage(step) == len(drawn) / 8
    # steps 1-4 draw data steps 1, 4, 5, 6: the first epoch's positions 0-1 and 6-7, then the second epoch's 0-3
    assert (4 * 2) / 8 == 1.0 and t.rl_coverage(4) < 1.0
    assert DataOrder(ids=t.ids, batch_size=2, warmup_steps=1).rl_coverage(4) == 1.0  # no rollback: the closed form
