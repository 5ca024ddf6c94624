"""The batches in flight of asynchronous RL (training.rollout.max_staleness = s): admission, order, staleness, and the
one background worker per kind of job. The trainer (training/run/trainer.py) owns the step; this object owns only the
batches rolled out or scored ahead of it (docs/async-rl.md).

    pipe = RolloutPipeline(rollout, score, max_staleness=s, background_rollouts=engine_is_not_the_learner,
                           version=trainer.step)
    pipe.admit(end)            # start every batch j < end with j <= version + s (nothing is ever discarded)
    flight = pipe.take(step)   # batch `step`, rolled out and scored (waits for it; a job's error is raised here)
    ... the update on flight.rollout / flight.scored ...
    pipe.sync(executor.sync, version=step + 1)   # the new weights, never in the middle of a rollout

Version v = the number of updates done (the trainer's step): batch j is admitted only while v >= j - s, and records
the weights version it was rolled out with (`Flight.version`); its staleness at its update is step - version <= s.
With s = 0 nothing runs in a thread: `take` rolls out and scores in the caller's thread, in the synchronous loop's
order (rollout k -> score k -> update k -> sync), so a run is the synchronous one call for call.

With s > 0 the scoring jobs (the frozen generator's calls: waits, not work) run on one background thread, batch after
batch in order, so a batch's generator usage is what its own job counted (the `score` callable collects it). When the
rollout engine is not the learner's own model (Ray rollout workers, a vLLM engine), rollouts run on a second background
thread, batch after batch, each holding the engine lock that `sync` takes: weights are loaded between rollouts, never
during one, and the version a rollout records is the one its engine held. When the learner samples itself, rollouts
run in the caller's thread at admission (before the update: they would otherwise read half-updated weights).

A job that raises (a BudgetReached from the scoring admission, a bug) halts the pipeline: no later job starts, and the
error is raised by `take` of that batch, in the caller's thread. `drain` waits for the jobs running or queued (a
checkpoint saves what is in flight: `state` / `restore`); `close` stops the threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Flight", "RolloutPipeline"]


@dataclass
class Flight:
    """One admitted batch: the data order's step `step`, rolled out with the weights of `version` updates."""

    step: int
    version: int = -1  # set when its rollout starts (the engine's version then)
    rollout: Any = None  # what rollout(step) returned; None until done
    scored: Any = None  # what score(step, rollout) returned; None until done
    error: BaseException | None = None
    times: dict[str, float] = field(default_factory=dict)  # rollout_start/_end, reward_start/_end (time.time())
    background: float = 0.0  # seconds of its jobs that ran off the caller's thread
    _rollout_job: Future[None] | None = field(default=None, repr=False)
    _score_job: Future[None] | None = field(default=None, repr=False)

    def staleness(self, version: int) -> int:
        return version - self.version


