"""training/rewards.py: pure batch functions, doctests, None propagation and the RewardScorer logic."""

from __future__ import annotations

import asyncio
import doctest
import math

import pytest

import training.rewards as rw
from s3core.errors import S3Error
from s3core.types import Document, QAExample, SearchResult, SearchStep, Trajectory


def test_doctests() -> None:
    res = doctest.testmod(rw, raise_on_error=False)
    assert res.attempted >= 8 and res.failed == 0


def test_gbr_none_never_becomes_zero() -> None:
    assert rw.gbr([None, 1.0], [0.0, None]) == [None, None]
    assert rw.acc_plus_gbr([None], [0.0]) == [None]
    with pytest.raises(ValueError, match="different lengths"):
        rw.gbr([1.0], [0.0, 0.0])


def _ex(i: int, answers: list[str]) -> QAExample:
    return QAExample(id=f"q{i}", question=f"question {i}?", golden_answers=answers)


def _res(i: int, docs: list[str], answer: str | None = None, invalid: bool = False, turns: int = 1) -> SearchResult:
    steps = [SearchStep(turn=0, query=f"question {i}?")]
    steps += [SearchStep(turn=t + 1, query="q", invalid_reason="bad tag" if invalid else None) for t in range(turns)]
    return SearchResult(question=f"question {i}?", documents=[Document(id=d, text=d) for d in docs], steps=steps, answer=answer)


def test_scorer_gbr_uses_cached_baseline_and_keeps_failures_missing() -> None:
    calls: list[int] = []

    async def accuracy(questions: list[str], docs: list[list[Document]], golden: list[list[str]]) -> list[float | None]:
        calls.append(len(questions))
        # doc "gold" -> correct; doc "fail" -> the generator call failed
        return [None if any(d.id == "fail" for d in ds) else float(any(d.id == "gold" for d in ds)) for ds in docs]

    scorer = rw.RewardScorer("gbr", accuracy=accuracy, baseline={"q0": 0.0, "q1": 1.0, "q2": 0.0})
    ex = [_ex(0, ["a"]), _ex(1, ["b"]), _ex(2, ["c"])]
    out = asyncio.run(scorer.score([_res(0, ["gold"]), _res(1, ["x"]), _res(2, ["fail"])], ex))
    assert calls == [3]  # one batched call
    assert out.rewards == [1.0, -1.0, None]
    assert out.generator_failures == 1
    out2 = asyncio.run(rw.RewardScorer("acc_plus_gbr", accuracy=accuracy, baseline=scorer.baseline).score(
        [_res(0, ["gold"]), _res(1, ["gold"]), _res(2, ["x"])], ex))
    assert out2.rewards == [2.0, 1.0, 0.0]


def test_scorer_missing_baseline_is_an_error() -> None:
    async def accuracy(*_: object) -> list[float | None]:
        raise AssertionError("must fail before calling the generator")

    scorer = rw.RewardScorer("gbr", accuracy=accuracy, baseline={"q0": 0.0})
    with pytest.raises(S3Error, match="no cached naive-RAG baseline"):
        asyncio.run(scorer.score([_res(0, []), _res(1, [])], [_ex(0, ["a"]), _ex(1, ["b"])]))


def test_scorer_end_to_end_rewards() -> None:
    em = lambda p, gs: float(any(p.strip().lower() == g.lower() for g in gs))  # noqa: E731
    f1 = lambda p, gs: 0.5  # noqa: E731
    ex = [_ex(0, ["paris"]), _ex(1, ["rome"])]
    res = [_res(0, [], answer="Paris"), _res(1, [], answer=None, invalid=True, turns=0)]
    assert asyncio.run(rw.RewardScorer("em", em=em, end_to_end=True).score(res, ex)).rewards == [1.0, 0.0]
    s1 = asyncio.run(rw.RewardScorer("r1_searcher_stage1", end_to_end=True).score(res, ex)).rewards
    assert s1 == [1.0, 0.0]
    s2 = asyncio.run(rw.RewardScorer("r1_searcher_stage2", f1=f1, end_to_end=True).score(res, ex)).rewards
    assert s2 == [0.5, -2.0]


def test_query_token_logprobs_and_confidence_gate() -> None:
    # scripted "tokenizer": token id i decodes to PIECES[i]
    pieces = ["<query>", "paris", " capital", "</query>", "<information>", "doc", "</information>", "ok"]
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    traj = Trajectory()
    traj.append([0, 1, 2, 3], True, [math.log(0.9), math.log(0.3), math.log(0.8), math.log(0.95)])
    traj.append([4, 5, 6], False)  # environment: "<information>doc</information>"
    traj.append([7], True, [math.log(0.01)])  # outside the query: not counted
    lps = rw.query_token_logprobs(traj, decode, "<query>", "</query>")
    assert [round(math.exp(x), 3) for x in lps] == [0.9, 0.3, 0.8, 0.95]
    assert rw.min_query_prob(lps) == pytest.approx(0.3)

    em = lambda p, gs: float(p in gs)  # noqa: E731
    res = _res(0, [], answer="paris")
    res.trajectory = traj
    ex = [_ex(0, ["paris"])]
    gated = rw.RewardScorer("confidence_gated", em=em, decode=decode, beta=0.4, end_to_end=True)
    assert asyncio.run(gated.score([res], ex)).rewards == [0.0]  # min prob 0.3 <= beta
    gated.beta = 0.2
    assert asyncio.run(gated.score([res], ex)).rewards == [1.0]


def test_unknown_reward_rejected() -> None:
    with pytest.raises(ValueError, match="unknown reward"):
        rw.RewardScorer("recall")


def test_invalid_penalty_takes_the_invalid_turn_fraction_off_and_keeps_missing_rewards_missing() -> None:
    async def accuracy(questions: list[str], docs: list[list[Document]], golden: list[list[str]]) -> list[float | None]:
        return [None if any(d.id == "fail" for d in ds) else 1.0 for ds in docs]

    ex = [_ex(0, ["a"]), _ex(1, ["b"]), _ex(2, ["c"])]
    # _res(invalid=True, turns=3): 3 invalid turns of 4 (turn 0 valid)
    res = [_res(0, ["d"]), _res(1, ["d"], invalid=True, turns=3), _res(2, ["fail"], invalid=True)]
    assert [rw.invalid_fraction(x) for x in res] == [0.0, 0.75, 0.5]
    base = {"q0": 0.0, "q1": 0.0, "q2": 0.0}
    plain = asyncio.run(rw.RewardScorer("acc_plus_gbr", accuracy=accuracy, baseline=base).score(res, ex))
    assert plain.rewards == [2.0, 2.0, None]  # the paper's reward: an invalid turn costs nothing
    pen = asyncio.run(rw.RewardScorer("acc_plus_gbr", accuracy=accuracy, baseline=base, invalid_penalty=1.0).score(res, ex))
    assert pen.rewards == [2.0, 1.25, None] and pen.acc_s3 == [1.0, 1.0, None]
    assert rw.invalid_fraction(SearchResult(question="q", documents=[], steps=[])) == 0.0
    with pytest.raises(ValueError, match="invalid_penalty"):
        rw.RewardScorer("gbr", invalid_penalty=-0.1)
