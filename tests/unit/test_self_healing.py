"""Training that heals itself (training/run/recovery.py, issue 62), on the REAL loop: `S3Trainer.train` over the toy
task of tests/unit/test_trainer_learns.py (a tiny random Llama that learns to write one rewarded token), made again
from its rollback's checkpoint by `train_healing` after each rollback, as `s3 train` runs it. The failures are
planted in the rewards through the product's own switch (S3_PLANTED_FAILURE: training/run/recovery.py `planted`):

- a NaN loss (`nan@K`): rolled back, finished, no NaN in any saved weight; synchronous and asynchronous
  (training.rollout.max_staleness = 1: the pipeline's batches rolled out by the abandoned weights are dropped);
- a reward whose sign is wrong for a stretch of batches (`flip@A-B`): the policy unlearns, the held-out reward falls
  below its best beyond its paired noise, the run rolls back past the stretch and ends within noise of its best;
  with recovery off the same run ends collapsed;
- the bounded number of rollbacks: one more trigger stops the run with a message naming the trigger and what was
  tried (RecoveryExhausted; `s3 train` exits 4);
- a kill during a rollback (after the decision was written, and after it was acted on), then a resume: the same
  metrics rows as the run never killed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from s3.config import load_config  # noqa: E402
from training import rundir  # noqa: E402
from training.config import TrainingConfig  # noqa: E402
from training.run.recovery import PLANT_ENV, RecoveryExhausted, train_healing  # noqa: E402
from training.testing import healing_config, saved_weights_finite, toy_trainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(base: Path, run_dir: Path, tc: TrainingConfig, heldout: int = 0, keep_open: bool = False) -> dict[str, Any]:
    settings = load_config(None, []).model_copy(update={"training": tc})
    return train_healing(lambda: toy_trainer(settings, run_dir, heldout=heldout), keep_open=keep_open)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    """metrics rows and rollback events without the wall-clock keys (what differs between two identical runs)."""
    def keep(k: str) -> bool:
        return not any(t in k for t in ("seconds", "weight_sync", "overlap"))

    return [{k: v for k, v in r.items() if keep(k)} for r in [*rundir.metrics_rows(run_dir),
                                                               *rundir.rollback_events(run_dir)]]


@pytest.mark.parametrize("staleness", [0, 1], ids=["sync", "async-s1"])
def test_a_nan_loss_is_rolled_back_and_the_run_finishes(tiny_lm_dir: Path, tmp_path: Path, staleness: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLANT_ENV, "nan@3")  # while it is still learning
    out = _run(tiny_lm_dir, tmp_path, healing_config(tiny_lm_dir, 10, staleness=staleness), keep_open=True)
    trainer = out.pop("trainer")  # what a benchmark measuring the run gets: the healed run's last trainer, still open
    try:
        assert trainer.step == 10 and trainer.order.shifts, "the trainer built after the rollback (its skip in its order)"
    finally:
        trainer.close()
    assert out["steps"] == 10 and len(out["rollbacks"]) == 1
    events = rundir.rollback_events(tmp_path)
    assert [(e["recovery/trigger"], e["step"], e["recovery/to_step"]) for e in events] == [("nonfinite", 3, 2)]
    rows = rundir.metrics_rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 11))
    assert all(math.isfinite(r["losses/total"]) for r in rows if "losses/total" in r), "a NaN row is still on the branch"
    assert saved_weights_finite(tmp_path)
    # the rollback's changes reached the learner: half the learning rate from step 3 on
    assert rows[1]["charts/learning_rate"] == pytest.approx(1e-2) and rows[2]["charts/learning_rate"] == pytest.approx(5e-3)
    # the batch of step 3 is skipped (step 3 trained on the batch step 4 would have drawn), and the run learned on
    assert rundir.recovery_rows(tmp_path)[0]["changes"]["skip"] == 1
    assert min(r["reward/mean"] for r in rows[-3:]) >= 0.9, [round(r["reward/mean"], 3) for r in rows]


def test_a_wrong_reward_stretch_is_healed_by_the_held_out_check(tiny_lm_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The reward's sign wrong for the batches of steps 3-6, while the policy is still learning: without recovery it
    unlearns the rewarded token, every group's rewards turn equal (flat: nothing left to learn from) and the run ends
    collapsed; with it the held-out fall is caught, the run rolls back past the stretch and ends within noise of
    its best."""
    monkeypatch.setenv(PLANT_ENV, "flip@3-6")
    on, off = tmp_path / "on", tmp_path / "off"
    _run(tiny_lm_dir, off, healing_config(tiny_lm_dir, 14, heldout=16, recovery={"enabled": False}), heldout=16)
    out = _run(tiny_lm_dir, on, healing_config(tiny_lm_dir, 14, heldout=16), heldout=16)
    held_off = {r["step"]: r["heldout/reward"] for r in rundir.heldout_rows(off)}
    held_on = {r["step"]: r["heldout/reward"] for r in rundir.heldout_rows(on)}
    print("held-out without recovery", held_off, "\nwith", held_on, "\nrollbacks",
          [(e["recovery/trigger"], e["step"], e["recovery/to_step"]) for e in rundir.rollback_events(on)])
    best_off = max(v for s, v in held_off.items() if s <= 2)
    assert held_off[14] < best_off - 0.3, "the planted stretch should collapse the run without recovery"
    assert out["rollbacks"] and all(e["recovery/trigger"] == "heldout_drop" for e in rundir.rollback_events(on))
    assert held_on[14] >= max(held_on.values()) - 0.1, f"not within noise of its best: {held_on}"
    assert held_on[14] > held_off[14] + 0.3


