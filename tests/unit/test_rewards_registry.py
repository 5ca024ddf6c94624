"""The reward registry (issue 78): a reward is one `training.rewards.REGISTRY` entry. The scorer scores with it, the
configuration accepts its name, the run's spend (`paid_reward`) and the data preparation's baseline decision follow
its flags, with no other code edit; the seven rewards s3 ships keep the answers they had before the registry."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from test_rewards_reuse import _ex, _res

import training.rewards as rw
from s3core.errors import ConfigError
from s3core.types import Document, QAExample, SearchResult


class FakeAccuracy:
    """Acc(G(Q, D)) = 1.0 when document 'g' is in D; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, qs: list[str], docs: list[list[Document]], golden: list[list[str]]) -> list[float | None]:
        self.calls += len(qs)
        return [float(any(d.id == "g" for d in ds)) for ds in docs]


async def _score_half_gbr(s: rw.RewardScorer, results: Sequence[SearchResult],
                          examples: Sequence[QAExample]) -> rw.RewardBatch:
    """A toy generator reward: Acc(G(Q, D_s3)) - Acc(G(Q, D_RAG)) / 2."""
    rag = s.baseline_for(examples)
    acc, reused = await s.acc_s3(results, examples)
    rewards = [None if a is None or b is None else a - b / 2 for a, b in zip(acc, rag, strict=True)]
    return rw.RewardBatch(rewards, acc_s3=acc, acc_rag=rag, reused_baseline=reused)


async def _score_doc_count(s: rw.RewardScorer, results: Sequence[SearchResult],
                           examples: Sequence[QAExample]) -> rw.RewardBatch:
    """A toy reward with no generator call: the number of documents the searcher ended with."""
    return rw.RewardBatch([float(len(x.documents)) for x in results])


HALF_GBR = rw.RewardSpec("half_gbr", "toy: Acc(s3) - Acc(RAG) / 2.", _score_half_gbr, generator=True, baseline=True,
                         modes=("s3",))
DOC_COUNT = rw.RewardSpec("doc_count", "toy: how many documents the searcher kept.", _score_doc_count, generator=False)


def test_a_new_reward_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from s3.config import load_config
    from training.prep.data import Preparation
    from training.rollouts.budget import no_generator_reason, paid_reward, projection_accuracy

    monkeypatch.setitem(rw.REGISTRY, "half_gbr", HALF_GBR)
    monkeypatch.setitem(rw.REGISTRY, "doc_count", DOC_COUNT)

    # the scorer scores with it: the generator on D_s3 where it added something, the cached baseline where it did not
    acc = FakeAccuracy()
    scorer = rw.RewardScorer("half_gbr", accuracy=acc, baseline={"q0": 1.0, "q1": 0.0}, invalid_penalty=0.5)
    out = asyncio.run(scorer.score([_res(["a"], ["a"]), _res(["a"], ["a", "g"])], [_ex(0), _ex(1)]))
    assert out.rewards == [0.5, 1.0] and out.acc_s3 == [1.0, 1.0] and out.reused_baseline == 1 and acc.calls == 1
    with pytest.raises(Exception, match="no cached naive-RAG baseline"):  # a missing baseline is an error, not a 0
        asyncio.run(scorer.score([_res(["a"], ["a", "g"])], [_ex(7)]))
    cheap = rw.RewardScorer("doc_count")  # no accuracy function: no generator call can happen
    assert asyncio.run(cheap.score([_res(["a"], ["a", "g"]), _res(["a"], [])], [_ex(0), _ex(1)])).rewards == [2.0, 0.0]

    # the configuration accepts its name, and its modes
    cfg = load_config(None, ["training.reward=half_gbr"])
    assert cfg.training.reward == "half_gbr"
    with pytest.raises(ConfigError, match="search_r1 mode answers itself"):
        load_config(None, ["training.reward=half_gbr", "training.mode=search_r1"])
    r1 = load_config(None, ["training.reward=doc_count", "training.mode=search_r1"])
    free = load_config(None, ["training.reward=doc_count"])

    # the spend and the baseline follow its flags
    assert paid_reward(cfg) and no_generator_reason(cfg) is None
    assert not paid_reward(free) and projection_accuracy(free) is None
    assert no_generator_reason(free) == "the reward 'doc_count' calls no generator"
    assert not paid_reward(r1)
    assert Preparation(cfg).reward_reads_baseline and Preparation(cfg).needs_baseline
    assert not Preparation(free).reward_reads_baseline

    # an unknown name is refused with the registry's names, toys included
    with pytest.raises(ConfigError, match=r"unknown reward 'nope'; choose one of gbr, .*half_gbr, doc_count"):
        load_config(None, ["training.reward=nope"])
    with pytest.raises(ValueError, match=r"unknown reward 'nope'; choose one of gbr, .*doc_count"):
        rw.RewardScorer("nope")


def test_a_reward_that_reads_the_baseline_says_so_in_its_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preparation computes the baseline only for an entry with baseline=True: an entry that reads it without
    saying so fails loudly at its first batch instead of training on a baseline that was never prepared."""
    monkeypatch.setitem(rw.REGISTRY, "half_gbr", rw.RewardSpec("half_gbr", "toy", _score_half_gbr, generator=True))
    scorer = rw.RewardScorer("half_gbr", accuracy=FakeAccuracy(), baseline={"q0": 1.0})
    with pytest.raises(ValueError, match="baseline=True"):
        asyncio.run(scorer.score([_res(["a"], ["a"])], [_ex(0)]))


OLD_REWARDS = ("gbr", "acc_plus_gbr", "em", "r1_searcher_stage1", "r1_searcher_stage2", "confidence_gated",
               "retrieval_gain")


@pytest.mark.parametrize("reward", OLD_REWARDS)
@pytest.mark.parametrize("mode", ["s3", "search_r1"])
def test_the_shipped_rewards_keep_their_answers(reward: str, mode: str) -> None:
    """Before the registry each of these was spelled out by name: budget.py, prep/data.py and config.py's checks."""
    from s3.config import load_config
    from training.prep.data import Preparation
    from training.rollouts.budget import paid_reward

    assert rw.REWARDS == OLD_REWARDS and rw.NO_GENERATOR_REWARDS == ("r1_searcher_stage1", "retrieval_gain")
    over = [f"training.reward={reward}", f"training.mode={mode}"]
    if mode == "search_r1" and reward not in ("em", "r1_searcher_stage1", "r1_searcher_stage2", "confidence_gated"):
        with pytest.raises(ConfigError, match=f"training.reward='{reward}' needs a generator; use 'em'"):
            load_config(None, over)
        return
    cfg = load_config(None, over)
    assert paid_reward(cfg) == (mode != "search_r1" and reward not in ("em", "r1_searcher_stage1", "retrieval_gain"))
    assert Preparation(cfg).reward_reads_baseline == (mode == "s3" and reward in ("gbr", "acc_plus_gbr"))
    spec = rw.reward_spec(reward)
    assert spec.name == reward and spec.description and spec.query_logprobs == (reward == "confidence_gated")


def test_a_search_r1_reward_is_refused_in_s3_mode() -> None:
    """em's entry has modes=('search_r1',): an s3 configuration may name it (data prepared without a baseline), the
    scorer refuses to score with it there, as before the registry."""
    from s3.config import load_config

    assert load_config(None, ["training.reward=em"]).training.reward == "em"
    em = rw.RewardScorer("em", em=lambda p, gs: float(p in gs))
    with pytest.raises(ValueError, match="scores the policy's own answer: use it in search_r1 mode"):
        asyncio.run(em.score([_res(["a"], ["a"])], [_ex(0)]))
