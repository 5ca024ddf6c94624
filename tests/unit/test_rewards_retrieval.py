"""reward = 'retrieval_gain' (issue 45, step 3): a retrieval-level gain beyond naive RAG with no generator call."""

from __future__ import annotations

import asyncio

import pytest

import training.rewards as rw
from s3core.errors import S3Error
from s3core.types import Document, QAExample, SearchResult, SearchStep


def _ex(i: int, gold: list[str]) -> QAExample:
    return QAExample(id=f"q{i}", question=f"question {i}?", golden_answers=["a"], metadata={"supporting_ids": gold})


def _res(top: list[str] | None, docs: list[str]) -> SearchResult:
    steps = [] if top is None else [SearchStep(turn=0, query="q", retrieved_ids=top, selected_ids=top)]
    steps.append(SearchStep(turn=1, query="more"))
    return SearchResult(question="q", documents=[Document(id=d, text=d) for d in docs], steps=steps)


def test_the_scorer_credits_gold_added_beyond_the_top_k_and_charges_the_rest_without_a_generator() -> None:
    ex = [_ex(0, ["g1", "g2"]), _ex(1, ["g1", "g2"]), _ex(2, ["g1"]), _ex(3, [])]
    res = [
        _res(["a", "g1", "b"], ["a", "g1", "b", "g2", "x", "y"]),  # the missing gold added, two others: 1 - 2 x 0.25
        _res(["a", "g1", "b"], ["a", "b"]),  # pruned a gold paragraph of the top-k: -1
        _res(["a", "b", "c"], ["a", "b", "c"]),  # naive RAG's documents kept, nothing added: 0
        _res(["a", "b", "c"], ["a", "b", "c", "g9"]),  # no supporting ids: cannot be scored
    ]
    scorer = rw.RewardScorer("retrieval_gain")  # no accuracy function: no generator call can happen
    out = asyncio.run(scorer.score(res, ex))
    assert out.rewards == [0.5, -1.0, 0.0, None] and out.acc_s3 is None
    # what the reward counted, whatever the cost: the held-out rows and metrics report these (cost-free comparisons)
    assert out.gold_added == [1.0, 0.0, 0.0, None] and out.other_added == [2.0, 0.0, 0.0, None]
    cheap = asyncio.run(rw.RewardScorer("retrieval_gain", retrieval_cost=0.0).score(res[:1], ex[:1]))
    assert cheap.rewards == [1.0]
    # with the format term on top, as any reward
    res[0].steps[1].invalid_reason = "no action"  # 1 invalid turn of 2
    pen = asyncio.run(rw.RewardScorer("retrieval_gain", invalid_penalty=0.5).score(res[:1], ex[:1]))
    assert pen.rewards == [0.25]


def test_the_reward_needs_the_begin_with_search_turn_and_supporting_ids() -> None:
    with pytest.raises(S3Error, match="begin_with_search"):
        asyncio.run(rw.RewardScorer("retrieval_gain").score([_res(None, ["a"])], [_ex(0, ["a"])]))
    with pytest.raises(S3Error, match="supporting_ids"):
        asyncio.run(rw.RewardScorer("retrieval_gain").score([_res(["a"], ["a"])], [_ex(0, [])]))
    with pytest.raises(ValueError, match="retrieval_cost"):
        rw.RewardScorer("retrieval_gain", retrieval_cost=-1.0)
    assert rw.top_k_of(_res(None, [])) is None and rw.top_k_of(_res(["a", "b"], [])) == ["a", "b"]


def test_retrieval_gain_is_a_checked_setting() -> None:
    from s3.config import load_config
    from s3core.errors import ConfigError

    tc = load_config(None, ["training.reward=retrieval_gain", "training.retrieval_cost=0.1"]).training
    assert tc.reward == "retrieval_gain" and tc.retrieval_cost == 0.1
    assert load_config(None, []).training.retrieval_cost == 0.25
    with pytest.raises(ConfigError, match="retrieval_cost"):
        load_config(None, ["training.retrieval_cost=-0.5"])


def test_the_counts_reach_the_step_metrics_the_held_out_row_and_the_ray_merge() -> None:
    """reward/gold_added and heldout/gold_added are the means of the scored rollouts' counts; a reward without them
    (gbr) leaves the keys out; Ray's shard merge keeps them and the reused-baseline count."""
    from training.rollouts.ray_backend import _merge
    from training.run.evaluate import HeldoutScore, evaluate_heldout

    ex = [_ex(0, ["g1", "g2"]), _ex(1, ["g1"]), _ex(2, [])]
    res = [_res(["a", "g1", "b"], ["a", "g1", "b", "g2", "x"]), _res(["a", "b", "c"], ["a", "b", "c", "y"]),
           _res(["a", "b", "c"], ["a", "b", "c"])]
    rb = asyncio.run(rw.RewardScorer("retrieval_gain", retrieval_cost=0.1).score(res, ex))
    ev = evaluate_heldout(ex, res, rb)
    assert ev.score.gold_added == 0.5 and ev.score.other_added == 1.0  # (1 + 0) / 2, (1 + 1) / 2; q2 unscored
    m = ev.score.metrics()
    assert m["heldout/gold_added"] == 0.5 and m["heldout/other_added"] == 1.0
    assert HeldoutScore.from_row({"questions": 3, **m}) == ev.score
    assert ev.score.summary()["gold_added_mean"] == 0.5
    assert [q.get("gold_added") for q in ev.questions] == [1.0, 0.0, None]
    plain = evaluate_heldout(ex[:1], res[:1], rw.RewardBatch([0.5], acc_s3=[1.0], acc_rag=[0.0]))
    assert "heldout/gold_added" not in plain.score.metrics() and "gold_added_mean" not in plain.score.summary()
    assert "gold_added" not in plain.questions[0]
    merged = _merge([rw.RewardBatch([1.0], gold_added=[1.0], other_added=[0.0], reused_baseline=1),
                     rw.RewardBatch([None], gold_added=[None], other_added=[None], reused_baseline=2)])
    assert merged.gold_added == [1.0, None] and merged.other_added == [0.0, None] and merged.reused_baseline == 3
