"""training/run/recovery.py's decisions and training/rundir.py's rollback records, without a model: each trigger on
metrics rows made to set it off (and rows that must not), the held-out check's paired noise, the checkpoint a
rollback goes to, acting on a decision (idempotent), the rows a rollback abandons, what recovery.jsonl makes of the
next start (learning rate, KL coefficient, skipped batches, a fresh optimizer), the planted failures, the bounded
stop, and the checkpoint a run directory stands for (checkpoints/best) in `s3 search --policy RUN_DIR` / the exporter.
The real loop's rollbacks: tests/unit/test_self_healing.py."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from s3.config import load_config
from s3core.errors import S3Error
from s3core.types import SearchResult, SearchStep
from training import rundir
from training.config import TrainingConfig
from training.rewards import RewardBatch
from training.run.recovery import (
    Finding,
    Recovery,
    RecoveryExhausted,
    fresh_start,
    healed,
    learner_state,
    paired_drop,
    planted,
    robust_spike,
    skip_for,
    skips,
)
from training.run.schedule import DataOrder


def _rec(tmp_path: Path, **rc: Any) -> Recovery:
    tc = TrainingConfig(recovery=rc, update={"learning_rate": 1e-4, "kl_coef": 0.01})
    return Recovery(tc, tmp_path, log=lambda s: None)


def _steady(n: int, **extra: float) -> list[dict[str, Any]]:
    """n healthy RL rows: grad norm and loss wobbling around 1.0 / 0.1, KL small, two queries a question."""
    return [{"step": s, "losses/grad_norm": 1.0 + 0.05 * (s % 3), "losses/total": 0.1 + 0.01 * (s % 2),
             "losses/kl": 0.01, "search/queries_per_question": 2.0, "search/invalid_action_rate": 0.0, **extra}
            for s in range(1, n + 1)]


def _feed(r: Recovery, rows: list[dict[str, Any]]) -> list[Any]:
    out = []
    for row in rows:
        out.append(r.check(row))
        r.rows.append(row)
    return out


def test_healthy_rows_set_nothing_off(tmp_path: Path) -> None:
    assert _feed(_rec(tmp_path), _steady(40)) == [None] * 40


@pytest.mark.parametrize("key", ["losses/total", "losses/grad_norm"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_loss_or_gradient_norm_triggers_at_its_step(tmp_path: Path, key: str, value: float) -> None:
    r = _rec(tmp_path)
    _feed(r, _steady(3))
    f = r.check({"step": 4, key: value})
    assert f is not None and (f.trigger, f.step, f.onset) == ("nonfinite", 4, 4) and key in f.detail
    assert _rec(tmp_path, nonfinite=False).check({"step": 4, key: value}) is None


def test_a_spike_is_judged_by_median_and_mad_of_the_trailing_window(tmp_path: Path) -> None:
    r = _rec(tmp_path, spike_window=10, spike_k=10.0)
    _feed(r, _steady(4))
    assert r.check({"step": 5, "losses/grad_norm": 50.0}) is None  # too little history (< window / 2) to judge
    _feed(r, _steady(10)[4:])
    f = r.check({"step": 11, "losses/grad_norm": 50.0})
    assert f is not None and f.trigger == "spike" and "losses/grad_norm" in f.detail
    assert r.check({"step": 11, "losses/grad_norm": 1.3}) is None  # inside the band
    # one earlier spike in the window does not widen the band (it would a mean + k std)
    r.rows.append({"step": 11, "losses/grad_norm": 50.0})
    assert r.check({"step": 12, "losses/grad_norm": 40.0}) is not None
    assert robust_spike([2.0] * 8, 2.001, k=10.0) is None  # a flat history keeps a small band


def test_kl_above_its_bound_triggers_from_where_the_excursion_began(tmp_path: Path) -> None:
    r = _rec(tmp_path, kl_max=0.5)
    _feed(r, [*_steady(5), {"step": 6, "losses/kl": 0.1}, {"step": 7, "losses/kl": 0.3}, {"step": 8, "losses/kl": 0.4}])
    f = r.check({"step": 9, "losses/kl": 0.6})
    assert f is not None and (f.trigger, f.onset) == ("kl", 7)  # 7 and 8 were above kl_max / 2
    assert _rec(tmp_path, kl_max=None).check({"step": 9, "losses/kl": 60.0}) is None


def test_a_search_collapse_triggers_at_its_onset(tmp_path: Path) -> None:
    r = _rec(tmp_path, collapse_window=3)
    rows = _steady(8) + [{**row, "search/queries_per_question": 0.0} for row in _steady(14)[8:]]
    found = [f for f in _feed(r, rows) if f is not None]
    assert found and found[0].trigger == "stopped_searching" and found[0].onset == 9
    assert [f for f in _feed(_rec(tmp_path, collapse=False, collapse_window=3), rows) if f] == []


def _heldout(run_dir: Path, step: int, per_q: list[float]) -> None:
    rundir.append_heldout(run_dir, {"step": step, "checkpoint": rundir.checkpoint_name(step),
                                    "heldout/reward": sum(per_q) / len(per_q), "heldout/acc_s3": math.nan},
                          [{"step": step, "id": f"q{i}", "reward": v} for i, v in enumerate(per_q)])


def test_the_held_out_drop_is_judged_by_the_paired_per_question_noise(tmp_path: Path) -> None:
    best = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    _heldout(tmp_path, 2, best)
    _heldout(tmp_path, 4, [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])  # as good on average, other questions: noise
    _heldout(tmp_path, 6, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # 4 of the 5 right ones lost: a fall
    r = _rec(tmp_path)
    assert r.check({"step": 4, "heldout/reward": 0.625}) is None
    f = r.check({"step": 6, "heldout/reward": 0.125})
    # against step 4's: as good as step 2's, and newer (ties go to the newer, as checkpoints/best does)
    assert f is not None and f.trigger == "heldout_drop" and "step 4" in f.detail and "8 paired" in f.detail
    assert _rec(tmp_path, heldout_z=None).check({"step": 6, "heldout/reward": 0.125}) is None
    mean, se, n = paired_drop([{"id": "a", "reward": 1.0}], [{"id": "a", "reward": 0.0}, {"id": "b", "reward": 1.0}],
                              "reward")
    assert (mean, se, n) == (-1.0, 0.0, 1)  # only the questions both scored are paired


def _ckpt(run_dir: Path, step: int, inflight: bool = False) -> None:
    with rundir.writing_checkpoint(run_dir, step, keep=10) as tmp:
        (tmp / "policy").mkdir()
        if inflight:
            (tmp / "inflight.pt").write_text("batches")


def test_the_rollback_goes_to_the_newest_checkpoint_before_the_onset_that_passed(tmp_path: Path) -> None:
    _heldout(tmp_path, 2, [1.0] * 6 + [0.0] * 2)
    _heldout(tmp_path, 4, [1.0] * 6 + [0.0] * 2)
    _heldout(tmp_path, 6, [0.0] * 8)  # failed the check
    for s in (2, 3, 4, 6):
        _ckpt(tmp_path, s)
    r = _rec(tmp_path)
    assert r.target(onset=8) == 4  # 6 failed the held-out check; 3 was never evaluated
    assert r.target(onset=4) == 2
    assert r.target(onset=2) is None
    assert _rec(tmp_path, heldout_z=None).target(onset=8) == 6  # the held-out check off: every checkpoint passes
    plain = tmp_path / "plain"  # a run without held-out evaluation: any checkpoint before the onset
    for s in (2, 3):
        _ckpt(plain, s)
    assert _rec(plain).target(onset=4) == 3


def test_a_rollback_is_written_before_it_is_acted_on_and_acting_is_idempotent(tmp_path: Path) -> None:
    w = rundir.MetricsWriter(tmp_path)
    for s in range(1, 7):
        w.write(s, {"reward/mean": 0.1 * s})
    _heldout(tmp_path, 2, [1.0, 1.0])
    _heldout(tmp_path, 4, [1.0, 1.0])
    _heldout(tmp_path, 6, [0.0, 0.0])
    for s in (2, 4):
        _ckpt(tmp_path, s, inflight=True)
    r = _rec(tmp_path, lr_factor=0.5, kl_factor=2.0)
    f = r.check({"step": 6, "heldout/reward": 0.0})
    assert f is not None
    decision = r.roll_back(f)
    assert rundir.recovery_rows(tmp_path) == [decision]
    assert decision["to_step"] == 4 and decision["changes"] == {"fresh_optimizer": True, "lr_factor": 0.5,
                                                                "kl_factor": 1.0, "skip": 2}
    ck = tmp_path / "checkpoints"
    assert rundir.pointer(tmp_path, "latest") == "step_000004" and rundir.pointer(tmp_path, "best") == "step_000004"
    assert not (ck / "step_000004" / "inflight.pt").exists()  # rolled out for the skipped steps
    assert (ck / "step_000002" / "inflight.pt").exists()
    # the abandoned branch's rows are passed over; the rollback is an event row, not a step's
    assert [row["step"] for row in rundir.metrics_rows(tmp_path)] == [1, 2, 3, 4]
    assert [row["step"] for row in rundir.heldout_rows(tmp_path)] == [2, 4]
    assert rundir.heldout_question_rows(tmp_path, 6) == []
    rundir.roll_back(tmp_path, decision)  # a resume after a kill does it again: the same end
    events = rundir.rollback_events(tmp_path)
    assert len(events) == 1 and events[0]["recovery/trigger"] == "heldout_drop" and events[0]["step"] == 6
    # the new branch's rows (generation 1) are the run's
    w.write(5, {"reward/mean": 0.9})
    assert [(row["step"], row["reward/mean"]) for row in rundir.metrics_rows(tmp_path)][-1] == (5, 0.9)
    w.close()


def test_what_recovery_jsonl_makes_of_the_next_start(tmp_path: Path) -> None:
    cfg = load_config(None, ["training.update.learning_rate=1e-4", "training.update.kl_coef=0.01"])
    assert healed(cfg, tmp_path) is cfg and skips(tmp_path) == ()
    for k, (to, kl, skip) in enumerate([(4, 2.0, 2), (8, 1.0, 3)]):
        _ckpt(tmp_path, to)
        rundir.append_recovery(tmp_path, {"rollback": k, "step": to + skip, "trigger": "t", "onset": to + 1,
                                          "to_step": to, "changes": {"lr_factor": 0.5, "kl_factor": kl, "skip": skip},
                                          "summary": "s"})
        rundir.roll_back(tmp_path, rundir.recovery_rows(tmp_path)[-1])
    tc = healed(cfg, tmp_path).training
    assert tc.update.learning_rate == pytest.approx(2.5e-5) and tc.update.kl_coef == pytest.approx(0.02)
    assert skips(tmp_path) == ((4, 2), (8, 3))
    order = DataOrder(ids=tuple("abcdefghij"), batch_size=1, shifts=skips(tmp_path))
    assert [order.data_step(s) for s in range(10)] == [0, 1, 2, 3, 6, 7, 8, 9, 13, 14]
    assert fresh_start(tmp_path, rundir.checkpoint_path(tmp_path, 8))
    assert not fresh_start(tmp_path, rundir.checkpoint_path(tmp_path, 4))  # the start after the earlier rollback
    state = {"optimizer": 1, "scheduler": 2, "value_head": 3, "rng": 4}
    assert learner_state(tmp_path, rundir.checkpoint_path(tmp_path, 8), state) == {
        "optimizer": None, "scheduler": None, "value_head": 3}
    assert learner_state(tmp_path, rundir.checkpoint_path(tmp_path, 10), state)["optimizer"] == 1


def test_rollbacks_are_bounded_and_the_stop_says_what_was_tried(tmp_path: Path) -> None:
    for s in (2, 4):
        _ckpt(tmp_path, s)
    r = _rec(tmp_path, max_rollbacks=1)
    first = r.roll_back(r.check({"step": 5, "losses/total": math.nan}))  # type: ignore[arg-type]
    assert first["to_step"] == 4
    with pytest.raises(RecoveryExhausted, match=r"nonfinite .*max_rollbacks = 1.*rollback 1 \(nonfinite at step 5\) "
                                                r"to step 4: fresh optimizer, learning rate"):
        r.roll_back(r.check({"step": 5, "losses/grad_norm": math.inf}))  # type: ignore[arg-type]
    early = _rec(tmp_path / "early")
    with pytest.raises(RecoveryExhausted, match="no checkpoint before it"):
        early.roll_back(early.check({"step": 1, "losses/total": math.nan}))  # type: ignore[arg-type]


def test_train_exits_4_with_the_message_when_recovery_is_exhausted(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from s3.commands import train
    from training.run import recovery

    def exhausted(*a: Any, **k: Any) -> Any:
        raise RecoveryExhausted("training stopped at step 5: nonfinite (...)")

    monkeypatch.setattr(recovery, "train_healing", exhausted)
    args = argparse.Namespace(max_minutes=None, max_cost_usd=None, dry_run=False, max_steps=None)
    assert train._train(args, load_config(None, [])) == 4
    assert "training stopped at step 5: nonfinite" in capsys.readouterr().err


def test_planted_failures_change_only_their_steps_and_a_bad_spec_is_named() -> None:
    searched = SearchResult(question="q", steps=[SearchStep(turn=0, query="q"), SearchStep(turn=1, query="more")])
    stopped = SearchResult(question="q", steps=[SearchStep(turn=0, query="q")])
    rb = RewardBatch(rewards=[0.5, None])
    assert planted(None, 3, [searched, stopped], rb) is rb
    assert planted("nan@4", 3, [searched, stopped], rb) is rb
    assert all(math.isnan(x) for x in planted("nan@3", 3, [searched, stopped], rb).rewards)  # type: ignore[arg-type]
    assert planted("flip@2-4", 3, [searched, stopped], rb).rewards == [-0.5, None]
    assert planted("stop_pays@1-9", 3, [searched, stopped], rb).rewards == [0.0, 1.0]
    for bad in ("nan", "nan@x", "melt@3", "nann@50"):  # a typo is named at the first step, not at step 50
        with pytest.raises(S3Error, match="S3_PLANTED_FAILURE"):
            planted(bad, 3, [searched], RewardBatch(rewards=[0.5]))


def test_a_run_directory_stands_for_its_best_checkpoint(tmp_path: Path) -> None:
    """`s3 search --policy RUN_DIR`, `s3 serve`, `s3 train-eval` and the exporter load a run directory through
    resolve_checkpoint / policy_checkpoint: checkpoints/best, else checkpoints/latest."""
    from searcher.policy.transformers_policy import resolve_checkpoint

    for s in (2, 4):
        _ckpt(tmp_path, s)
        (rundir.checkpoint_path(tmp_path, s) / "policy" / "config.json").write_text(json.dumps({"step": s}))
    assert resolve_checkpoint(str(tmp_path)) == rundir.checkpoint_path(tmp_path, 4) / "policy"
    rundir.set_pointer(tmp_path, "best", "step_000002")
    assert resolve_checkpoint(str(tmp_path)) == rundir.checkpoint_path(tmp_path, 2) / "policy"
    assert rundir.policy_checkpoint(tmp_path) == rundir.checkpoint_path(tmp_path, 2)


def test_the_module_examples_hold() -> None:
    import doctest

    from training.run import recovery

    assert doctest.testmod(recovery, optionflags=doctest.ELLIPSIS).failed == 0


def test_a_resumed_run_checks_against_the_rows_up_to_its_checkpoint(tmp_path: Path) -> None:
    """Rows a killed run wrote past the checkpoint it resumes from are trained again, not history: the spike
    window, the KL onset and the collapse watch see what a run never killed saw."""
    rows = _steady(10) + [{"step": s, "losses/grad_norm": 50.0, "losses/kl": 0.01} for s in (11, 12)]
    (tmp_path / rundir.METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    tc = TrainingConfig(recovery={"spike_window": 10}, update={"learning_rate": 1e-4, "kl_coef": 0.01})
    assert [int(r["step"]) for r in Recovery(tc, tmp_path, log=lambda s: None, start=10).rows] == list(range(1, 11))
    assert len(Recovery(tc, tmp_path, log=lambda s: None).rows) == 12
    f = Recovery(tc, tmp_path, log=lambda s: None, start=10).check({"step": 11, "losses/grad_norm": 50.0})
    assert f is not None and f.trigger == "spike"


def test_the_timeline_passes_over_the_steps_a_rollback_abandoned(tmp_path: Path) -> None:
    for s in range(1, 6):
        rundir.append_timeline(tmp_path, {"step": s, "branch": "old"})
    rundir.append_recovery(tmp_path, {"rollback": 0, "step": 5, "trigger": "nonfinite", "onset": 5, "to_step": 2,
                                      "changes": {}, "summary": ""})
    rundir.append_timeline(tmp_path, {"step": 3, "branch": "new"})
    assert [(r["step"], r["branch"]) for r in rundir.read_timeline(tmp_path)] == [(1, "old"), (2, "old"), (3, "new")]


def test_a_rollback_behind_an_earlier_ones_target_abandons_its_skip_and_draws_no_batch_twice(tmp_path: Path) -> None:
    """Rollback A: at step 12 back to 10 (skip 2: the new branch's step 11 draws data step 12); rollback B: at step
    14 of that branch back to 8, before A's target. B's branch must not draw again what A's drew (data steps 8-9,
    12-13) nor what A skipped (10-11): A's shift goes with its branch point and B's covers every data step since 8."""
    def decide(k: int, step: int, to: int) -> None:
        skip = skip_for(skips(tmp_path), to, step)
        rundir.append_recovery(tmp_path, {"rollback": k, "step": step, "trigger": "t", "onset": step, "to_step": to,
                                          "changes": {"skip": skip}, "summary": ""})

    def drawn(first: int, last: int) -> list[int]:  # the data steps of 1-based steps first..last on today's branch
        order = DataOrder(ids=tuple(range(40)), batch_size=1, shifts=skips(tmp_path))
        return [order.data_step(s - 1) for s in range(first, last + 1)]

    decide(0, 12, 10)
    assert skips(tmp_path) == ((10, 2),) and drawn(11, 14) == [12, 13, 14, 15]
    used = set(drawn(1, 10)) | set(range(10, 12)) | set(drawn(11, 14))  # A's branch to step 14, and what A skipped
    decide(1, 14, 8)
    assert skips(tmp_path) == ((8, 8),)
    assert drawn(9, 12) == [16, 17, 18, 19] and not set(drawn(9, 20)) & used


@pytest.mark.parametrize(("trigger", "to"), [("stopped_searching", 6), ("kl", 6), ("nonfinite", 8), ("spike", 8)])
def test_triggers_seen_in_rollouts_or_kl_go_back_past_the_checkpoint_that_made_them(tmp_path: Path, trigger: str,
                                                                                   to: int) -> None:
    """Step 9's rollouts and KL come from checkpoint 8's weights: a collapse or KL excursion from step 9 on goes back
    to 6; a NaN or spike in step 9's own update leaves checkpoint 8 good."""
    for s in (6, 8):
        _ckpt(tmp_path, s)
    decision = _rec(tmp_path).roll_back(Finding(trigger, 11, 9, "planted"))
    assert decision["to_step"] == to
