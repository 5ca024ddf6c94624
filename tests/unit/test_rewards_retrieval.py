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
