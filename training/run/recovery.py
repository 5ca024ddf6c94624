"""Training that heals itself ([training.recovery]): after every RL step the loop (training/run/trainer.py) asks
`Recovery.after_step` whether something went wrong; if so the run rolls back to its last good checkpoint, changes what
addresses the cause, and goes on, at most training.recovery.max_rollbacks times; one trigger more stops it with a
message naming the trigger and what was tried (`RecoveryExhausted`: `s3 train` exits 4, no traceback).

Triggers (each on by default, each configurable; RL steps only, the warm-up is supervised):

    nonfinite           losses/total or losses/grad_norm is NaN / inf (the weights are then poisoned: the step's
                        optimizer update has already run, so the run must roll back, never checkpoint)
    spike               losses/grad_norm or losses/total above median + spike_k x 1.4826 MAD of the trailing
                        spike_window RL steps (robust: one earlier spike does not widen the band, as a std would)
    kl                  losses/kl (the k3 estimate of KL to the reference) above kl_max
    stopped_searching,  training/run/collapse.py's kinds (the disguised stop of docs/transfer.md: queries per question
    invalid_climb       fall to a share of their early level; invalid actions climb), smoothed over collapse_window
    heldout_drop        the held-out score (heldout/acc_s3, else heldout/reward: what checkpoints/best is chosen by) below
                        the run's best by more than heldout_z standard errors of the paired per-question difference
                        (the same questions both times: their own spread, not a guess at the noise) and by at least
                        heldout_min_drop

The onset is where the trouble began: the step itself for nonfinite / spike / heldout_drop, the first step of the
trailing run above kl_max / 2 for kl, collapse.py's onset for the collapse kinds. The rollback goes to the newest
checkpoint before the onset that passed the held-out check (its own evaluation not significantly below the best before
it; any checkpoint when the run has no held-out evaluation).

What a rollback changes, and why (every rollback, cumulative over rollbacks):

    a fresh optimizer   Adam's first moment at the checkpoint points the way the run went next (into the trouble), and
                        the learning rate lives in the optimizer's state; a fresh one takes the changes below
    learning rate x lr_factor      overshooting is the common cause of all five kinds (a spike, a NaN, a KL excursion,
                        a collapse into a degenerate policy, a held-out fall); a smaller step moves less per batch
    skip the batches (skip)        PaLM's loss-spike recipe: the batches from the checkpoint to the trigger are not
                        drawn again (the next step draws the one after the trigger's): a batch that drove the run off
                        (a corrupt reward, a poisoned question) is not met again at once
    kl_coef x kl_factor            for kl and the collapse kinds only: the policy ran away from its reference; a
                        stronger pull keeps it near a policy that still searched (0 stays 0: no reference)

Determinism and kills: the decision is appended to RUN_DIR/recovery.jsonl (training/rundir.py `append_recovery`)
before anything is acted on; acting (`rundir.roll_back`) is idempotent; the run then continues as a resume from the
target (`train_healing` builds a fresh trainer), whose changes are a function of recovery.jsonl alone (`healed`,
`skips`, `fresh_start`). So a kill anywhere in a rollback, then `s3 train` again, writes the same metrics rows as a run
never killed. Every backend takes the same path (local, vLLM rollouts, Ray rollouts, a LearnerGroup: they are rebuilt
from the checkpoint as on any resume), and the asynchronous pipeline is dropped with the trainer: nothing rolled out by
the abandoned weights is trained on (the target's own batches in flight go too: they are for skipped steps).

`S3_PLANTED_FAILURE` plants a failure in the rewards, to watch the recovery work (tests, benchmarks/self_healing.py):
`nan@K` makes the rewards of step K's batch NaN (so its loss is); `flip@A-B` negates the rewards of the batches of
steps A..B (a reward with its sign wrong for a stretch); `stop_pays@A-B` pays a reward of 1 to rollouts that
made no search query and 0 to the others for the batches of steps A..B (a reward that pays for the disguised stop).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from s3core.errors import S3Error
from s3core.types import SearchResult
from training import rundir
from training.config import TrainingConfig, TrainSettings
from training.rewards import RewardBatch
from training.run.collapse import CollapseWatch, detect_collapse

__all__ = ["PLANT_ENV", "RECOVERY_EXIT_CODE", "Finding", "Recovery", "RecoveryExhausted", "finish_rollback",
           "fresh_start", "healed", "learner_state", "paired_drop", "planted", "planted_spec", "robust_spike", "skips",
           "train_healing"]

PLANT_ENV = "S3_PLANTED_FAILURE"
RECOVERY_EXIT_CODE = 4
COLLAPSE_KINDS = ("stopped_searching", "invalid_climb")
SPIKE_KEYS = ("losses/grad_norm", "losses/total")


class RecoveryExhausted(S3Error):
    """The run met a trigger it may not roll back from (max_rollbacks used, or no good checkpoint before it)."""

    code = "recovery_exhausted"


@dataclass(frozen=True)
class Finding:
    trigger: str  # nonfinite | spike | kl | stopped_searching | invalid_climb | heldout_drop
    step: int  # the step it was seen after
    onset: int  # the step it began at
    detail: str  # what was measured


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def robust_spike(history: list[float], value: float, k: float) -> float | None:
    """The threshold `value` passed (median + k x 1.4826 MAD of `history`), or None when it is not a spike.

    >>> robust_spike([1.0, 1.1, 0.9, 1.0, 1.05, 0.95], 5.0, k=10.0)
    1.741...
    >>> robust_spike([1.0, 1.1, 0.9, 1.0, 1.05, 0.95], 1.5, k=10.0) is None
    True
    """
    med = statistics.median(history)
    mad = statistics.median(abs(x - med) for x in history) * 1.4826
    band = k * max(mad, 1e-3 * abs(med), 1e-8)  # a flat history still has a band
    return med + band if value > med + band else None


def paired_drop(best: list[dict[str, Any]], now: list[dict[str, Any]], key: str) -> tuple[float, float, int]:
    """(mean of now - best, its standard error, n) over the questions both held-out evaluations scored (paired by id).

    >>> paired_drop([{"id": "a", "reward": 1.0}, {"id": "b", "reward": 0.5}],
    ...             [{"id": "a", "reward": 0.0}, {"id": "b", "reward": 0.5}], "reward")
    (-0.5, 0.5, 2)
    """
    b = {str(r["id"]): v for r in best if (v := _num(r.get(key))) is not None}
    d = [v - b[str(r["id"])] for r in now if (v := _num(r.get(key))) is not None and str(r["id"]) in b]
    if not d:
        return 0.0, 0.0, 0
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else 0.0
    return sum(d) / len(d), se, len(d)


# ------------------------------------------------------------------------------ what recovery.jsonl makes of a run
def healed(cfg: TrainSettings, run_dir: Path) -> TrainSettings:
    """`cfg` with the learning rate and KL coefficient the run's rollbacks changed (their factors multiplied), after
    finishing a rollback a kill interrupted (`finish_rollback`): what a run's start builds from."""
    finish_rollback(run_dir)
    rows = rundir.recovery_rows(run_dir)
    if not rows:
        return cfg
    tc = cfg.training
    lr = math.prod(float(r["changes"].get("lr_factor", 1.0)) for r in rows)
    kl = math.prod(float(r["changes"].get("kl_factor", 1.0)) for r in rows)
    update = tc.update.model_copy(update={"learning_rate": tc.update.learning_rate * lr,
                                          "kl_coef": tc.update.kl_coef * kl})
    return cfg.model_copy(update={"training": tc.model_copy(update={"update": update})})  # type: ignore[attr-defined]


