"""training/rundir.py, the one reader and writer of a training run directory, without a trainer: metrics rows (torn
lines, repeated steps), step times, held-out rows and the checkpoint chosen from them, the atomic checkpoint folder
with checkpoints/latest, best and pruning, and the held-out row type both schemas read back into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3core.errors import S3Error
from training import rundir
from training.learn.export import export_policy
from training.run.evaluate import HeldoutScore


def test_read_metrics_tolerates_a_truncated_line_and_keeps_the_last_row_per_step(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "reward/mean": 0.1}) + "\n"
        + json.dumps({"step": 2, "reward/mean": 0.2}) + "\n"
        + json.dumps({"step": 2, "reward/mean": 0.3}) + "\n"
        + '{"step": 3, "rew'
    )
    rows = rundir.read_metrics(tmp_path)
    assert [(r["step"], r["reward/mean"]) for r in rows] == [(1, 0.1), (2, 0.3)]
    with pytest.raises(S3Error, match=r"no metrics\.jsonl"):
        rundir.read_metrics(tmp_path / "nope")
    assert rundir.metrics_rows(tmp_path / "nope") == []  # a fresh run has none yet: not an error here


def test_metrics_writer_appends_rows_and_step_times_are_read_back(tmp_path: Path) -> None:
    w = rundir.MetricsWriter(tmp_path)
    w.write(1, {"charts/sft": 1.0, "charts/step_seconds": 2.0, "data/question_ids": ["a"]})
    w.write(2, {"charts/step_seconds": 5.0, "charts/heldout_seconds": 7.0})
    w.write(3, {"charts/step_seconds": 4.0})
    w.close()
    assert [r["step"] for r in rundir.read_metrics(tmp_path)] == [1, 2, 3]
    assert rundir.read_metrics(tmp_path)[0]["data/question_ids"] == ["a"]
    assert rundir.step_times(tmp_path) == {"sft": 2.0, "rl": 4.0, "heldout": 7.0}
    assert rundir.step_times(tmp_path / "fresh") == {}


def test_the_best_checkpoint_is_the_highest_held_out_acc_up_to_the_step(tmp_path: Path) -> None:
    assert rundir.best_checkpoint(tmp_path, 30) is None
    rows = [(8, 0.20), (10, 0.31), (20, 0.25), (20, 0.31), (30, float("nan")), (40, 0.9)]
    (tmp_path / rundir.HELDOUT_FILE).write_text("".join(
        json.dumps({"step": s, "checkpoint": f"step_{s:06d}", "heldout/acc_s3": a}) + "\n" for s, a in rows))
    # ties go to the newer step; a repeated step's last row wins; NaN (nothing scored) and rows past the
    # trainer's step (left by a run that was cut before its checkpoint) are passed over
    assert rundir.best_checkpoint(tmp_path, 30) == "step_000020"
    assert rundir.best_checkpoint(tmp_path, 19) == "step_000010"
    assert [r["step"] for r in rundir.heldout_rows(tmp_path, up_to=20)] == [8, 10, 20]


def test_the_held_out_choice_falls_back_to_the_reward_when_no_row_has_an_acc() -> None:
    """search_r1 mode and r1_searcher_stage1 score no generator: heldout/acc_s3 is NaN in every row."""
    nan = float("nan")
    rows = [{"step": 10, "checkpoint": "a", "heldout/acc_s3": nan, "heldout/reward": 0.2},
            {"step": 20, "checkpoint": "b", "heldout/acc_s3": nan, "heldout/reward": 0.5},
            {"step": 30, "checkpoint": "c", "heldout/acc_s3": nan, "heldout/reward": nan}]
    assert rundir.choose_heldout(rows) == "b"
    assert rundir.choose_heldout([{**rows[0], "heldout/acc_s3": 0.1}, rows[1]]) == "a"  # an Acc decides where there is one
    assert rundir.choose_heldout([rows[2]]) is None and rundir.choose_heldout([]) is None


def test_a_checkpoint_is_renamed_into_place_latest_and_best_follow_and_old_ones_go(tmp_path: Path) -> None:
    """checkpoints/step_N appears only once complete (a block that fails leaves no step_N and no latest), latest names
    the newest, best the held-out choice, and pruning keeps the last `keep` and the best."""
    with pytest.raises(RuntimeError), rundir.writing_checkpoint(tmp_path, 1, keep=2) as tmp:
        (tmp / "policy").mkdir()
        raise RuntimeError("killed mid-write")
    assert rundir.latest_checkpoint(tmp_path) is None and not rundir.checkpoint_path(tmp_path, 1).exists()
    rundir.append_heldout(tmp_path, {"step": 2, "checkpoint": "step_000002", "heldout/acc_s3": 0.5},
                          [{"step": 2, "id": "q1", "reward": 1.0}])
    for step in (1, 2, 3, 4):
        with rundir.writing_checkpoint(tmp_path, step, keep=2) as tmp:
            (tmp / "policy").mkdir()
            (tmp / "policy" / "weights").write_text(str(step))
    ckpts = tmp_path / "checkpoints"
    assert rundir.latest_checkpoint(tmp_path) == rundir.checkpoint_path(tmp_path, 4)
    assert (ckpts / "best").read_text() == "step_000002"
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_000002", "step_000003", "step_000004"]
    assert not list(ckpts.glob(".*.tmp")) and rundir.checkpoint_step(rundir.checkpoint_path(tmp_path, 4)) == 4
    assert [json.loads(x)["id"] for x in (tmp_path / rundir.HELDOUT_QUESTIONS_FILE).read_text().splitlines()] == ["q1"]
    out = export_policy(tmp_path, tmp_path / "exported")  # a run directory: its best checkpoint's policy/
    assert (out / "weights").read_text() == "2"
    (ckpts / "best").unlink()  # a run without held-out evaluation: its newest
    assert (export_policy(tmp_path, tmp_path / "exported2") / "weights").read_text() == "4"
    with pytest.raises(S3Error, match="not a training checkpoint"):
        export_policy(tmp_path / "checkpoints", tmp_path / "x")


def test_held_out_rows_of_both_schemas_read_back_into_one_row_type() -> None:
    """heldout.jsonl's rows (heldout/acc_s3: the committed ones under benchmarks/results too) and `s3 train-eval`'s
    rows (acc_s3_mean) are the same HeldoutScore; NaN (nothing scored) reads back as None."""
    score = HeldoutScore(questions=4, scored=3, reward=0.5, acc_s3=0.25, acc_rag=None, turns=1.5, docs=3.0)
    loop_row = {"step": 10, "checkpoint": "step_000010", "questions": 4, **score.metrics(),
                "heldout/generator_calls": 6.0}
    assert loop_row["heldout/acc_rag"] != loop_row["heldout/acc_rag"]  # NaN in the loop's rows
    assert HeldoutScore.from_row(loop_row) == score
    assert HeldoutScore.from_row({"policy": "p", "split": "heldout", **score.summary()}) == score
    assert score.summary() == {"questions": 4, "scored": 3, "reward_mean": 0.5, "acc_s3_mean": 0.25,
                               "acc_rag_mean": None, "turns_mean": 1.5, "docs_mean": 3.0}


@pytest.mark.parametrize("old_module", sorted(rundir.MOVED_MODULES))
def test_batches_in_flight_pickled_under_a_module_that_has_moved_still_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_module: str) -> None:
    """A checkpoint written before its classes moved names their old module in inflight.pt (RolloutBatch and
    ScoredBatch were pickled as training.trainer's, then training.step's): the one reader maps it onto the new one."""
    import sys
    import types

    pytest.importorskip("torch")
    from training.rewards import RewardBatch
    from training.run import step

    batch = step.RolloutBatch([0, 1], [], {"search/turns": 1.0}, {})
    scored = step.ScoredBatch(RewardBatch([1.0, None]), {"reward/generator_calls": 2.0})
    # write the pickle as the old code did: the classes' module is the old one, which exists while it is written
    old = types.ModuleType(old_module)
    old.RolloutBatch, old.ScoredBatch = step.RolloutBatch, step.ScoredBatch  # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        m.setitem(sys.modules, old_module, old)
        m.setattr(step.RolloutBatch, "__module__", old_module)
        m.setattr(step.ScoredBatch, "__module__", old_module)
        rundir.write_inflight(tmp_path, [{"step": 3, "version": 2, "rollout": batch, "scored": scored, "times": {}}])
    assert old_module.encode() in (tmp_path / rundir.INFLIGHT_FILE).read_bytes()  # the zip's pickle names it
    assert old_module not in sys.modules or sys.modules[old_module] is not old  # gone again, as after the move
    [saved] = rundir.read_inflight(tmp_path)
    assert isinstance(saved["rollout"], step.RolloutBatch) and saved["rollout"] == batch
    assert isinstance(saved["scored"], step.ScoredBatch) and saved["scored"] == scored