class RolloutPipeline:
    """Batches in flight between admission and their update (see the module docstring)."""

    def __init__(self, rollout: Callable[[int], Any], score: Callable[[int, Any], Any], *, max_staleness: int,
                 background_rollouts: bool, version: int = 0, name: str = "s3-pipeline") -> None:
        self._rollout, self._score = rollout, score
        self.max_staleness = max_staleness
        self.background_rollouts = background_rollouts and max_staleness > 0
        self.version = version  # the weights the rollout engine holds (updates done)
        self.flights: dict[int, Flight] = {}
        self.next_step: int | None = None  # the next batch to admit (None: the first take/admit decides)
        self._engine = threading.Lock()  # one rollout or one weight load at a time
        self._halted: BaseException | None = None
        self._scorer = ThreadPoolExecutor(1, f"{name}-score") if max_staleness > 0 else None
        self._roller = ThreadPoolExecutor(1, f"{name}-rollout") if self.background_rollouts else None

    # ------------------------------------------------------------------ admission
    def admit(self, end: int, start: int | None = None) -> list[int]:
        """Start every batch j < `end` not yet admitted with j <= version + max_staleness (from `start`, the caller's
        step, on a pipeline that has admitted nothing yet); returns the steps started."""
        if self.next_step is None:
            self.next_step = self.version if start is None else start
        started: list[int] = []
        while self.next_step < end and self.next_step <= self.version + self.max_staleness and self._halted is None:
            j = self.next_step
            self.flights[j] = flight = Flight(j)
            self.next_step += 1
            started.append(j)
            if self.max_staleness == 0:
                continue  # the synchronous loop: `take` rolls out and scores in the caller's thread
            if self._roller is not None:
                flight._rollout_job = self._roller.submit(self._guard, flight, self._roll_then_queue)
            else:
                self._do_rollout(flight)  # the learner samples itself: here, before the update
                if flight.error is None:
                    self._queue_score(flight)
        return started

    def take(self, step: int) -> Flight:
        """Batch `step`, rolled out and scored: waits for its jobs; a job's error (or the one that halted the
        pipeline before this batch started) is raised here. The batch leaves the pipeline unless it failed."""
        if step not in self.flights:
            self.admit(step + 1, start=step)
        if step not in self.flights:
            raise RuntimeError(f"batch {step} was not admitted (version {self.version}, "
                               f"max_staleness {self.max_staleness})" + (f": {self._halted}" if self._halted else ""))
        flight = self.flights[step]
        if self.max_staleness == 0:  # in order, here: rollout k -> score k
            if flight.rollout is None:
                self._do_rollout(flight)
            if flight.error is None and flight.scored is None:
                self._do_score(flight)
        else:
            self._wait(flight)
        if flight.error is not None:
            raise flight.error
        if flight.scored is None:
            raise RuntimeError(f"batch {step} was not scored: {self._halted}")
        del self.flights[step]
        return flight

    def sync(self, load: Callable[[], float | None], version: int) -> float | None:
        """`load` the new weights into the rollout engine once no rollout is running; later rollouts record
        `version`."""
        with self._engine:
            out = load()
            self.version = version
        return out

    # ------------------------------------------------------------------ checkpoints
    def drain(self) -> None:
        """Wait for every job running or queued (errors stay with their batch, for `take`)."""
        for flight in sorted(self.flights.values(), key=lambda f: f.step):
            self._wait(flight)

    def state(self) -> list[dict[str, Any]]:
        """The batches in flight after `drain`, oldest first, as a checkpoint keeps them: the contiguous run of batches
        rolled out (scored or not); a batch whose rollout never ran is admitted again on resume."""
        self.drain()
        out: list[dict[str, Any]] = []
        for step in sorted(self.flights):
            f = self.flights[step]
            if f.rollout is None or (out and out[-1]["step"] != step - 1):
                break
            out.append({"step": f.step, "version": f.version, "rollout": f.rollout, "scored": f.scored,
                        "times": dict(f.times)})
        return out

    def restore(self, saved: list[dict[str, Any]], start: int) -> None:
        """A checkpoint's batches in flight (`state`) back into a fresh pipeline whose next batch is `start`; the
        unscored ones are queued for scoring now, in order (or scored when taken, with max_staleness 0)."""
        self.flights = {}
        self.next_step = start
        for s in saved:
            step = int(s["step"])
            if step != self.next_step:
                raise ValueError(f"the checkpoint's batches in flight do not follow step {start}: {step}")
            self.flights[step] = flight = Flight(step, version=int(s["version"]), rollout=s["rollout"],
                                                 scored=s["scored"], times=dict(s.get("times", {})))
            self.next_step = step + 1
            if flight.scored is None and self._scorer is not None:  # never scored (the budget stopped it): first
                self._queue_score(flight)

    def halt(self, why: BaseException | None = None) -> None:
        """Start no job from now on (queued ones are skipped); `why` is raised by `take` of a batch not done."""
        self._halted = self._halted or why or RuntimeError("the pipeline was stopped")

    def close(self) -> None:
        """Stop the background threads: queued jobs are skipped, a running one finishes first."""
        self.halt()
        for pool in (self._roller, self._scorer):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ jobs
    def _guard(self, flight: Flight, job: Callable[[Flight], None]) -> None:
        if self._halted is not None:
            return  # a stopped pipeline starts nothing
        t0 = time.perf_counter()
        try:
            job(flight)
        finally:
            flight.background += time.perf_counter() - t0

    def _roll_then_queue(self, flight: Flight) -> None:
        self._do_rollout(flight)
        if flight.error is None and self._halted is None:
            self._queue_score(flight)

    def _queue_score(self, flight: Flight) -> None:
        assert self._scorer is not None
        flight._score_job = self._scorer.submit(self._guard, flight, self._do_score)

    def _do_rollout(self, flight: Flight) -> None:
        try:
            with self._engine:
                flight.version = self.version
                flight.times["rollout_start"] = time.time()
                flight.rollout = self._rollout(flight.step)
                flight.times["rollout_end"] = time.time()
        except BaseException as e:  # raised by take(step) in the caller's thread
            flight.error = e
            self.halt(e)

    def _do_score(self, flight: Flight) -> None:
        try:
            flight.times["reward_start"] = time.time()
            flight.scored = self._score(flight.step, flight.rollout)
            flight.times["reward_end"] = time.time()
        except BaseException as e:
            flight.error = e
            self.halt(e)

    def _wait(self, flight: Flight) -> None:
        """Until the jobs of `flight` are done (its rollout job submits its scoring job before it ends)."""
        while pending := [j for j in (flight._rollout_job, flight._score_job) if j is not None and not j.done()]:
            wait(pending)