def skips(run_dir: Path) -> tuple[tuple[int, int], ...]:
    """The batches the rollbacks skip on the run's branch: (after step T, n) = the steps after T draw the batch n
    further on (training/run/schedule.py `DataOrder.shifts`). A later rollback to a step before an earlier one's T
    abandons that branch point, and its shift with it (the later skip counts the data steps it covered: `skip_for`)."""
    kept: list[tuple[int, int]] = []
    for r in rundir.recovery_rows(run_dir):
        to = int(r["to_step"])
        kept = [(after, n) for after, n in kept if after <= to]
        if r["changes"].get("skip"):
            kept.append((to, int(r["changes"]["skip"])))
    return tuple(kept)


def skip_for(shifts: tuple[tuple[int, int], ...], to: int, step: int) -> int:
    """How far the steps after checkpoint `to` must shift so that the next one draws the batch after step `step`'s
    (every batch the abandoned steps drew, or skipped, is skipped): step - to, plus the shifts of branch points in
    (to, step] that the rollback abandons.

    >>> skip_for((), 2, 3), skip_for(((10, 5),), 8, 12), skip_for(((8, 2),), 8, 12)
    (1, 9, 4)
    """
    return step - to + sum(n for after, n in shifts if to < after <= step)


def fresh_start(run_dir: Path, ckpt: Path) -> bool:
    """Whether resuming from `ckpt` is the start after the last rollback (which resumes with a fresh optimizer)."""
    rows = rundir.recovery_rows(run_dir)
    return bool(rows) and rundir.checkpoint_name(int(rows[-1]["to_step"])) == ckpt.name


