"""Prices and budgets (s3core/pricing.py, generator_adapters/budget.py, eval/harness.py's budget cut): hand-computed
figures, the refusals and their messages."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from generator_adapters.budget import Budget, BudgetReached, add_usage, require_known_prices, usage_delta
from generator_adapters.client import LLMClient
from generator_adapters.config import GeneratorConfig
from s3core.errors import ConfigError
from s3core.pricing import Price, resolve_price


def test_price_sources_and_unknown_is_none() -> None:
    assert resolve_price("openai/my-model", "http://127.0.0.1:1/v1", 0.5, 2.0) == Price(0.5, 2.0, "config")
    assert resolve_price("local/smollm2-135m-instruct", None, None, None) == Price(0.0, 0.0, "local")
    known = resolve_price("openai/gpt-4o-mini", None, None, None)
    assert known is not None and known.source == "litellm" and known.input_per_mtok > 0 and known.output_per_mtok > 0
    assert resolve_price("openai/no-such-model-anywhere", "http://127.0.0.1:1/v1", None, None) is None
    # 1,000 prompt tokens at $0.5/M + 200 completion tokens at $2/M
    assert Price(0.5, 2.0, "config").cost(1000, 200) == pytest.approx(0.0005 + 0.0004)


def test_prices_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="set both input_cost_per_mtok and output_cost_per_mtok"):
        GeneratorConfig(model="openai/x", input_cost_per_mtok=1.0)


def test_budget_check_reserve_settle() -> None:
    b = Budget(1.0, spent_usd=0.25, setting="eval.budget_usd")
    assert b.fits(0.75) and not b.fits(0.7500001)
    b.reserve(0.5)  # calls in flight count
    assert not b.fits(0.3)
    with pytest.raises(BudgetReached, match=r"budget reached: batch 3 would cost up to \$0.300000.*eval.budget_usd"):
        b.check(0.3, "batch 3")
    b.settle(0.5, 0.4)
    assert b.spent_usd == pytest.approx(0.65) and b.reserved_usd == 0 and b.remaining_usd == pytest.approx(0.35)
    assert Budget(None).fits(1e9)


def test_unknown_price_refuses_a_budgeted_run_naming_the_settings() -> None:
    client = LLMClient(GeneratorConfig(model="openai/no-such-model-anywhere", api_base="http://127.0.0.1:9/v1",
                                       cache_path=None), completion_fn=_never)
    assert client.price is None
    with pytest.raises(ConfigError, match=r"generator.input_cost_per_mtok and generator.output_cost_per_mtok"):
        require_known_prices({"generator": client}, "eval.budget_usd")
    require_known_prices({"generator": None}, "eval.budget_usd")  # nothing to price


async def _never(**kw: object) -> object:
    raise AssertionError("no call expected")


def test_projection_measures_prompts_and_skips_cached(tmp_path: Path) -> None:
    from generator_adapters.cache import ResponseCache, cache_key
    from s3core.pricing import count_prompt_tokens

    cfg = GeneratorConfig(model="openai/fake", api_base="http://127.0.0.1:9/v1", max_tokens=10,
                          input_cost_per_mtok=1.0, output_cost_per_mtok=3.0, cache_path=None)
    cache = ResponseCache(str(tmp_path / "c.sqlite"))
    client = LLMClient(cfg, cache=cache, completion_fn=_never)
    a = [{"role": "user", "content": "What is the capital of France? Answer briefly."}]
    b = [{"role": "user", "content": "Who wrote Hamlet?"}]
    n_a = count_prompt_tokens("openai/fake", a)
    assert client.project([a]) == pytest.approx((n_a * 1.0 + 10 * 3.0) / 1e6)
    cache.put(cache_key(cfg.model, cfg.api_base, b, client.decoding_params()),
              {"text": "Shakespeare", "prompt_tokens": 5, "completion_tokens": 1, "cost_usd": 8e-6, "model": cfg.model},
              model=cfg.model)
    assert client.project([a, b]) == pytest.approx(client.project([a]))  # the cached answer costs nothing
    # ...and serving it counts a cache hit with what it saved, not a spend
    answer = asyncio.run(client.complete(b))
    assert answer.cached and client.usage()["cache_hits"] == 1 and client.usage()["saved_usd"] == pytest.approx(8e-6)
    assert client.usage()["cost_usd"] == 0
    client.close()


def test_usage_arithmetic() -> None:
    d = usage_delta({"cost_usd": 1.0, "paid_calls": 2}, {"cost_usd": 1.5, "paid_calls": 6})
    assert d["cost_usd"] == 0.5 and d["paid_calls"] == 4 and d["cache_hits"] == 0
    s = add_usage({"cost_usd": 0.25, "prompt_tokens": 10}, {"cost_usd": 0.5, "prompt_tokens": 5})
    assert s["cost_usd"] == 0.75 and s["prompt_tokens"] == 15


def test_harness_cuts_a_batch_before_the_question_that_would_pass_the_budget() -> None:
    """Per-question projections 0.3, 0.3, 0.3 with $0.7 left: two questions run, the third is the stop."""
    from eval.contexts import ContextOut
    from eval.harness import Components, _run_batch
    from s3core.types import QAExample

    spent = {"cost_usd": 0.0}

    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        return [ContextOut() for _ in qs]

    async def answer(qs, ctxs):  # type: ignore[no-untyped-def]
        from eval.accuracy import Prediction

        spent["cost_usd"] += 0.25 * len(qs)  # what the calls really cost (below their bound)
        return [Prediction(text="x", cost_usd=0.25) for _ in qs]

    async def score(qs, answers):  # type: ignore[no-untyped-def]
        from eval.accuracy import Scores

        return [Scores(genacc=1.0, span=1.0, em=1.0, f1=1.0) for _ in qs]

    budget = Budget(1.0, spent_usd=0.3, setting="--max-cost-usd")
    comp = Components(contexts=contexts, answer=answer, score=score, usage=lambda: dict(spent),
                      project=lambda qs, cs: [0.3] * len(qs), budget=budget)
    batch = [QAExample(id=f"q{i}", question=f"question {i}?", golden_answers=["x"]) for i in range(3)]
    rows, stop = asyncio.run(_run_batch(comp, batch, {}))
    assert [r["id"] for r in rows] == ["q0", "q1"]
    assert isinstance(stop, BudgetReached) and "question 'q2'" in str(stop)
    assert budget.spent_usd == pytest.approx(0.8) and budget.reserved_usd == 0
    rows, stop = asyncio.run(_run_batch(comp, batch[2:], {}))  # $0.2 left: nothing starts
    assert rows == [] and stop is not None


def test_budgeted_executor_stops_before_the_step_that_could_pass(tmp_path: Path) -> None:
    """Each step's reward calls are bounded at $0.30 and really cost $0.25: with $1.00, steps 1-3 run (0.75 spent),
    step 4's bound would make 1.05: refused before its calls. A resumed executor starts from metrics.jsonl's total."""
    import json

    from s3.config import load_config
    from training.rollouts.budget import BudgetedExecutor, spent_before
    from training.testing import PricedExecutor

    cfg = load_config(None, ["training.mode=search_r1", "training.reward=em"])  # no generator to build here
    step = [0]
    inner = PricedExecutor(0.25, {"reward/prompt_tokens": 100.0})
    ex = BudgetedExecutor(inner, cfg, tmp_path, budget_usd=1.0)
    ex.project = lambda results, examples: 0.30  # type: ignore[method-assign]
    rows = []
    for _ in range(3):
        ex.rollout([], step[0])  # the step the reward calls belong to
        ex.score([], [])
        rows.append({"step": step[0] + 1, **ex.step_stats()})
        step[0] += 1
    assert [r["cost/usd_step"] for r in rows] == [0.25, 0.25, 0.25] and rows[-1]["cost/usd_total"] == 0.75
    ex.rollout([], step[0])
    with pytest.raises(BudgetReached, match="budget reached: step 4"):
        ex.score([], [])
    assert inner.scored == 3
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "cost/us')
    assert spent_before(tmp_path, 2) == 0.5 and spent_before(tmp_path, 3) == 0.75  # a torn last line is skipped
    resumed = BudgetedExecutor(PricedExecutor(0.25), cfg, tmp_path, start_step=3, budget_usd=2.0)
    resumed.project = lambda results, examples: 0.30  # type: ignore[method-assign]
    resumed.score([], [])
    assert resumed.step_stats()["cost/usd_total"] == 1.0


def test_a_reward_that_calls_no_generator_is_not_priced() -> None:
    """retrieval_gain (like R1-Searcher's stage 1) scores documents only: no Accuracy to price, nothing paid."""
    from s3.config import load_config
    from training.rollouts.budget import paid_reward, projection_accuracy

    for reward in ("retrieval_gain", "r1_searcher_stage1"):
        cfg = load_config(None, [f"training.reward={reward}"])
        assert not paid_reward(cfg) and projection_accuracy(cfg) is None
    assert paid_reward(load_config(None, ["training.reward=gbr"]))


PRICED = ["generator.model=openai/fake", "generator.api_base=http://127.0.0.1:9/v1", "generator.max_tokens=10",
          "generator.input_cost_per_mtok=1.0", "generator.output_cost_per_mtok=3.0", "generator.cache_path=",
          "eval.metric=span", "eval.use_judge=false"]


class _Scoring:
    """A local executor's shape as the budget reads it: the reward's scorer (with its Accuracy), nothing run."""

    def __init__(self, accuracy: object) -> None:
        self.scorer = type("Scorer", (), {"accuracy": accuracy})()
        self.closed = 0

    def step_stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        self.closed += 1


def test_the_projection_reuses_the_rewards_accuracy_and_prices_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local run builds its Accuracy once: the budget projects with the reward scorer's own (no second generator
    client); without one in this process (Ray's reward workers) it builds its own. Same figure either way: the
    generator's measured prompt at $1/M plus max_tokens at $3/M, per (question, documents)."""
    import eval.build
    from eval.build import build_accuracy
    from s3.config import load_config
    from s3core.types import Document, QAExample, SearchResult
    from training.rollouts.budget import BudgetedExecutor, projection_accuracy

    cfg = load_config(None, PRICED)
    scorer_acc = build_accuracy(cfg.generator_resolved, cfg.judge_resolved, cfg.eval)
    builds: list[object] = []
    real = eval.build.build_accuracy

    def counted(*a: Any, **kw: Any) -> Any:
        builds.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(eval.build, "build_accuracy", counted)

    inner = _Scoring(scorer_acc)
    ex = BudgetedExecutor(inner, cfg, Path("."), budget_usd=1.0)  # type: ignore[arg-type]
    assert ex.accuracy is scorer_acc and builds == []  # built once: the reward's
    alone = projection_accuracy(cfg)  # no local scorer: one built like it
    assert alone is not None and alone is not scorer_acc and len(builds) == 1

    examples = [QAExample(id="q1", question="Who wrote Hamlet?", golden_answers=["Shakespeare"])] * 2
    docs = [Document(id="d1", title="Hamlet", text="Hamlet is a tragedy by William Shakespeare."),
            Document(id="d2", title="Elsinore", text="Elsinore is a castle in Denmark.")]
    results = [SearchResult(question=e.question, documents=docs[: i + 1]) for i, e in enumerate(examples)]
    projected = ex.project(results, examples)
    per_call = alone.project([e.question for e in examples], [r.documents for r in results],
                             [e.golden_answers for e in examples])
    assert projected == pytest.approx(sum(per_call)) and len(per_call) == 2 and all(c > 30 / 1e6 for c in per_call)
    ex.close()
    alone.close()
    assert inner.closed == 1


def _dry_run_parts(cfg: object, executor: object, run_dir: Path, heldout: int) -> object:
    from types import SimpleNamespace

    from s3core.types import QAExample

    qs = [QAExample(id=f"q{i}", question=f"question {i}?", golden_answers=["x"]) for i in range(16)]
    return SimpleNamespace(executor=executor, cfg=cfg, run_dir=run_dir, examples=qs, sft_pool=None, retriever=None,
                           heldout=[QAExample(id=f"h{i}", question=f"held {i}?", golden_answers=["y"])
                                    for i in range(heldout)])


def test_dry_run_of_a_reward_that_calls_no_generator_says_so(tmp_path: Path) -> None:
    """configs/transfer3.toml's shape (retrieval_gain, 60 RL steps of 8 x 8, held-out questions): the dry run counts 0
    generator calls and says why, instead of counting each rollout (and held-out question) as a reward call. A paid
    reward, priced from measured steps, still counts one call per rollout and per held-out question."""
    import json

    from s3.config import load_config
    from training.report.dryrun import dry_run, dry_run_message
    from training.rollouts.budget import BudgetedExecutor

    shape = ["training.total_steps=6", "training.rollout.batch_size=2", "training.rollout.group_size=4",
             "training.heldout.every=2", "training.heldout.questions=5"]
    cfg = load_config(None, ["training.reward=retrieval_gain", *shape])
    ex = BudgetedExecutor(_Scoring(None), cfg, tmp_path)  # type: ignore[arg-type]
    assert ex.accuracy is None
    d = dry_run(_dry_run_parts(cfg, ex, tmp_path, heldout=5), 0)  # type: ignore[arg-type]
    assert d["steps"] == 6 and d["reward_calls"] == 0 and d["projected_usd"] == 0
    msg = dry_run_message(d)
    assert msg.startswith("dry run: 6 RL steps to run, 0 generator calls: the reward 'retrieval_gain' calls no "
                          "generator"), msg
    assert "reward calls" not in msg and "no paid API was called" in msg
    r1 = dry_run_message(dry_run(_dry_run_parts(load_config(None, ["training.mode=search_r1", "training.reward=em",
                                                                    *shape]), ex, tmp_path, 5), 0))  # type: ignore[arg-type]
    assert "0 generator calls: in search_r1 mode the reward 'em' scores the policy's own answers" in r1, r1

    paid = load_config(None, [*PRICED, "training.reward=gbr", *shape])
    run = tmp_path / "paid"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5, "cost/usd_step": 0.01}) + "\n")
    d = dry_run(_dry_run_parts(paid, BudgetedExecutor(_Scoring(None), paid, run), run, heldout=0), 1)  # type: ignore[arg-type]
    # steps 2..6 at the measured $0.01; 5 x 2 x 4 rollouts to score
    assert d["steps"] == 5 and d["reward_calls"] == 40 and d["projected_usd"] == pytest.approx(0.05)
    assert d["no_generator"] is None and "40 reward calls: projected $0.050000" in dry_run_message(d)