def test_rollbacks_are_bounded_and_the_stop_names_the_trigger(tiny_lm_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLANT_ENV, "nan@5-10")
    with pytest.raises(RecoveryExhausted) as e:
        _run(tiny_lm_dir, tmp_path, healing_config(tiny_lm_dir, 10, recovery={"max_rollbacks": 1}))
    msg = str(e.value)
    assert "nonfinite" in msg and "max_rollbacks = 1" in msg and "rollback 1 (nonfinite at step 5) to step 4" in msg
    assert "learning rate" in msg and "skipped" in msg
    assert saved_weights_finite(tmp_path)


class Killed(BaseException):
    """A kill, where the test puts one (BaseException: nothing catches it on the way out)."""


@pytest.mark.parametrize("where", ["decided", "acted"])
def test_a_kill_during_a_rollback_resumes_to_the_same_rows(tiny_lm_dir: Path, tmp_path: Path, where: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the decision was written (before acting on it), or after acting (before the run went on), then
    resumed: the same metrics rows and rollback events as the run never killed."""
    monkeypatch.setenv(PLANT_ENV, "nan@5")
    tc = healing_config(tiny_lm_dir, 8)
    _run(tiny_lm_dir, tmp_path / "whole", tc)

    killed = tmp_path / "killed"
    real = rundir.roll_back

    def kill(run_dir: Path, decision: dict[str, Any]) -> None:
        if where == "acted":
            real(run_dir, decision)
        raise Killed

    monkeypatch.setattr(rundir, "roll_back", kill)
    with pytest.raises(Killed):
        _run(tiny_lm_dir, killed, tc)
    monkeypatch.setattr(rundir, "roll_back", real)
    assert len(rundir.recovery_rows(killed)) == 1
    out = _run(tiny_lm_dir, killed, tc)  # `s3 train` again
    assert out["steps"] == 8
    assert _rows(killed) == _rows(tmp_path / "whole")


def test_the_abandoned_trainer_is_freed_before_the_next_is_built(tiny_lm_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """After a rollback `train_healing` builds a fresh trainer; the abandoned one (its learner, optimizer and rollout
    engine: an in-process vLLM engine is freed with its last reference) must be gone by then, or a real run holds two
    of each while the new one is built (before the fix the loop variable kept it: alive at the second build)."""
    import weakref

    monkeypatch.setenv(PLANT_ENV, "nan@3")
    settings = load_config(None, []).model_copy(update={"training": healing_config(tiny_lm_dir, 5)})
    built: list[weakref.ref[Any]] = []
    alive_at_build: list[int] = []

    def build() -> Any:
        alive_at_build.append(sum(r() is not None for r in built))
        trainer = toy_trainer(settings, tmp_path, heldout=0)
        built.append(weakref.ref(trainer))
        return trainer

    out = train_healing(build)
    assert len(out["rollbacks"]) == 1 and alive_at_build == [0, 0], alive_at_build