def learner_state(run_dir: Path, ckpt: Path, state: dict[str, Any]) -> dict[str, Any]:
    """The learner's part of checkpoint `ckpt`'s trainer state to resume with: its optimizer, scheduler and critic, or
    the critic alone at the start after a rollback (`fresh_start`: the learner keeps the optimizer it was built with)."""
    fresh = fresh_start(run_dir, ckpt)
    return {k: None if fresh and k != "value_head" else state[k] for k in ("optimizer", "scheduler", "value_head")}


def planted(spec: str | None, step: int, results: list[SearchResult], scored: RewardBatch) -> RewardBatch:
    """The rewards of the batch of step `step` (1-based, as metrics rows count) with S3_PLANTED_FAILURE's failure
    (the module docstring) in them; `scored` itself without one."""
    if not spec:
        return scored
    kind, _, at = spec.partition("@")
    try:
        lo, _, hi = at.partition("-")
        first, last = int(lo), int(hi or lo)
    except ValueError:
        raise S3Error(f"{PLANT_ENV}={spec!r}: expected KIND@K or KIND@A-B (steps)") from None
    if kind not in ("nan", "flip", "stop_pays"):  # named at the first step, not when the run reaches A
        raise S3Error(f"{PLANT_ENV}={spec!r}: unknown failure {kind!r} (nan, flip, stop_pays)")
    if not first <= step <= last:
        return scored
    if kind == "nan":
        return replace(scored, rewards=[math.nan for _ in scored.rewards])
    if kind == "flip":
        return replace(scored, rewards=[None if r is None else -r for r in scored.rewards])
    return replace(scored, rewards=[0.0 if any(s.turn > 0 and s.query for s in r.steps) else 1.0 for r in results])


