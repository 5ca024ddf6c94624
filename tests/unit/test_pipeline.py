"""training/rollouts/pipeline.py with fakes (no model): admission and order (hypothesis: the batches updated are exactly 0..N-1
in order, staleness never exceeds the bound, nothing admitted is dropped), the engine lock between rollouts and
weight loads (also through LocalExecutor with a fake vLLM engine), errors from the background threads, the budget
under overlap (BudgetedExecutor over a priced fake), and what a checkpoint keeps of the batches in flight."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generator_adapters.budget import BudgetReached
from training.rollouts.pipeline import RolloutPipeline


class Engine:
    """A fake rollout engine: what ran when, which weights each rollout saw, and whether a load ever came mid-rollout."""

    def __init__(self, delay: float = 0.0, score_delay: float | None = None) -> None:
        self.weights = 0  # the version loaded
        self.rolling = False
        self.events: list[tuple[str, int]] = []
        self.overlapped = False
        self.delay = delay
        self.score_delay = delay if score_delay is None else score_delay
        self.threads: set[str] = set()

    def rollout(self, step: int) -> tuple[int, int]:
        self.rolling = True
        self.events.append(("rollout", step))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        self.rolling = False
        return step, self.weights

    def score(self, step: int, rollout: tuple[int, int]) -> int:
        self.events.append(("score", step))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.score_delay)
        return 10 * rollout[0]

    def load(self, version: int) -> float:
        if self.rolling:
            self.overlapped = True
        self.events.append(("load", version))
        self.weights = version
        return 0.0


def _run(pipe: RolloutPipeline, engine: Engine, n: int, s: int) -> list[int]:
    """The trainer's loop over a pipeline: admit, take, (update), sync."""
    taken = []
    for step in range(n):
        pipe.admit(n, start=0)
        assert set(pipe.flights) <= set(range(step, min(n, step + s + 1)))  # admission control
        f = pipe.take(step)
        assert f.scored == 10 * step and f.rollout[0] == step
        assert 0 <= f.staleness(step) <= s and f.rollout[1] == f.version  # the weights it really saw
        taken.append(f.step)
        pipe.sync(lambda v=step + 1: engine.load(v), step + 1)  # type: ignore[misc]
    return taken


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 7), s=st.integers(0, 3), background=st.booleans(), delay=st.sampled_from([0.0, 0.002]))
def test_every_batch_is_updated_once_in_order_within_the_bound(n: int, s: int, background: bool, delay: float) -> None:
    engine = Engine(delay)
    pipe = RolloutPipeline(engine.rollout, engine.score, max_staleness=s, background_rollouts=background)
    try:
        assert _run(pipe, engine, n, s) == list(range(n))
        assert pipe.flights == {} and pipe.next_step == n  # nothing admitted is left, nothing past the end admitted
        assert not engine.overlapped  # weights never loaded during a rollout
        assert [e for e in engine.events if e[0] == "score"] == [("score", j) for j in range(n)]  # scored in order
    finally:
        pipe.close()


def test_staleness_0_runs_in_the_callers_thread_in_the_synchronous_order() -> None:
    engine = Engine()
    pipe = RolloutPipeline(engine.rollout, engine.score, max_staleness=0, background_rollouts=True)
    _run(pipe, engine, 3, 0)
    assert engine.events == [("rollout", 0), ("score", 0), ("load", 1), ("rollout", 1), ("score", 1), ("load", 2),
                             ("rollout", 2), ("score", 2), ("load", 3)]
    assert engine.threads == {threading.current_thread().name}
    pipe.close()


def test_the_learner_samples_itself_here_and_its_scoring_overlaps() -> None:
    """background_rollouts = False (the learner is the engine): rollouts at admission in this thread, before the
    update; scoring on the background thread."""
    engine = Engine()
    pipe = RolloutPipeline(engine.rollout, engine.score, max_staleness=1, background_rollouts=False)
    me = threading.current_thread().name
    pipe.admit(4, start=0)
    assert [e for e in engine.events if e[0] == "rollout"] == [("rollout", 0), ("rollout", 1)]  # done, here
    assert pipe.take(0).version == 0
    assert engine.threads - {me} and all(n.startswith("s3-pipeline-score") for n in engine.threads - {me})
    pipe.close()


