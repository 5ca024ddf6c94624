"""Credit for each reply (training.update.turn_credit, issue 60 build step 4): training/rewards.py `turn_credits` (the
gold each reply's selection admits first), training/learn/advantages.py `turn_advantages` (reward-to-go less the
group's mean at the same reply) and `turn_advantage_tokens`, and training/run/step.py `update_rows`, which puts them
on the right reply's tokens of the padded batch the learner trains on. The learning test is
tests/unit/test_trainer_learns.py `test_turn_credit_teaches_the_reply_it_credits`; the real loop's trajectories
(SmolLM2's tokenizer, a bm25 index) are checked in tests/integration/test_agent_real.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from s3core.types import Document, SearchResult, SearchStep, Trajectory
from training import rewards as rw
from training.config import TrainingConfig
from training.learn.advantages import reply_spans, turn_advantages
from training.learn.api import pad_rollouts
from training.run.step import update_rows


def _rollout(selections: list[list[str]], reply_tokens: list[list[int]] | None = None) -> SearchResult:
    """An additive s3 rollout: naive RAG's top-2 ["a", "b"] at turn 0, then one window per later reply; reply k selects
    `selections[k]`. Its trajectory: a 2-token prompt, then each reply's tokens (mask 1) with a window (mask 0) between."""
    steps = [SearchStep(turn=k, query=None if k == 0 else f"q{k}", retrieved_ids=["a", "b"] if k == 0 else sel,
                        selected_ids=sel) for k, sel in enumerate(selections)]
    docs = list(dict.fromkeys(["a", "b"] + [i for sel in selections for i in sel]))
    tr = Trajectory(prompt_ids=[1, 2])
    for k, ids in enumerate(reply_tokens or [[3, 4]] * len(selections)):
        if k:
            tr.append([9, 9, 9], False)
        tr.append(ids, True, [-1.0] * len(ids))
    return SearchResult(question="q", documents=[Document(id=i, contents="") for i in docs], steps=steps, trajectory=tr)


def test_each_reply_gets_its_own_credit_on_its_own_tokens_where_the_outcome_is_flat() -> None:
    """A group of 4 with equal outcome rewards (GRPO's sequence advantage 0 for all): rollout 0's second reply admits a
    gold paragraph, rollout 1's a non-gold one, rollouts 2-3 nothing. The credit reaches exactly those replies' tokens
    (and, as reward-to-go, the first reply whose query opened the window), nothing else."""
    gold = ["g"]
    results = [_rollout([[], ["g"]]), _rollout([[], ["x"]]), _rollout([[], []]), _rollout([[], []])]
    credits = [rw.turn_credits(r, gold) for r in results]
    assert credits == [[0.0, 1.0], [0.0, -0.25], [0.0, 0.0], [0.0, 0.0]]
    tc = TrainingConfig(rollout={"group_size": 4}, update={"turn_credit": 2.0})
    pad = lambda res, b: pad_rollouts(res, b, 0, share_prefix=False)  # noqa: E731  (the real padding)
    rows, stats = update_rows(tc, results, [0.5] * 4, pad, credits)
    assert rows is not None and stats["reward/turn_credit_unaligned"] == 0.0
    assert stats["reward/turn_credit_mean"] == pytest.approx(0.1875)
    mb = rows.micro(rows.rows)
    assert mb.adv == [0.0] * 4 and mb.turn_adv is not None
    mean = (1.0 - 0.25) / 4  # the group's mean reward-to-go, the same at both replies
    for b in range(4):
        spans = reply_spans(mb.batch.loss_mask[b])
        assert len(spans) == 2
        for (s, e), c in zip(spans, [credits[b][0] + credits[b][1], credits[b][1]], strict=True):  # type: ignore[index]
            assert mb.turn_adv[b, s:e].tolist() == pytest.approx([2.0 * (c - mean)] * (e - s))
        assert float(mb.turn_adv[b][mb.batch.loss_mask[b] == 0].abs().sum()) == 0.0  # never on a window or the prompt
    # off (the default): no credit tensor, whatever the scorer sent
    rows_off, stats_off = update_rows(TrainingConfig(rollout={"group_size": 4}), results, [0.5] * 4, pad, credits)
    assert rows_off is not None and rows_off.micro(rows_off.rows).turn_adv is None and "reward/turn_credit_mean" not in stats_off


def test_a_rollout_whose_replies_do_not_match_its_policy_spans_keeps_only_its_sequence_advantage() -> None:
    results = [_rollout([[], ["g"]]), _rollout([[], ["g"]], reply_tokens=[[3], []]), _rollout([[], []]), _rollout([[], []])]
    credits = [rw.turn_credits(r, ["g"]) for r in results]
    tc = TrainingConfig(rollout={"group_size": 4}, update={"turn_credit": 1.0})
    rows, stats = update_rows(tc, results, [1.0, 0.0, 0.0, 0.0], lambda res, b: pad_rollouts(res, b, 0, share_prefix=False),
                              credits)
    assert rows is not None and stats["reward/turn_credit_unaligned"] == 1.0
    mb = rows.micro(rows.rows)
    assert float(mb.turn_adv[1].abs().sum()) == 0.0 and float(mb.turn_adv[0].abs().sum()) > 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "g1", "g2", "x", "y"]), max_size=3), min_size=1, max_size=4),
       st.sampled_from([0.0, 0.25, 0.5]))
def test_the_credits_of_an_additive_rollout_add_up_to_its_retrieval_gain(selections: list[list[str]], cost: float) -> None:
    r = _rollout(selections)
    credits = rw.turn_credits(r, ["g1", "g2", "b"], cost)
    assert credits is not None and len(credits) == len(selections)
    gain = rw.retrieval_gain([[d.id for d in r.documents]], [["a", "b"]], [["g1", "g2", "b"]], cost)[0]
    assert sum(credits) == pytest.approx(gain)


@given(st.lists(st.one_of(st.none(), st.lists(st.floats(-2, 2), min_size=1, max_size=4)), min_size=4, max_size=4))
def test_turn_advantages_are_centred_at_each_reply_index(credits: list[list[float] | None]) -> None:
    adv = turn_advantages(credits, 4)
    for k in range(4):
        at_k = [a[k] for a in adv if a is not None and len(a) > k]
        assert sum(at_k) == pytest.approx(0.0, abs=1e-9)
    assert [a is None for a in adv] == [c is None for c in credits]


@pytest.mark.parametrize("over", [{"algorithm": "ppo"}, {"mode": "search_r1", "reward": "em"}])
def test_turn_credit_is_refused_where_it_has_no_meaning(over: dict[str, str]) -> None:
    from s3.config import load_config
    from s3core.errors import ConfigError

    sets = ["training.update.turn_credit=1.0"] + [f"training.{k}={v}" for k, v in over.items()]
    with pytest.raises(ConfigError, match="turn_credit"):
        load_config(None, sets)
    assert load_config(None, ["training.update.turn_credit=0.5"]).training.update.turn_credit == 0.5


def test_the_modules_doctests() -> None:
    """training/learn/advantages.py's examples (turn_advantages, reply_spans, turn_advantage_tokens and the GRPO ones)
    and training/run/step.py's."""
    import doctest

    from training.learn import advantages
    from training.run import step

    for mod in (advantages, step):
        assert doctest.testmod(mod).failed == 0, mod.__name__
