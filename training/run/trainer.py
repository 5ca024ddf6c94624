"""The trainer: `s3 train --config ...`. training/run/build.py builds the parts (data, retriever, learner, executor,
oracle); this file is the loop over them and its metrics, top to bottom: `train` -> `train_step` (or `sft_step`) ->
`update` -> `save_checkpoint`.

One step = B questions x group_size rollouts through the searcher (the learner itself, or a vLLM engine that holds
the learner's weights: training.rollout.engine; sampling at training.rollout.temperature, exact token masks) -> rewards
(training/rewards.py; failed calls leave the update) -> advantages (GRPO group baseline, or PPO critic + GAE) ->
masked policy-gradient update with a k3 KL term to the frozen reference policy -> (vLLM engine) the new weights into
the running engine, in place -> metrics -> checkpoint every `training.checkpoint.every` steps (and always at the end).

What the loop drives, each behind one interface: rollouts, rewards and the weight sync through a StepExecutor
(training/rollouts/executors.py: in this process, or on Ray actors, training/rollouts/ray_backend.py); the update, the
scheduler, the checkpoint's model folders and the warm-up's end through the learner (training/learn/api.py
`PolicyLearner`: this process's Learner, or a LearnerGroup of ray.learners Ray actors). The data order and the held-out
schedule are training/run/schedule.py's; every file of the run directory (metrics.jsonl, checkpoints/, heldout.jsonl,
...) is training/rundir.py's; the held-out evaluation is training/run/evaluate.py's; how a step's batch is measured,
turned into update rows (`update_rows`) and into its metrics row is training/run/step.py's.

Devices: the learner, the reference policy and the critic live on training.learner.device ('auto' = cuda when available);
nothing else is placed by hand. With training.rollout.engine = "vllm" the ratio's old log-probs are the learner's own
recomputation (as in verl), never the engine's; the engine's are compared with them every step
(rollout/logprob_gap_mean_abs, rollout/logprob_gap_max) and the sync is timed (charts/weight_sync_s).

Asynchronous RL (training.rollout.max_staleness = s > 0; docs/async-rl.md): a step's batch comes from
training/rollouts/pipeline.py's RolloutPipeline, which rolls out and scores batches up to s steps ahead (scoring on a background
thread, rollouts too when the engine is not the learner's own model) with weights at most s updates old; a checkpoint
keeps the batches in flight. s = 0 is the synchronous loop, call for call.

Resume: `s3 train` on an existing run directory continues from `checkpoints/latest` (same data order: the order is a
function of (seed, epoch), and the position is stored). A trigger after an RL step (NaN, spike, KL, collapse, a held-out
fall) rolls the run back: `train` returns the decision, and training/run/recovery.py's `train_healing` resumes. The PPO
critic is a value head on the policy's last hidden states (detached: it learns with training.update.critic_learning_rate
without moving the actor).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3core.types import QAExample, SearchResult
from searcher.trained import TrainedSearcherRecord, make_record, write_record
from training import rundir
from training.config import TrainSettings
from training.learn.api import Batch, pad_rollouts
from training.rollouts.budget import BudgetReached
from training.rollouts.pipeline import RolloutPipeline
from training.run.build import TrainingParts, build_training, prepare_run
from training.run.evaluate import evaluate_heldout
from training.run.recovery import Recovery, healed, learner_state, planted, planted_spec, skips
from training.run.rng import capture_rng, restore_rng
from training.run.schedule import DataOrder, HeldoutSchedule, in_groups
from training.run.step import (
    RolloutBatch,
    ScoredBatch,
    measured_batch,
    micro_chunks,
    over_budget_note,
    rl_row,
    sync_row,
    timeline_row,
    update_rows,
)

__all__ = ["S3Trainer", "make_trainer"]


class S3Trainer:
    """The training loop over the parts training/run/build.py built: rollout -> reward -> update -> log -> checkpoint
    (GRPO / PPO; s3 searchers with a frozen generator, or Search-R1 end to end: parts.agent_kind)."""

    pipeline: RolloutPipeline | None = None  # the batches in flight (training/rollouts/pipeline.py), from the first RL step
    _inflight: list[dict[str, Any]] | None = None  # a checkpoint's batches in flight, until the pipeline takes them
    rolled_back: dict[str, Any] | None = None  # the rollback decision train() stopped on (training/run/recovery.py)

    def __init__(self, parts: TrainingParts, log: Callable[[str], None] = print) -> None:
        self.parts = parts
        self.cfg, self.tc, self.log = parts.cfg, parts.cfg.training, log
        self.run_dir = parts.run_dir
        self.examples, self.heldout = parts.examples, parts.heldout
        self.data, self.retriever, self.loop_cfg = parts.data, parts.retriever, parts.loop_cfg
        self.tokenizer, self.oracle_agent = parts.tokenizer, parts.oracle
        self.executor, self.learner = parts.executor, parts.learner
        self.order = DataOrder.of(self.tc, self.examples, parts.sft_pool, shifts=skips(self.run_dir))
        self.schedule = HeldoutSchedule.of(self.tc, len(self.heldout))
        self.step = 0
        self.resumed_from: str | None = None
        self.stopped: str | None = None  # why train() stopped early (budget reached), else None
        self.last_batches: list[Batch] = []  # the last update's padded micro-batches
        self.metrics = rundir.MetricsWriter(self.run_dir)
        try:
            rundir.write_config(self.run_dir, self.cfg.model_dump_json(indent=2))
            write_record(self._searcher_record(self.run_dir), self.run_dir)
            if parts.resume_dir is not None:
                self._load_state(parts.resume_dir)
            # the rollout engines start from base_model's files; a resumed run (or a LoRA's merged weights) goes in now
            sync_s = self.executor.sync()
        except BaseException:
            self.close()  # workers and learner actors do not outlive a trainer that failed to start
            raise
        if sync_s is not None:
            self.log(f"train: rollout engine(s) ready; weights synced in {sync_s:.2f}s")

    def close(self) -> None:
        """Stop the pipeline's threads, the executor's workers and the learner group (Ray actors); close the metrics."""
        if self.pipeline is not None:
            self.pipeline.close()
        self.parts.close()
        self.metrics.close()

    # ------------------------------------------------------------------ rollouts
    def rollout(self, examples: list[QAExample], step: int | None = None) -> list[SearchResult]:
        """The executor's rollouts of `examples` (step: the sampling seed of Ray shards; default the current step)."""
        results = self.executor.rollout(examples, self.step if step is None else step)
        for r, e in zip(results, examples, strict=True):
            r.question_id = e.id
        return results

    def _pad(self, results: list[SearchResult], rows: list[int]) -> Batch:
        lc = self.tc.learner
        return pad_rollouts(results, rows, self.tokenizer.pad_token_id, device=self.learner.batch_device,
                            share_prefix=lc.share_prefix and lc.gradient_checkpointing is not True)

    # ------------------------------------------------------------------ the batches in flight
    def _pipeline(self) -> RolloutPipeline:
        """The batches in flight (training/rollouts/pipeline.py), made at the first RL step: rollouts in the background when
        the rollout engine is not the learner's own model (Ray rollout workers, a vLLM engine)."""
        if self.pipeline is None:
            apart = self.tc.backend == "ray" or self.tc.rollout.engine == "vllm"
            self.pipeline = RolloutPipeline(self._rollout_batch, self._score_batch,
                                            max_staleness=self.tc.rollout.max_staleness, background_rollouts=apart,
                                            version=self.step)
            if self._inflight:
                self.pipeline.restore(self._inflight, self.step)
            self._inflight = None
        return self.pipeline

    def _release_pipeline(self) -> None:
        """Keep what is in flight (for the checkpoint that follows) and stop the pipeline (budget reached)."""
        if self.pipeline is not None:
            self._inflight = self.pipeline.state()
            self.pipeline.close()
            self.pipeline = None

    def _examples(self, idx: list[int]) -> list[QAExample]:
        return in_groups(self.examples, idx, self.tc.rollout.group_size)

    def _rollout_batch(self, step: int) -> RolloutBatch:
        """The rollouts of data-order step `step` and what is measured of them (training/run/step.py): the pipeline's
        rollout job (this thread when the learner samples itself, else the rollout thread, holding the engine)."""
        idx = self.order.batch_indices(step)
        examples, k = self._examples(idx), self.cfg.retriever.k
        return measured_batch(self.tc, idx, examples, self.rollout(examples, step), max_turns=self.loop_cfg.max_turns,
                              probe=lambda qs: [[d.id for d in ds] for ds in self.retriever.search(qs, k)],
                              pad=self._pad, logprobs=self.learner.logprobs)

    def _score_batch(self, step: int, batch: RolloutBatch) -> ScoredBatch:
        """The rewards of a step's rollouts and the generator usage they cost (the pipeline's scoring job: one at a
        time, in order, so the usage since the last report is this batch's)."""
        scored = self.executor.score(batch.results, self._examples(batch.idx), step=step)
        scored = planted(planted_spec(), self.order.data_step(step) + 1, batch.results, scored)  # S3_PLANTED_FAILURE
        return ScoredBatch(scored, self.executor.step_stats())

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """One RL step: its batch (rolled out and scored, possibly ahead: training.rollout.max_staleness) -> update
        -> weights into the rollout engines -> metrics. With max_staleness 0 this is rollout -> rewards -> update ->
        sync, in that order, in this thread."""
        tc = self.tc
        t0, w0 = time.perf_counter(), time.time()
        pipe = self._pipeline()
        pipe.admit(tc.total_steps, start=self.step)  # batches up to step + max_staleness (rolled out here, or queued)
        ta = time.perf_counter()
        flight = pipe.take(self.step)
        t2, w2 = time.perf_counter(), time.time()
        batch, sb = flight.rollout, flight.scored
        assert isinstance(batch, RolloutBatch) and isinstance(sb, ScoredBatch)
        stats, rows, total_tokens = self.update(batch.results, sb.reward.rewards, sb.reward.turn_credits)
        learning_rate = self.learner.step_scheduler()
        t3, w3 = time.perf_counter(), time.time()
        sync_s = pipe.sync(self.executor.sync, self.step + 1)  # after any rollout running on the engine
        t4, w4 = time.perf_counter(), time.time()

        staleness = float(flight.staleness(self.step))
        times = flight.times
        loop: dict[str, float] = {
            "data/rl_coverage": self.order.rl_coverage(self.step),
            "charts/learning_rate": learning_rate,
            "charts/policy_tokens": total_tokens,
            # this batch's rollout and scoring, wherever and whenever they ran (ahead of the step when overlapped)
            "charts/rollout_seconds": times["rollout_end"] - times["rollout_start"],
            "charts/reward_seconds": times["reward_end"] - times["reward_start"],
            "charts/update_seconds": t3 - t2,
            "charts/step_seconds": t4 - t0,  # this thread's wall time of the step: what throughput is made of
            "charts/wait_seconds": t2 - t0,  # before the update: rollouts done here, and waiting for the batch
            "charts/overlap_seconds": max(0.0, flight.background - (t2 - ta)),  # its background work not waited for
            "rollout/staleness": staleness,  # updates between the weights that sampled the batch and this update
            "rollout/staleness_max": staleness,  # every row of a batch was sampled with the same weights
        }
        row = rl_row(batch, sb, samples_in_update=len(rows), loop=loop, sync=sync_row(sync_s, t4 - t0), stats=stats)
        rundir.append_timeline(self.run_dir, timeline_row(self.step + 1, flight.step, flight.version, staleness, times,
                                                          (w0, w2, w3, w4)))
        return self._finish_step(row, batch.idx)

    def sft_step(self) -> dict[str, float]:
        """One supervised warm-up step on the oracle's trajectories (the learner's sft_update; training.sft)."""
        import torch

        t0 = time.perf_counter()
        idx = self.order.batch_indices(self.step)
        examples = [self.examples[i] for i in idx]
        assert self.oracle_agent is not None
        with torch.no_grad():
            results = self.oracle_agent.search([e.question for e in examples])
        t1 = time.perf_counter()
        rows = [i for i, r in enumerate(results) if r.trajectory is not None and any(r.trajectory.mask)]
        stats = self.learner.sft_update([self._pad(results, c) for c in micro_chunks(self.tc, results, rows)])
        sync_s = self.executor.sync()
        t2 = time.perf_counter()
        n_sel = [sum(len(s.selected_ids) for s in r.steps) for r in results]
        row: dict[str, float] = {
            **stats,
            "search/turns": sum(r.turns for r in results) / len(results),
            "search/docs": sum(len(r.documents) for r in results) / len(results),
            "search/oracle_selected": sum(n_sel) / len(n_sel),
            "charts/sft": 1.0, "charts/learning_rate": self.tc.sft.learning_rate,
            "charts/rollout_seconds": t1 - t0, "charts/update_seconds": t2 - t1, "charts/step_seconds": t2 - t0,
            **sync_row(sync_s, t2 - t0),
        }
        return self._finish_step(row, idx)

    def _finish_step(self, row: dict[str, float], idx: list[int]) -> dict[str, float]:
        """The step is done: count it, evaluate on the held-out questions when due, write its metrics row."""
        self.step += 1
        if self.schedule.due(self.step):
            if self.pipeline is not None:
                self.pipeline.drain()  # the engine is free and the generator usage so far is the batches' own
            row.update(self.heldout_eval())
        self.metrics.write(self.step, {**row, "data/question_ids": [self.examples[i].id for i in idx]})
        return row

    # ------------------------------------------------------------------ held-out evaluation (checkpoint choice)
    def heldout_eval(self) -> dict[str, float]:
        """The current policy's greedy rollouts of the held-out questions (on the rollout engine, which holds the
        learner's weights), scored with the training reward (training/run/evaluate.py): heldout/* metrics, a row of
        RUN_DIR/heldout.jsonl and one per question in RUN_DIR/heldout_questions.jsonl."""
        t0 = time.perf_counter()
        self.executor.step_stats()  # the step's generator usage is counted; what follows is the evaluation's
        results = self.executor.rollout(self.heldout, self.step, greedy=True)
        ev = evaluate_heldout(self.heldout, results, self.executor.score(results, self.heldout))
        usage = self.executor.step_stats()
        row = {**ev.score.metrics(), "heldout/generator_calls": usage.get("reward/generator_calls", 0.0),
               "charts/heldout_seconds": time.perf_counter() - t0}
        rundir.append_heldout(self.run_dir, {"step": self.step, "checkpoint": rundir.checkpoint_name(self.step),
                                             "questions": len(self.heldout), **row},
                              [{"step": self.step, **q} for q in ev.questions])
        s = ev.score
        parts = [f"reward {row['heldout/reward']:.3f}"]
        if s.acc_s3 is not None or s.acc_rag is not None:  # the generator-scored rewards
            parts.insert(0, f"Acc(searcher docs) {row['heldout/acc_s3']:.3f} vs naive RAG {row['heldout/acc_rag']:.3f}")
        if s.gold_added is not None and s.other_added is not None:  # retrieval_gain: what the reward counted
            parts.append(f"gold added {s.gold_added:.2f}, other added {s.other_added:.2f} a question")
        self.log(f"held-out after step {self.step}: {', '.join(parts)} "
                 f"({len(self.heldout)} questions, {row['charts/heldout_seconds']:.0f}s)")
        return row

    # ------------------------------------------------------------------ the update
    def update(self, results: list[SearchResult], rewards: list[float | None],
               credits: list[list[float] | None] | None = None) -> tuple[dict[str, float], list[int], float]:
        """One masked policy-gradient update from scored rollouts (`update_rows`: the rows that enter it, their
        advantages and each reply's `credits`) by the learner (training/learn/learner.py `Learner.update`, or every
        rank of a LearnerGroup). Returns (stats, rows used, policy tokens); the micro-batches stay in last_batches."""
        rows, stats = update_rows(self.tc, results, rewards, self._pad, credits)
        if rows is None:
            return stats, [], 0.0
        if note := over_budget_note(rows):
            self.log(note)
        report = self.learner.update(rows)
        self.last_batches = report.batches
        return {**stats, **report.stats}, rows.rows, report.tokens

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write checkpoints/step_N (training/rundir.py: atomically, then checkpoints/latest and best point at it):
        the learner's model folders and the trainer state (optimizer, scheduler, critic, RNG, data order)."""
        final = rundir.checkpoint_path(self.run_dir, self.step)
        with rundir.writing_checkpoint(self.run_dir, self.step, self.tc.checkpoint.keep) as tmp:
            learner_state = self.learner.save(tmp)  # a LearnerGroup's rank 0 writes them (every rank holds the same)
            write_record(self._searcher_record(final / "policy"), tmp / "policy")  # relative to where it will live
            if self.tc.learner.lora:
                write_record(self._searcher_record(final / "adapter"), tmp / "adapter")
            rundir.write_state(tmp, {
                "step": self.step,
                "optimizer": learner_state["optimizer"],
                "scheduler": learner_state["scheduler"],
                "value_head": learner_state["value_head"],
                "rng": capture_rng(),  # CPU and every device's generators (training/run/rng.py)
                "data_order": self.order.record(self.step),
            })
            # the batches rolled out ahead (max_staleness > 0), their scoring done first: a resumed run updates on them
            inflight = self.pipeline.state() if self.pipeline is not None else self._inflight
            if inflight:
                rundir.write_inflight(tmp, inflight)
        self.log(f"train: checkpoint {final}")
        return final

    def _searcher_record(self, folder: Path) -> TrainedSearcherRecord:
        """What this searcher is trained with (loop settings, prompt, index), paths relative to `folder`."""
        return make_record(
            self.loop_cfg, self.cfg.retriever, self.data.index_dir, folder,
            base_model=self.tc.base_model, corpus=self.data.directory / "corpus.jsonl",
        )

    def _load_state(self, ckpt: Path) -> None:
        """The checkpoint's optimizer, scheduler, critic and RNG state and its step (its weights are already in: the
        learner(s) were built from it), after checking the data order is the one it was written with."""
        state = rundir.read_state(ckpt)
        self.order.check(state["data_order"], int(state["step"]), ckpt)
        self.step = int(state["step"])
        self._inflight = rundir.read_inflight(ckpt)  # the batches in flight at the checkpoint (none when synchronous)
        self.learner.load_state(learner_state(self.run_dir, ckpt, state))  # a fresh optimizer after a rollback
        note = restore_rng(state["rng"])
        if note:
            self.log(f"train: resume: {note}")
        self.resumed_from = str(ckpt)
        self.log(f"train: resumed from {ckpt} at step {self.step}")

    # ------------------------------------------------------------------ the loop
    def train(self, max_steps: int | None = None, max_seconds: float | None = None) -> dict[str, Any]:
        """Run until training.total_steps (or `max_steps` more steps); checkpoint every checkpoint.every and at the
        end. `max_seconds`: do not start a step that would not finish within that budget by the last step's wall time
        (and the last held-out evaluation's, when the next step has one); the run then stops with a checkpoint at
        the step it reached, which resumes exactly (the data order is a function of seed and step). With
        training.recovery on, a trigger returns early with "rollback" set and checkpoints/latest moved back: call it
        through `training.run.recovery.train_healing` (as `s3 train` does) to go on from there."""
        tc = self.tc
        start = self.step
        end = tc.total_steps if max_steps is None else min(tc.total_steps, self.step + max_steps)
        last: dict[str, float] = {}
        t_start = time.monotonic()
        seen = rundir.step_times(self.run_dir) if max_seconds is not None else {}
        recovery = Recovery(tc, self.run_dir, self.log, start)  # training/run/recovery.py (collapse.py's warnings too)
        saved_at = -1
        try:
            while self.step < end:
                kind = "sft" if self.step < tc.sft.steps else "rl"
                if max_seconds is not None:
                    need = seen.get(kind, 0.0) + (seen.get("heldout", 0.0) if self.schedule.due(self.step + 1) else 0.0)
                    if time.monotonic() - t_start + need >= max_seconds:
                        self.log(f"train: time budget: {max_seconds / 60:.1f} min would be exceeded by step "
                                 f"{self.step + 1} (~{need:.0f}s); stopping at step {self.step}")
                        break
                if kind == "sft":
                    last = self.sft_step()
                    if self.step == tc.sft.steps and (ref := self.learner.end_warmup()) is not None:
                        self.log(f"train: warm-up done; reference policy = {ref}")
                    self.log(f"step {self.step}/{tc.total_steps} warm-up nll {last['losses/sft_nll']:.3f} "
                             f"turns {last['search/turns']:.2f} {last['charts/step_seconds']:.1f}s")
                else:
                    try:  # a step whose reward calls could pass training.budget_usd is not started
                        last = self.train_step()
                    except BudgetReached as e:  # stop with the checkpoint of the step before; resumable
                        self._release_pipeline()  # the refused batch is kept, unscored, with any rolled out after it
                        self.stopped = str(e)
                        self.log(f"train: {e}")
                        break
                    self.log(
                        f"step {self.step}/{tc.total_steps} reward {last['reward/mean']:.3f} "
                        f"invalid {last['search/invalid_action_rate']:.2f} turns {last['search/turns']:.2f} "
                        f"{last['charts/step_seconds']:.1f}s"
                    )
                    if (rollback := recovery.after_step({"step": self.step, **last})) is not None:
                        self.rolled_back = rollback  # nothing of this step is checkpointed; the caller resumes
                        break
                seen[kind] = last["charts/step_seconds"]
                if "charts/heldout_seconds" in last:
                    seen["heldout"] = last["charts/heldout_seconds"]
                due = self.step % tc.checkpoint.every == 0 or self.schedule.due(self.step)
                if due and self.step < end:
                    self.save_checkpoint()
                    saved_at = self.step
            if not self.rolled_back and (saved_at != self.step > start or rundir.latest_checkpoint(self.run_dir) is None):
                self.save_checkpoint()
        except BaseException:
            if self.pipeline is not None:
                self.pipeline.halt()  # start nothing more; what runs finishes below
            raise
        finally:
            if self.pipeline is not None:
                self.pipeline.drain()  # nothing of this call runs on after it (a later train() continues it)
            self.metrics.close()
        return {"steps": self.step, "started_at": start, "last": last, "run_dir": str(self.run_dir),
                "stopped": self.stopped, "rollback": self.rolled_back}  # "budget reached: ...", a rollback, or None


def make_trainer(cfg: TrainSettings, log: Callable[[str], None] = print) -> S3Trainer:
    """The parts of `cfg` (training/run/build.py) and the loop over them. training.mode = 'search_r1' builds Search-R1's
    parts (SearchR1Agent rollouts, the policy's own answer scored; no generator, no baseline); the loop is the same."""
    cfg = healed(cfg, cfg.resolve(cfg.training.output_dir))  # the run's rollbacks' changes (training/run/recovery.py)
    return S3Trainer(build_training(cfg, prepare_run(cfg, log), log), log)  # prepare, build, loop
