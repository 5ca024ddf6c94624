"""The format term must not outweigh the task reward (issue 45): with training.invalid_penalty under std-normalised GRPO
advantages, a group whose task rewards are all equal but whose invalid-turn fractions differ (a format-only group) got
advantages as large as a correct answer's. training.format_advantage = 'centred' (the default) normalises the task
reward alone and adds the format term centred, never scaled; reward/format_only_groups counts those groups."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("torch")

import training.rewards as rw
from s3core.types import SearchResult, SearchStep
from training.learn import advantages as adv_mod


def _res(invalid_turns: int, turns: int = 3) -> SearchResult:
    steps = [SearchStep(turn=0, query="q")]
    steps += [SearchStep(turn=t + 1, query=None if t < invalid_turns else "q",
                         invalid_reason="no action" if t < invalid_turns else None) for t in range(turns)]
    return SearchResult(question="q", steps=steps)


def _batch(task: list[float | None], invalid: list[int], penalty: float) -> tuple[list[float | None], list[SearchResult]]:
    """Rewards as the scorer makes them (task reward minus penalty x invalid fraction) and their rollouts."""
    results = [_res(k) for k in invalid]
    return rw.penalize_invalid(task, [rw.invalid_fraction(r) for r in results], penalty), results


def test_a_format_only_group_gets_advantages_no_larger_than_the_penalty_and_is_counted() -> None:
    # group 0: task 2, 0, 0, 0 (one correct answer); group 1: all task 0, one rollout with 1 invalid turn of 4
    rewards, results = _batch([2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0, 0, 0, 0, 0, 0, 0, 1], 0.5)
    old, stats_old = adv_mod.grpo_advantages(rewards, results, 4, 0.5, "normalised")
    new, stats_new = adv_mod.grpo_advantages(rewards, results, 4, 0.5, "centred")
    assert stats_old == stats_new == {"reward/format_only_groups": 1.0}
    # attempts 1-2: the format-only group's advantages are exactly the correct answer's group's (+-1.5 / 0.5)
    assert max(abs(a) for a in old[4:]) == pytest.approx(max(abs(a) for a in old[:4]), rel=1e-4)  # type: ignore[arg-type]
    # centred: the task group is unchanged; the format-only group's advantages are at most the penalty's range
    assert new[:4] == pytest.approx(old[:4])
    assert max(abs(a) for a in new[4:]) <= 0.5 * 0.25  # type: ignore[arg-type]  # penalty x one invalid turn of 4
    assert new[7] < 0 and all(a > 0 for a in new[4:7])  # type: ignore[operator]  # still the right direction


def test_no_penalty_means_the_plain_grpo_advantages_and_no_metric() -> None:
    rewards: list[float | None] = [1.0, 0.0, None, 1.0]
    adv, stats = adv_mod.grpo_advantages(rewards, [_res(0)] * 4, 2, 0.0)
    assert adv == adv_mod.group_advantages_missing(rewards, 2) and stats == {}
    with pytest.raises(ValueError, match="format_advantage"):
        adv_mod.grpo_advantages(rewards, [_res(0)] * 4, 2, 0.5, "scaled")


def test_centred_advantages_keep_the_task_order_and_the_format_share_bounded_on_random_groups() -> None:
    """Two-level task rewards (Acc-based rewards within one question: one baseline), groups of 2-8, any invalid
    fractions, penalty 0.5: a better task reward always has the larger advantage, and no advantage moves by more than
    the penalty from its task-only value; missing rewards stay missing."""
    rng = random.Random(0)
    for _ in range(300):
        g = rng.choice([2, 4, 8])
        base = rng.choice([0.0, 1.0])
        task: list[float | None] = [rng.choice([-base, 2.0 - base, None]) if rng.random() < 0.2 else
                                    rng.choice([-base, 2.0 - base]) for _ in range(g)]
        rewards, results = _batch(task, [rng.randint(0, 3) for _ in range(g)], 0.5)
        adv, stats = adv_mod.grpo_advantages(rewards, results, g, 0.5)
        task_only = adv_mod.group_advantages_missing(task, g)
        for i in range(g):
            assert (adv[i] is None) == (task_only[i] is None)
            if adv[i] is not None:
                assert abs(adv[i] - task_only[i]) <= 0.5 + 1e-9  # type: ignore[operator]
        scored = [i for i in range(g) if adv[i] is not None]
        for i in scored:
            for j in scored:
                if task[i] > task[j]:  # type: ignore[operator]
                    assert adv[i] > adv[j]  # type: ignore[operator]
        flat_task = len({task[i] for i in scored}) == 1 and len(scored) >= 2
        fmt_differs = len({rewards[i] for i in scored}) > 1
        assert stats["reward/format_only_groups"] == float(flat_task and fmt_differs)


def test_format_terms_and_their_checks() -> None:
    assert rw.format_terms([_res(0), _res(3), _res(1)], 0.5) == [0.0, -0.375, -0.125]
    assert rw.format_terms([_res(3)], 0.0) == [0.0]
    with pytest.raises(ValueError, match="format terms"):
        adv_mod.group_advantages_format_centred([1.0, 0.0], [0.0], 2)
    with pytest.raises(ValueError, match="format terms"):
        adv_mod.format_only_groups([1.0, 0.0], [0.0], 2)


def test_format_advantage_is_a_checked_setting() -> None:
    from s3.config import load_config
    from s3core.errors import ConfigError

    assert load_config(None, []).training.format_advantage == "centred"
    assert load_config(None, ["training.format_advantage=normalised"]).training.format_advantage == "normalised"
    with pytest.raises(ConfigError, match="format_advantage"):
        load_config(None, ["training.format_advantage=scaled"])


@pytest.mark.parametrize("mode", ["centred", "normalised"])
def test_the_loop_feeds_the_learner_these_advantages_and_logs_the_format_only_groups(mode: str) -> None:
    """training/run/trainer.py `update_rows` (the rows and advantages of an update) uses them, per the setting."""
    from s3core.types import Trajectory
    from training.config import TrainingConfig
    from training.run.step import update_rows

    tc = TrainingConfig(invalid_penalty=0.5, format_advantage=mode, rollout={"group_size": 4})
    rewards, results = _batch([2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0, 0, 0, 0, 0, 0, 0, 1], 0.5)
    for r in results:
        r.trajectory = Trajectory(prompt_ids=[1, 2])
        r.trajectory.append([3], True)
    rows, stats = update_rows(tc, results, rewards, lambda res, b: b)  # type: ignore[arg-type,return-value]
    assert rows is not None and stats["reward/format_only_groups"] == 1.0
    fed = [a for b in rows.chunks() for a in rows.micro(b).adv or []]
    assert fed == pytest.approx(adv_mod.grpo_advantages(rewards, results, 4, 0.5, mode)[0])  # type: ignore[arg-type]
    biggest = max(abs(a) for a in fed[4:])  # the format-only group's
    assert biggest < 0.2 if mode == "centred" else biggest > 1.0


def test_unscaled_advantages_keep_the_reward_gaps_and_reach_the_learner() -> None:
    """training.update.advantage_scale = 'none' (Dr. GRPO): r - group mean. The phase-1 shape of the third transfer
    attempt: stopping at once scores 0, a non-gold paragraph -0.25, a gold one +1. Std-normalised, the group that only
    trades a non-gold paragraph for stopping gets advantages as large as the group where a gold paragraph was found;
    unscaled, a fifth as large (a gap of 0.25 against one of 1.25)."""
    from s3.config import load_config
    from s3core.errors import ConfigError
    from s3core.types import Trajectory
    from training.config import TrainingConfig
    from training.run.step import update_rows

    rewards: list[float | None] = [0.0, -0.25, -0.25, -0.25, 1.0, -0.25, -0.25, -0.25]
    results = [_res(0) for _ in rewards]
    for r in results:
        r.trajectory = Trajectory(prompt_ids=[1, 2])
        r.trajectory.append([3], True)
    fed = {}
    for scale in ("group_std", "none"):
        tc = TrainingConfig(rollout={"group_size": 4}, update={"advantage_scale": scale})
        rows, _ = update_rows(tc, results, rewards, lambda res, b: b)  # type: ignore[arg-type,return-value]
        assert rows is not None
        fed[scale] = [a for b in rows.chunks() for a in rows.micro(b).adv or []]
    assert fed["group_std"][0] == pytest.approx(fed["group_std"][4], rel=1e-4)  # the safe stop pushed as hard as the gold
    assert fed["none"] == pytest.approx([0.1875, -0.0625, -0.0625, -0.0625, 0.9375, -0.3125, -0.3125, -0.3125])
    assert fed["none"][4] == pytest.approx(5 * fed["none"][0])
    assert load_config(None, ["training.update.advantage_scale=none"]).training.update.advantage_scale == "none"
    with pytest.raises(ConfigError, match="advantage_scale"):
        load_config(None, ["training.update.advantage_scale=mad"])