def test_sync_waits_for_the_rollout_on_the_engine() -> None:
    """A slow background rollout holds the engine: the weight load comes after it ends, and the next rollout sees the
    new weights."""
    engine = Engine(delay=0.3, score_delay=0.0)
    pipe = RolloutPipeline(engine.rollout, engine.score, max_staleness=1, background_rollouts=True)
    try:
        pipe.admit(3, start=0)
        pipe.take(0)  # batch 1 is rolling out now (or about to)
        while not engine.events.count(("rollout", 1)):
            time.sleep(0.005)
        t0 = time.perf_counter()
        pipe.sync(lambda: engine.load(1), 1)
        assert time.perf_counter() - t0 > 0.05 and not engine.overlapped
        assert engine.events.index(("load", 1)) > engine.events.index(("rollout", 1))
        pipe.admit(3)
        assert pipe.take(1).version == 0 and pipe.take(2).version == 1
    finally:
        pipe.close()


@pytest.mark.parametrize("where", ["rollout", "score"])
@pytest.mark.parametrize("background", [True, False])
def test_an_error_in_a_background_job_is_raised_in_the_callers_thread(where: str, background: bool) -> None:
    engine = Engine()

    def broken(*args: Any) -> Any:
        if args[0] == 1:
            raise ValueError(f"boom in {where} of batch 1")
        return getattr(engine, where)(*args)

    roll = broken if where == "rollout" else engine.rollout
    score = broken if where == "score" else engine.score
    pipe = RolloutPipeline(roll, score, max_staleness=2, background_rollouts=background)
    pipe.admit(5, start=0)
    assert pipe.take(0).scored == 0
    with pytest.raises(ValueError, match=f"boom in {where} of batch 1"):
        pipe.take(1)
    pipe.admit(5)  # a halted pipeline starts nothing more
    assert not any(e == ("rollout", 4) for e in engine.events)
    pipe.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("s3-pipeline")]  # close() stopped the threads


def test_checkpoint_state_and_restore_keep_every_batch_in_flight() -> None:
    engine = Engine()
    pipe = RolloutPipeline(engine.rollout, engine.score, max_staleness=2, background_rollouts=True)
    pipe.admit(6, start=0)
    pipe.take(0)
    pipe.sync(lambda: engine.load(1), 1)
    pipe.admit(6)
    saved = pipe.state()  # drained: batches 1, 2 (version 0) and 3 (version 0 or 1), scored
    pipe.close()
    assert [b["step"] for b in saved] == [1, 2, 3] and all(b["scored"] == 10 * b["step"] for b in saved)
    saved[2]["scored"] = None  # as if the budget refused its scoring
    again = RolloutPipeline(engine.rollout, engine.score, max_staleness=2, background_rollouts=True, version=1)
    before = len(engine.events)
    again.restore(saved, start=1)
    assert [again.take(j).scored for j in (1, 2, 3)] == [10, 20, 30]  # batch 3 scored now, not rolled out again
    assert ("rollout", 3) not in engine.events[before:] and ("score", 3) in engine.events[before:]
    again.close()
    with pytest.raises(ValueError, match="do not follow"):
        RolloutPipeline(engine.rollout, engine.score, max_staleness=2, background_rollouts=True).restore(saved, 0)