# ------------------------------------------------------------------------------ the check after each step
class Recovery:
    """The triggers over a run's rows, and the rollback decision (see the module docstring)."""

    def __init__(self, tc: TrainingConfig, run_dir: Path, log: Callable[[str], None], start: int | None = None) -> None:
        """start: the step the run resumes from; rows past it (written before a kill, to be trained again) are not
        history, so a resumed run checks each step against the same rows as one never killed."""
        self.tc, self.rc, self.run_dir, self.log = tc, tc.recovery, run_dir, log
        self.rows = [r for r in rundir.metrics_rows(run_dir)
                     if not r.get("charts/sft") and (start is None or int(r["step"]) <= start)]
        self.watch = CollapseWatch(self.rows)  # its warnings, each kind once, whatever recovery does
        self.seen: set[str] = set()  # the triggers logged (recovery off: each once)

    def after_step(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """Check RL step row `row` (written to metrics.jsonl, no checkpoint of it yet). A trigger: the rollback
        decision, appended to recovery.jsonl and acted on (the trainer stops and `train_healing` resumes from its
        target); None when all is well (or recovery is off: the trigger is only logged)."""
        for warning in self.watch.update(row):
            self.log(warning)
        found = self.check(row)
        self.rows.append(row)
        if found is None or (not self.rc.enabled and found.trigger in self.seen):
            return None
        self.seen.add(found.trigger)
        off = "" if self.rc.enabled else " (training.recovery.enabled = false: going on)"
        self.log(f"train: recovery: {found.trigger} at step {found.step} (from step {found.onset}): {found.detail}{off}")
        return self.roll_back(found) if self.rc.enabled else None

    def check(self, row: dict[str, Any]) -> Finding | None:
        """The first trigger `row` (step `row["step"]`, after self.rows) sets off, or None."""
        rc, step = self.rc, int(row["step"])
        for key in ("losses/total", "losses/grad_norm"):
            v = _num(row.get(key))
            if rc.nonfinite and v is not None and not math.isfinite(v):
                return Finding("nonfinite", step, step, f"{key} = {v}")
        for key in SPIKE_KEYS:
            v = _num(row.get(key))
            hist = [x for r in self.rows[-rc.spike_window :] if (x := _num(r.get(key))) is not None and math.isfinite(x)]
            t = robust_spike(hist, v, rc.spike_k) if v is not None and len(hist) >= rc.spike_window // 2 else None
            if t is not None:
                return Finding("spike", step, step, f"{key} = {v:.4g} above median + {rc.spike_k:g} MAD = {t:.4g}")
        kl = _num(row.get("losses/kl"))
        if rc.kl_max is not None and kl is not None and kl > rc.kl_max:
            onset = step
            for r in reversed(self.rows):
                if (x := _num(r.get("losses/kl"))) is None or x <= rc.kl_max / 2:
                    break
                onset = int(r["step"])
            return Finding("kl", step, onset, f"losses/kl = {kl:.4g} above training.recovery.kl_max = {rc.kl_max:g}")
        if rc.collapse:
            for c in detect_collapse([*self.rows, row], window=rc.collapse_window):
                return Finding(c.kind, step, c.step, c.message().removeprefix("warning: "))
        if rc.heldout_z is not None and "heldout/reward" in row:
            return self._heldout(step)
        return None

    def _heldout(self, step: int) -> Finding | None:
        """heldout_drop: this step's held-out evaluation against the best before it (paired per question)."""
        rows = rundir.heldout_rows(self.run_dir, up_to=step)
        best = rundir.choose_heldout([r for r in rows if int(r["step"]) < step])
        if best is None or not any(int(r["step"]) == step for r in rows):
            return None
        verdict = self._below(rundir.checkpoint_step(Path(best)), step)
        return None if verdict is None else Finding("heldout_drop", step, step, verdict)

    def _key(self) -> str:
        rows = rundir.heldout_rows(self.run_dir)
        return "acc_s3" if any(isinstance(r.get("heldout/acc_s3"), int | float)
                               and math.isfinite(r["heldout/acc_s3"]) for r in rows) else "reward"

    def _below(self, best_step: int, step: int) -> str | None:
        """Why the held-out evaluation after `step` is significantly below the one after `best_step`, or None."""
        key = self._key()
        mean, se, n = paired_drop(rundir.heldout_question_rows(self.run_dir, best_step),
                                  rundir.heldout_question_rows(self.run_dir, step), key)
        if self.rc.heldout_z is None:  # the held-out check is off: every evaluated checkpoint passes
            return None
        if n == 0 or -mean <= max(self.rc.heldout_z * se, self.rc.heldout_min_drop):
            return None
        return (f"held-out {key} {mean:+.3f} against step {best_step}'s (the best) over {n} paired questions, "
                f"beyond {self.rc.heldout_z:g} standard errors ({se:.3f})")

    def target(self, onset: int) -> int | None:
        """The newest checkpoint before `onset` that passed the held-out check (any, without held-out rows)."""
        ckpts = sorted((rundir.checkpoint_step(p) for p in (self.run_dir / "checkpoints").glob("step_*")
                        if p.is_dir()), reverse=True)
        evaluated = {int(r["step"]) for r in rundir.heldout_rows(self.run_dir)}
        for c in (c for c in ckpts if c < onset):
            if not evaluated:
                return c
            if c in evaluated:
                best = rundir.choose_heldout(rundir.heldout_rows(self.run_dir, up_to=c - 1))
                if best is None or self._below(rundir.checkpoint_step(Path(best)), c) is None:
                    return c
        return None

    def roll_back(self, found: Finding) -> dict[str, Any]:
        """Decide (recovery.jsonl first), act (training/rundir.py `roll_back`) and log a rollback; RecoveryExhausted
        when the run may not."""
        rc, done = self.rc, rundir.recovery_rows(self.run_dir)
        tried = "; ".join(f"rollback {r['rollback'] + 1} ({r['trigger']} at step {r['step']}) to step {r['to_step']}: "
                          f"{r['summary']}" for r in done) or "nothing (no rollback yet)"
        if len(done) >= rc.max_rollbacks:
            raise RecoveryExhausted(
                f"training stopped at step {found.step}: {found.trigger} ({found.detail}) after "
                f"training.recovery.max_rollbacks = {rc.max_rollbacks} rollbacks; tried: {tried}. The run directory "
                "keeps its checkpoints (checkpoints/best is the held-out choice); raise max_rollbacks, lower "
                "training.update.learning_rate or look at metrics.jsonl (s3 plot)")
        # a step's KL and rollouts come from the weights before its update (checkpoint onset - 1 made them): those
        # triggers go back past it; a NaN, a spike and a held-out fall are in the onset's own update or checkpoint
        to = self.target(found.onset - 1 if found.trigger in ("kl", *COLLAPSE_KINDS) else found.onset)
        if to is None:
            raise RecoveryExhausted(
                f"training stopped at step {found.step}: {found.trigger} ({found.detail}) began at step "
                f"{found.onset}, and no checkpoint before it passed the held-out check to roll back to (tried: "
                f"{tried}); a smaller training.checkpoint.every keeps more to go back to")
        kl = found.trigger in ("kl", *COLLAPSE_KINDS) and self.tc.update.kl_coef > 0
        changes = {"fresh_optimizer": True, "lr_factor": rc.lr_factor, "kl_factor": rc.kl_factor if kl else 1.0,
                   "skip": skip_for(skips(self.run_dir), to, found.step) if rc.skip else 0}
        lr = self.tc.update.learning_rate * rc.lr_factor
        summary = ", ".join(
            [f"fresh optimizer, learning rate {self.tc.update.learning_rate:.3g} -> {lr:.3g}"]
            + ([f"kl_coef {self.tc.update.kl_coef:.3g} -> {self.tc.update.kl_coef * rc.kl_factor:.3g}"] if kl else [])
            + ([f"the batches of steps {to + 1}-{found.step} skipped"] if changes["skip"] else []))
        decision = {"rollback": len(done), "step": found.step, "trigger": found.trigger, "onset": found.onset,
                    "detail": found.detail, "to_step": to, "changes": changes, "summary": summary}
        rundir.append_recovery(self.run_dir, decision)  # committed: a kill from here on resumes into the same rollback
        rundir.roll_back(self.run_dir, decision)
        self.log(f"train: rollback {len(done) + 1}/{rc.max_rollbacks}: {found.trigger} at step {found.step} -> back to "
                 f"checkpoint step {to}; {summary}")
        return decision


def finish_rollback(run_dir: Path) -> None:
    """A run killed inside a rollback finishes acting on it (idempotent; nothing when there is none)."""
    rows = rundir.recovery_rows(run_dir)
    if rows and all(int(e["recovery/rollback"]) != int(rows[-1]["rollback"]) for e in rundir.rollback_events(run_dir)):
        rundir.roll_back(run_dir, rows[-1])


def train_healing(build: Callable[[], Any], max_steps: int | None = None, max_seconds: float | None = None,
                  keep_open: bool = False) -> dict[str, Any]:
    """`build()` (a trainer resuming from the run's latest checkpoint) then its `train`, again after each rollback,
    until the run ends (total_steps, max_steps more steps, max_seconds, the budget) or RecoveryExhausted. Returns the
    last `train`'s result with every rollback of this call under "rollbacks". `keep_open`: the last trainer is not
    closed but returned under "trainer" (its engines, actors and learners still up; the caller closes it): what a
    benchmark measures after the run, so a run that rolled back is measured once it healed, not cut short."""
    import gc
    import time

    t0, end = time.monotonic(), None
    rollbacks: list[dict[str, Any]] = []
    while True:
        trainer = build()
        done = False
        try:
            if end is None:
                end = trainer.tc.total_steps if max_steps is None else min(trainer.tc.total_steps,
                                                                          trainer.step + max_steps)
            left = None if max_seconds is None else max_seconds - (time.monotonic() - t0)
            out = trainer.train(max_steps=end - trainer.step, max_seconds=left)
            done = out.get("rollback") is None
        finally:
            if not (done and keep_open):
                trainer.close()
        if done:
            return {**out, "rollbacks": rollbacks} | ({"trainer": trainer} if keep_open else {})
        rollbacks.append(out["rollback"])
        # the abandoned trainer goes before the next is built: its learner, optimizer and rollout engine (an in-process
        # vLLM engine is freed with its last reference) would otherwise live beside the new ones while they are built
        # (the loop variable held it: tests/unit/test_self_healing.py)
        trainer = None
        gc.collect()


def planted_spec() -> str | None:
    """S3_PLANTED_FAILURE's value (None when unset)."""
    return os.environ.get(PLANT_ENV) or None