def test_the_budget_admits_a_batch_for_scoring_only_within_the_cap_with_batches_in_flight(tmp_path: Path) -> None:
    """BudgetedExecutor over a priced fake: each batch's calls are bounded at $0.30 and cost $0.25; with $1.00 and
    max_staleness 2, batches 0-2 are scored (0.75 spent) and batch 3's bound would make 1.05: refused before its
    calls, raised at its own step (steps 1-3 done), the batch kept unscored for a resume. While calls run, spent +
    reserved never passes the cap."""
    from s3.config import load_config
    from training.rollouts.budget import BudgetedExecutor
    from training.testing import PricedExecutor

    seen: list[float] = []

    def before_score() -> None:
        seen.append(ex.budget.spent_usd + ex.budget.reserved_usd)
        time.sleep(0.01)

    cfg = load_config(None, ["training.mode=search_r1", "training.reward=em"])  # no generator to build here
    inner = PricedExecutor(0.25, {"reward/generator_calls": 2.0}, before_score)
    ex = BudgetedExecutor(inner, cfg, tmp_path, budget_usd=1.0)
    ex.project = lambda results, examples: 0.30  # type: ignore[method-assign]

    def score(step: int, rollout: Any) -> tuple[Any, dict[str, float]]:
        return ex.score([], [], step=step), ex.step_stats()

    pipe = RolloutPipeline(lambda j: ex.rollout([], j), score, max_staleness=2, background_rollouts=True)
    rows = []
    with pytest.raises(BudgetReached, match="budget reached: step 4"):
        for step in range(6):
            pipe.admit(6, start=0)
            f = pipe.take(step)
            rows.append(f.scored[1])
            pipe.sync(lambda: None, step + 1)
    assert inner.scored == 3 and [r["cost/usd_step"] for r in rows] == [0.25] * 3
    assert [r["reward/generator_calls"] for r in rows] == [2.0] * 3  # each batch's own calls
    assert [r["cost/usd_total"] for r in rows] == [0.25, 0.5, 0.75] and ex.budget.reserved_usd == 0
    assert seen == pytest.approx([0.30, 0.55, 0.80])  # spent + what the calls running hold, never over the cap
    saved = pipe.state()
    pipe.close()
    assert saved[0]["step"] == 3 and saved[0]["scored"] is None  # refused, kept for a resume with a higher cap


def test_local_executor_syncs_a_vllm_engine_between_rollouts_and_leaves_the_learner_alone() -> None:
    """LocalExecutor with a (fake) vLLM engine, rolled out on the pipeline's rollout thread: the learner's model is
    not switched to eval mode under a running update, and load_weights never lands in the middle of a generation."""
    pytest.importorskip("torch")
    from s3core.types import QAExample, SearchResult
    from training.learn import weight_sync
    from training.rollouts.executors import LocalExecutor

    class Model:
        def __init__(self) -> None:
            self.evals = 0

        def eval(self) -> None:
            self.evals += 1

    class FakeEngine:
        def __init__(self) -> None:
            self.generating = False
            self.bad = False
            self.loads = 0

        def load_weights(self, weights: Any) -> None:
            self.bad |= self.generating
            self.loads += 1

    class Agent:
        def __init__(self, engine: FakeEngine) -> None:
            self.engine = engine

        def search(self, questions: list[str]) -> list[SearchResult]:
            self.engine.generating = True
            time.sleep(0.05)
            self.engine.generating = False
            return [SearchResult(question=q) for q in questions]

    engine, model = FakeEngine(), Model()
    agent = Agent(engine)
    class NoScorer:
        accuracy = None

    ex = LocalExecutor(agent=agent, greedy_agent=agent, scorer=NoScorer(), model=model, engine=engine)  # type: ignore[arg-type]
    original = weight_sync.learner_weights
    weight_sync.learner_weights = lambda m: []  # type: ignore[assignment]
    try:
        qs = [QAExample(id="q", question="?", golden_answers=["a"])]
        pipe = RolloutPipeline(lambda j: ex.rollout(qs, j), lambda j, r: len(r), max_staleness=1,
                               background_rollouts=True)
        for step in range(4):
            pipe.admit(4, start=0)
            assert pipe.take(step).scored == 1
            assert pipe.sync(ex.sync, step + 1) is not None
        pipe.close()
    finally:
        weight_sync.learner_weights = original  # type: ignore[assignment]
    assert engine.loads == 4 and not engine.bad and model.evals == 0
