"""The trainer: `s3 train --config ...`. training/build.py builds the parts (data, retriever, learner, executor,
oracle); this file is the loop over them, top to bottom: `train` -> `train_step` (or `sft_step`) -> `update` ->
`save_checkpoint`.

One step = B questions x group_size rollouts through the searcher (the learner itself, or a vLLM engine that holds
the learner's weights: training.rollout.engine; sampling at training.rollout.temperature, exact token masks) -> rewards
(training/rewards.py; failed calls leave the update) -> advantages (GRPO group baseline, or PPO critic + GAE) ->
masked policy-gradient update with a k3 KL term to the frozen reference policy -> (vLLM engine) the new weights into
the running engine, in place -> metrics -> checkpoint every `training.checkpoint.every` steps (and always at the end).

Rollouts, rewards and the weight sync go through a StepExecutor (training/executors.py): in this process
(training.backend = "local"), or on Ray actors (training.backend = "ray", training/ray_backend.py); the update, the
checkpoints and the data order are this file's either way. The learner (training/learner.py: the policy, critic,
reference, optimizer, the one `masked_update`) lives in this process, or with ray.learners = N > 1 on N Ray actors in
one torch.distributed group (training/learner_group.py): this file then splits the update's rows over the ranks, rank 0
writes the checkpoint's model folders (the same format) and feeds the rollout engines, and every rank resumes.

Devices: the learner, the reference policy and the critic live on training.learner.device ('auto' = cuda when available);
nothing else is placed by hand. With training.rollout.engine = "vllm" the ratio's old log-probs are the learner's own
recomputation (as in verl), never the engine's; the engine's are compared with them every step
(rollout/logprob_gap_mean_abs, rollout/logprob_gap_max) and the sync is timed (charts/weight_sync_s).

Run directory (training.output_dir):

    metrics.jsonl               one row per step: reward/..., losses/..., search/turns, search/invalid_action_rate, charts/...
    tb/                         the same scalars for TensorBoard (when tensorboard is installed)
    checkpoints/step_000010/    policy/ (a plain Hugging Face dir: `s3 search --policy` / `s3 serve --policy` load it
                                unchanged), adapter/ (LoRA), trainer_state.pt (optimizer, scheduler, RNG, data order,
                                value head), written to a temporary dir and renamed: a kill never leaves half a checkpoint
    checkpoints/latest          the name of the newest complete checkpoint
    config.json                 the full configuration of the run
    searcher.json               what the searcher is trained with: loop settings, prompt hash, the index (relative
                                path, fingerprint, the command that rebuilds it); also in every checkpoint's policy/,
                                so `s3 search --policy RUN_DIR` / `s3 serve --policy RUN_DIR` serve it the same way

Resume: `s3 train` on an existing run directory continues from `checkpoints/latest` (same data order: the order is a
function of (seed, epoch), and the position is stored).

The PPO critic is a value head on the policy's last hidden states (detached: it learns with
training.update.critic_learning_rate without moving the actor) — a CPU-sized stand-in for the paper's separate critic model.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eval.behavior import rollout_row
from s3core.errors import S3Error
from s3core.io import append_jsonl, read_log_jsonl, repair_tail
from s3core.types import QAExample, SearchResult
from searcher.trained import TrainedSearcherRecord, make_record, write_record
from training.budget import BudgetReached
from training.build import TrainingParts, build_training
from training.collapse import CollapseWatch
from training.config import TrainSettings
from training.learner import Batch, GapSums, Learner, MicroBatch, UpdateOut, export_model, pad_rollouts
from training.rng import capture_rng, restore_rng

__all__ = ["Batch", "S3Trainer", "export_model", "export_policy", "make_trainer", "read_metrics"]

STATE_FILE = "trainer_state.pt"
HELDOUT_FILE = "heldout.jsonl"  # one row per held-out evaluation (training.heldout.every)
# one row per question and held-out evaluation: what the searcher did and how both contexts scored (paired
# comparisons between checkpoints and against naive RAG, the questions a checkpoint wins and loses)
HELDOUT_QUESTIONS_FILE = "heldout_questions.jsonl"
DATA_ORDER = "warmup-stream+rl-from-start"  # the batch order scheme (batch_indices); a resume checks it


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl (the last row per step wins: a resumed run may repeat a step)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise S3Error(f"no metrics.jsonl in {run_dir}: is it a training run directory?")
    by_step = {int(row["step"]): row for row in read_log_jsonl(path)}  # a line torn by a kill is passed over
    return [by_step[k] for k in sorted(by_step)]


class _MetricsWriter:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.tb: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def write(self, step: int, row: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **row}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, int | float):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None


class S3Trainer:
    """The training loop over the parts training/build.py built: rollout -> reward -> update -> log -> checkpoint
    (GRPO / PPO; s3 searchers with a frozen generator, or Search-R1 end to end: parts.agent_kind)."""

    def __init__(self, parts: TrainingParts, log: Callable[[str], None] = print) -> None:
        self.parts = parts
        self.cfg, self.tc, self.log = parts.cfg, parts.cfg.training, log
        self.run_dir, self.ckpt_dir = parts.run_dir, parts.run_dir / "checkpoints"
        self.examples, self.heldout = parts.examples, parts.heldout
        self.data, self.retriever, self.loop_cfg = parts.data, parts.retriever, parts.loop_cfg
        self.tokenizer, self.oracle_agent = parts.tokenizer, parts.oracle
        self.executor = parts.executor
        self.learner, self.learners = parts.learner, parts.learners  # one of them: here, or a LearnerGroup on Ray
        self.step = 0
        self.resumed_from: str | None = None
        self.stopped: str | None = None  # why train() stopped early (budget reached), else None
        self.last_batches: list[Batch] = []  # the last update's padded micro-batches
        self.metrics = _MetricsWriter(self.run_dir)
        try:
            (self.run_dir / "config.json").write_text(self.cfg.model_dump_json(indent=2))
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

    # ------------------------------------------------------------------ what the learner and the executor hold
    @property
    def model(self) -> Any:
        """The learner's model (this process's learner; None with a LearnerGroup)."""
        return self.learner.model if self.learner is not None else None

    @property
    def ref_model(self) -> Any:
        """The learner's reference policy (it changes when the warm-up ends)."""
        return self.learner.ref_model if self.learner is not None else None

    @property
    def agent(self) -> Any:
        """The local executor's sampling agent (over the learner, or its vLLM engine); None on Ray."""
        return getattr(self.executor, "agent", None)

    def close(self) -> None:
        """Stop the executor's workers and the learner group (Ray actors) and close the metrics writer."""
        self.parts.close()
        self.metrics.close()

    # ------------------------------------------------------------------ data order
    def batch_indices(self, step: int) -> list[int]:
        """Question indices of `step` (0-based): epochs are seeded permutations, so the order is a pure function
        of (seed, step) — a resumed run sees exactly the batches the uninterrupted run would have. The warm-up steps
        draw from a stream of their own, and the RL steps start the main stream at its beginning: ceil(n / batch_size)
        RL steps put every training question in a rollout batch (`data/rl_coverage`). With training.sft.keep =
        'gbr_positive' the warm-up stream permutes the kept questions (parts.sft_pool) only."""
        import torch

        n, b = len(self.examples), self.tc.rollout.batch_size
        warm, pool = self.tc.sft.steps, self.parts.sft_pool
        stream, pos = (1, step * b) if step < warm else (0, (step - warm) * b)
        if step < warm and pool is not None:  # distillation: the warm-up's stream runs over the kept questions only
            n = len(pool)
        out: list[int] = []
        while len(out) < b:
            epoch, offset = divmod(pos, n)
            gen = torch.Generator().manual_seed(self.tc.seed * 1000003 + epoch + stream * 7919)
            perm = torch.randperm(n, generator=gen).tolist()
            take = min(b - len(out), n - offset)
            out.extend(perm[offset : offset + take])
            pos += take
        return [pool[i] for i in out] if step < warm and pool is not None else out

    def rl_coverage(self, step: int) -> float:
        """Share of the training questions that have been in an RL rollout batch once `step` is done."""
        seen = (step + 1 - self.tc.sft.steps) * self.tc.rollout.batch_size
        return min(max(seen, 0), len(self.examples)) / len(self.examples)

    # ------------------------------------------------------------------ rollouts
    def rollout(self, examples: list[QAExample], step: int | None = None) -> list[SearchResult]:
        """The executor's rollouts of `examples` (step: the sampling seed of Ray shards; default the current step)."""
        results = self.executor.rollout(examples, self.step if step is None else step)
        for r, e in zip(results, examples, strict=True):
            r.question_id = e.id
        return results

    def _pad(self, results: list[SearchResult], rows: list[int]) -> Batch:
        lc = self.tc.learner
        # a LearnerGroup's ranks move the batch to their device; this process's learner gets it on its own
        device = self.learner.device if self.learner is not None else "cpu"
        return pad_rollouts(results, rows, self.tokenizer.pad_token_id, device=device,
                            share_prefix=lc.share_prefix and not lc.gradient_checkpointing)

    def _confidence_logprobs(self, results: list[SearchResult]) -> dict[str, float]:
        """vLLM rollouts under the confidence-gated reward: a trajectory whose vLLM log-probs are further than
        training.rollout.logprob_gap_tolerance (mean |gap| per policy token) from the learner's recomputation feeds the
        confidence C(T) the learner's log-probs instead (written into its trajectory)."""
        learner = self._learner()
        rows = [i for i, r in enumerate(results) if r.trajectory is not None and any(r.trajectory.mask)]
        replaced = 0
        mb = self.tc.learner.micro_batch_size
        for lo in range(0, len(rows), mb):
            chunk = rows[lo : lo + mb]
            batch = self._pad(results, chunk)
            lp = learner.logprobs(batch).float()
            for j, i in enumerate(chunk):
                tr = results[i].trajectory
                assert tr is not None
                m = batch.loss_mask[j]
                gap = float(((lp[j] - batch.rollout_lp[j]).abs() * m).sum() / m.sum().clamp(min=1))
                if gap <= self.tc.rollout.logprob_gap_tolerance:
                    continue
                # response token k sits at shifted position len(prompt) - 1 + k, i.e. column that - start
                off = len(tr.prompt_ids) - 1 - batch.start
                own = lp[j, off : off + len(tr.response_ids)].tolist()
                tr.logprobs = [lj if mk else old for lj, mk, old in zip(own, tr.mask, tr.logprobs, strict=True)]
                replaced += 1
        return {"rollout/confidence_from_learner": float(replaced)}

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """One RL step: rollouts -> rewards -> update -> weights into the rollout engines -> metrics."""
        tc = self.tc
        t0 = time.perf_counter()
        idx = self.batch_indices(self.step)
        examples = [self.examples[i] for i in idx for _ in range(tc.rollout.group_size)]
        results = self.rollout(examples)
        t1 = time.perf_counter()
        vllm = tc.rollout.engine == "vllm"
        conf_stats = self._confidence_logprobs(results) if tc.reward == "confidence_gated" and vllm else {}
        scored = self.executor.score(results, examples)
        t2 = time.perf_counter()
        rewards = scored.rewards

        stats, rows, total_tokens = self.update(results, rewards)
        learning_rate = self._scheduler_step()
        t3 = time.perf_counter()
        sync_s = self.executor.sync()
        t4 = time.perf_counter()

        scored_r = [r for r in rewards if r is not None]
        turns = [r.turns for r in results]
        steps_n = sum(len([s for s in r.steps if s.turn > 0]) for r in results)
        invalid = sum(1 for r in results for s in r.steps if s.turn > 0 and s.invalid_reason)
        row: dict[str, float] = {
            "reward/mean": sum(scored_r) / len(scored_r) if scored_r else float("nan"),
            "reward/max": max(scored_r) if scored_r else float("nan"),
            "reward/min": min(scored_r) if scored_r else float("nan"),
            "reward/missing": float(len(rewards) - len(scored_r)),
            "reward/samples_in_update": float(len(rows)),
            "search/turns": sum(turns) / len(turns),
            "search/invalid_action_rate": invalid / steps_n if steps_n else 0.0,
            "search/docs": sum(len(r.documents) for r in results) / len(results),
            "data/rl_coverage": self.rl_coverage(self.step),
            "charts/learning_rate": learning_rate,
            "charts/policy_tokens": total_tokens,
            "charts/rollout_seconds": t1 - t0,
            "charts/reward_seconds": t2 - t1,
            "charts/update_seconds": t3 - t2,
            "charts/step_seconds": t4 - t0,
        }
        row.update(_sync_row(sync_s, t4 - t0))
        row.update(conf_stats)
        k = self.cfg.retriever.k
        row.update(rollout_row(results, [e.supporting_ids for e in examples], self.loop_cfg.max_turns,  # eval/behavior.py
                               probe=lambda qs: [[d.id for d in ds] for ds in self.retriever.search(qs, k)]))
        row.update(self.executor.step_stats())
        if scored.acc_s3 is not None:
            a = [x for x in scored.acc_s3 if x is not None]
            row["reward/acc_s3"] = sum(a) / len(a) if a else float("nan")
        if scored.acc_rag is not None:
            row["reward/acc_rag"] = sum(x for x in scored.acc_rag if x is not None) / max(1, len(scored.acc_rag))
        row.update(stats)
        return self._finish_step(row, idx)

    def sft_step(self) -> dict[str, float]:
        """One supervised warm-up step on the oracle's trajectories (Learner.sft_update; training.sft)."""
        import torch

        mb = self.tc.learner.micro_batch_size
        t0 = time.perf_counter()
        idx = self.batch_indices(self.step)
        examples = [self.examples[i] for i in idx]
        assert self.oracle_agent is not None
        with torch.no_grad():
            results = self.oracle_agent.search([e.question for e in examples])
        t1 = time.perf_counter()
        rows = [i for i, r in enumerate(results) if r.trajectory is not None and any(r.trajectory.mask)]
        stats = self._learner().sft_update([self._pad(results, rows[i : i + mb]) for i in range(0, len(rows), mb)])
        sync_s = self.executor.sync()
        t2 = time.perf_counter()
        n_sel = [sum(len(s.selected_ids) for s in r.steps) for r in results]
        row: dict[str, float] = {
            **stats,
            "search/turns": sum(r.turns for r in results) / len(results),
            "search/docs": sum(len(r.documents) for r in results) / len(results),
            "search/oracle_selected": sum(n_sel) / len(n_sel),
            "charts/sft": 1.0,
            "charts/learning_rate": self.tc.sft.learning_rate,
            "charts/rollout_seconds": t1 - t0,
            "charts/update_seconds": t2 - t1,
            "charts/step_seconds": t2 - t0,
            **_sync_row(sync_s, t2 - t0),
        }
        return self._finish_step(row, idx)

    def _finish_step(self, row: dict[str, float], idx: list[int]) -> dict[str, float]:
        """The step is done: count it, evaluate on the held-out questions when due, write its metrics row."""
        self.step += 1
        row.update(self._heldout_if_due())
        self.metrics.write(self.step, {**row, "data/question_ids": [self.examples[i].id for i in idx]})
        return row

    def _scheduler_step(self) -> float:
        """The learning-rate scheduler's step after an update (on every rank of a LearnerGroup); the new rate."""
        if self.learners is not None:
            return float(self.learners.call_all("step_scheduler")[0])
        return self._learner().step_scheduler()

    # ------------------------------------------------------------------ held-out evaluation (checkpoint choice)
    def heldout_due(self, step: int) -> bool:
        """Whether the policy after `step` steps is evaluated on the held-out questions (training.heldout.every):
        at the end of the warm-up (the policy RL starts from), every heldout.every steps after it, and at the last."""
        every, warm = self.tc.heldout.every, self.tc.sft.steps
        if not every or not self.heldout or step < warm:
            return False
        return step == warm or step % every == 0 or step == self.tc.total_steps

    def heldout_eval(self) -> dict[str, float]:
        """The current policy's greedy rollouts of the held-out questions (on the rollout engine, which holds the
        learner's weights), scored with the training reward: heldout/* metrics, a row of RUN_DIR/heldout.jsonl and one
        per question in RUN_DIR/heldout_questions.jsonl."""
        t0 = time.perf_counter()
        self.executor.step_stats()  # the step's generator usage is counted; what follows is the evaluation's
        results = self.executor.rollout(self.heldout, self.step, greedy=True)
        scored = self.executor.score(results, self.heldout)
        usage = self.executor.step_stats()

        def mean(xs: list[float | None] | None) -> float:
            vals = [x for x in xs or [] if x is not None]
            return sum(vals) / len(vals) if vals else float("nan")

        row = {
            "heldout/reward": mean(list(scored.rewards)),
            "heldout/acc_s3": mean(scored.acc_s3),
            "heldout/acc_rag": mean(scored.acc_rag),
            "heldout/scored": float(sum(r is not None for r in scored.rewards)),
            "heldout/turns": sum(r.turns for r in results) / len(results),
            "heldout/docs": sum(len(r.documents) for r in results) / len(results),
            "heldout/generator_calls": usage.get("reward/generator_calls", 0.0),
            "charts/heldout_seconds": time.perf_counter() - t0,
        }
        per_question = self.run_dir / HELDOUT_QUESTIONS_FILE
        repair_tail(per_question)
        append_jsonl(per_question, [
            {"step": self.step, "id": ex.id, "reward": scored.rewards[i],
             "acc_s3": scored.acc_s3[i] if scored.acc_s3 is not None else None,
             "acc_rag": scored.acc_rag[i] if scored.acc_rag is not None else None, "turns": r.turns,
             "doc_ids": [d.id for d in r.documents], "queries": [st.query for st in r.steps if st.turn > 0]}
            for i, (ex, r) in enumerate(zip(self.heldout, results, strict=True))])
        path = self.run_dir / HELDOUT_FILE  # after the per-question rows: a row here means they were all written
        repair_tail(path)  # a line torn by a kill: cut before appending
        append_jsonl(path, [{"step": self.step, "checkpoint": f"step_{self.step:06d}", "questions": len(self.heldout),
                             **row}])
        self.log(f"held-out after step {self.step}: Acc(searcher docs) {row['heldout/acc_s3']:.3f} vs naive RAG "
                 f"{row['heldout/acc_rag']:.3f}, reward {row['heldout/reward']:.3f} "
                 f"({len(self.heldout)} questions, {row['charts/heldout_seconds']:.0f}s)")
        return row

    def _heldout_if_due(self) -> dict[str, float]:
        return self.heldout_eval() if self.heldout_due(self.step) else {}

    def best_checkpoint(self) -> str | None:
        """The checkpoint with the highest held-out Acc(searcher docs) so far (ties: the earlier), from heldout.jsonl
        (the last row per step wins: a resumed run may repeat one); None before any held-out evaluation."""
        path = self.run_dir / HELDOUT_FILE
        if not path.is_file():
            return None
        rows = {int(r["step"]): r for r in read_log_jsonl(path) if int(r["step"]) <= self.step}
        return choose_heldout(list(rows.values()))

    # ------------------------------------------------------------------ the update
    def update(self, results: list[SearchResult], rewards: list[float | None]) -> tuple[dict[str, float], list[int], float]:
        """One masked policy-gradient update from scored rollouts (consecutive group_size rows = one question).
        Samples whose reward is None (or, in GRPO, whose group has < 2 scored members) leave the update.
        Returns (loss stats, rows used, policy tokens). The padded micro-batches stay in `self.last_batches`.
        The loss is the learner's (training/learner.py `Learner.update`), here or on every rank of the LearnerGroup."""
        from training import algorithms as alg

        tc = self.tc
        group, mbs_n = tc.rollout.group_size, tc.learner.micro_batch_size
        has_tokens = [r.trajectory is not None and any(r.trajectory.mask) for r in results]
        stats: dict[str, float] = {}
        if tc.algorithm == "grpo":
            seq_adv = alg.group_advantages_missing(rewards, group)
            if tc.update.drop_flat_groups:
                flat = alg.flat_groups(rewards, group)
                for g in flat:
                    seq_adv[g : g + group] = [None] * group
                stats["reward/flat_groups"] = float(len(flat))
        else:
            seq_adv = [None if r is None else 0.0 for r in rewards]  # PPO: advantages come from GAE below
        rows = [i for i in range(len(results)) if seq_adv[i] is not None and has_tokens[i]]
        if not rows:
            return stats, rows, 0.0

        def micro(b: list[int]) -> MicroBatch:
            p = self._pad(results, b)
            if tc.algorithm == "grpo":
                return MicroBatch(p, adv=[float(seq_adv[i]) for i in b])  # type: ignore[arg-type]
            return MicroBatch(p, rewards=[float(rewards[i]) for i in b])  # type: ignore[arg-type]

        if self.learners is None:
            mbs = [micro(rows[i : i + mbs_n]) for i in range(0, len(rows), mbs_n)]
            self.last_batches = [mb.batch for mb in mbs]
            total_tokens = float(sum(mb.batch.loss_mask.sum().item() for mb in mbs))
            # each micro-batch's share of the batch's policy tokens: the global token mean
            weights = [mb.batch.loss_mask.sum().item() / max(total_tokens, 1.0) for mb in mbs]
            out = self._learner().update(mbs, weights)
            stats.update(out.stats)
            stats.update(out.gaps.stats())
            return stats, rows, total_tokens
        from training.learner_group import split_for_ranks

        tokens = [float(sum(results[i].trajectory.mask)) for i in rows]  # type: ignore[union-attr]
        total_tokens = float(sum(tokens))
        shards = split_for_ranks(rows, tokens, len(self.learners), mbs_n)
        per_rank = [[micro(b) for b in s.micro_batches] for s in shards]
        self.last_batches = [mb.batch for r, s in zip(per_rank, shards, strict=True)
                             for mb, w in zip(r, s.weights, strict=True) if w]
        outs: list[UpdateOut] = self.learners.update(per_rank, [s.weights for s in shards])
        gaps = GapSums()
        for o in outs:
            gaps = gaps.add(o.gaps)
            for key, v in o.stats.items():
                # each rank's stats carry weight N * tokens / T: their mean is the single learner's
                stats[key] = stats.get(key, 0.0) + v / len(outs)
        stats["losses/grad_norm"] = outs[0].stats["losses/grad_norm"]  # the same averaged gradient on every rank
        stats.update(gaps.stats())
        return stats, rows, total_tokens

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write checkpoints/step_N atomically (temp dir + rename), then point checkpoints/latest at it."""
        import torch

        name = f"step_{self.step:06d}"
        final = self.ckpt_dir / name
        tmp = self.ckpt_dir / f".{name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        # the model folders and the optimizer / scheduler / critic state: this process's learner, or rank 0 of the
        # LearnerGroup (written once; every rank holds the same)
        if self.learners is not None:
            learner_state = self.learners.call_rank0("save", str(tmp))
        else:
            learner_state = self._learner().save(tmp)
        write_record(self._searcher_record(final / "policy"), tmp / "policy")  # relative to where it will live
        if self.tc.learner.lora:
            write_record(self._searcher_record(final / "adapter"), tmp / "adapter")
        state = {
            "step": self.step,
            "optimizer": learner_state["optimizer"],
            "scheduler": learner_state["scheduler"],
            "value_head": learner_state["value_head"],
            "rng": capture_rng(),  # CPU and every device's generators (training/rng.py)
            "data_order": {"seed": self.tc.seed, "batch_size": self.tc.rollout.batch_size,
                           "n_questions": len(self.examples), "scheme": DATA_ORDER,
                           "sft_warmup_steps": self.tc.sft.steps, "sft_pool": self._pool_ids(),
                           "next_batch": [self.examples[i].id for i in self.batch_indices(self.step)]},
        }
        torch.save(state, tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _write_atomic(self.ckpt_dir / "latest", name)
        best = self.best_checkpoint()
        if best is not None and (self.ckpt_dir / best).is_dir():
            _write_atomic(self.ckpt_dir / "best", best)
        old = sorted(p for p in self.ckpt_dir.glob("step_*") if p.is_dir())
        for p in old[: -self.tc.checkpoint.keep]:
            if p.name != best:  # the held-out choice stays
                shutil.rmtree(p, ignore_errors=True)
        self.log(f"train: checkpoint {final}")
        return final

    def _end_warmup(self) -> None:
        """The warm-up is over: RL's reference policy becomes the warmed policy (Learner.end_warmup: saved to
        RUN_DIR/reference atomically, so a resumed run loads the same one; LoRA included)."""
        learner = self._learner()  # the warm-up runs in this process's learner (config check)
        if learner.ref_model is None:
            return
        learner.end_warmup()
        self.log(f"train: warm-up done; reference policy = {self.run_dir / 'reference'}")

    def _searcher_record(self, folder: Path) -> TrainedSearcherRecord:
        """What this searcher is trained with (loop settings, prompt, index), paths relative to `folder`."""
        return make_record(
            self.loop_cfg, self.cfg.retriever, self.data.index_dir, folder,
            base_model=self.tc.base_model, corpus=self.data.directory / "corpus.jsonl",
        )

    def _pool_ids(self) -> list[str] | None:
        """The ids of the questions the warm-up draws from (training.sft.keep = 'gbr_positive'), None = all."""
        pool = self.parts.sft_pool
        return None if pool is None else [self.examples[i].id for i in pool]

    def _learner(self) -> Learner:
        if self.learner is None:
            raise S3Error("this trainer's learner is a LearnerGroup (ray.learners > 1): no learner in this process")
        return self.learner

    def _load_state(self, ckpt: Path) -> None:
        """The checkpoint's optimizer, scheduler, critic and RNG state and its step (its weights are already in: the
        learner(s) were built from it), after checking the data order is the one it was written with."""
        import torch

        state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False)
        order = state["data_order"]
        tc = self.tc
        if order.get("scheme") != DATA_ORDER or order.get("sft_warmup_steps") != tc.sft.steps:
            raise S3Error(f"cannot resume {ckpt}: it was written with another data order (an older s3, or another "
                          "training.sft.steps); use a new training.output_dir")
        if int(state["step"]) < tc.sft.steps and order.get("sft_pool", self._pool_ids()) != self._pool_ids():
            raise S3Error(f"cannot resume {ckpt} inside the warm-up: its distillation pool (training.sft.keep / "
                          "candidates) is not this run's; use a new training.output_dir")
        now = (tc.seed, tc.rollout.batch_size, len(self.examples))
        if (order["seed"], order["batch_size"], order["n_questions"]) != now:
            raise S3Error(
                f"cannot resume {ckpt}: data order changed (seed/batch_size/questions {order['seed']}/"
                f"{order['batch_size']}/{order['n_questions']} vs {now[0]}/{now[1]}/{now[2]}); "
                "use a new training.output_dir"
            )
        self.step = int(state["step"])
        learner_state = {k: state[k] for k in ("optimizer", "scheduler", "value_head")}
        if self.learners is not None:
            from s3runtime.raycluster import require_ray

            self.learners.call_all("load_state", require_ray().put(learner_state))
        else:
            self._learner().load_state(learner_state)
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
        the step it reached, which resumes exactly (the data order is a function of seed and step)."""
        tc = self.tc
        start = self.step
        end = tc.total_steps if max_steps is None else min(tc.total_steps, self.step + max_steps)
        last: dict[str, float] = {}
        t_start = time.monotonic()
        seen = _step_times(self.run_dir) if max_seconds is not None else {}
        watch = CollapseWatch(read_metrics(self.run_dir) if (self.run_dir / "metrics.jsonl").is_file() else [])
        saved_at = -1
        try:
            while self.step < end:
                kind = "sft" if self.step < tc.sft.steps else "rl"
                if max_seconds is not None:
                    need = seen.get(kind, 0.0) + (seen.get("heldout", 0.0) if self.heldout_due(self.step + 1) else 0.0)
                    if time.monotonic() - t_start + need >= max_seconds:
                        self.log(f"train: time budget: {max_seconds / 60:.1f} min would be exceeded by step "
                                 f"{self.step + 1} (~{need:.0f}s); stopping at step {self.step}")
                        break
                if kind == "sft":
                    last = self.sft_step()
                    if self.step == tc.sft.steps:
                        self._end_warmup()
                    self.log(f"step {self.step}/{tc.total_steps} warm-up nll {last['losses/sft_nll']:.3f} "
                             f"turns {last['search/turns']:.2f} {last['charts/step_seconds']:.1f}s")
                else:
                    try:  # a step whose reward calls could pass training.budget_usd is not started
                        last = self.train_step()
                    except BudgetReached as e:  # stop with the checkpoint of the step before; resumable
                        self.stopped = str(e)
                        self.log(f"train: {e}")
                        break
                    self.log(
                        f"step {self.step}/{tc.total_steps} reward {last['reward/mean']:.3f} "
                        f"invalid {last['search/invalid_action_rate']:.2f} turns {last['search/turns']:.2f} "
                        f"{last['charts/step_seconds']:.1f}s"
                    )
                    for warning in watch.update({"step": self.step, **last}):  # training/collapse.py
                        self.log(warning)
                seen[kind] = last["charts/step_seconds"]
                if "charts/heldout_seconds" in last:
                    seen["heldout"] = last["charts/heldout_seconds"]
                due = self.step % tc.checkpoint.every == 0 or self.heldout_due(self.step)
                if due and self.step < end:
                    self.save_checkpoint()
                    saved_at = self.step
            if (self.step > start and saved_at != self.step) or not (self.ckpt_dir / "latest").is_file():
                self.save_checkpoint()
        finally:
            self.metrics.close()
        return {"steps": self.step, "started_at": start, "last": last, "run_dir": str(self.run_dir),
                "stopped": self.stopped}  # "budget reached: ..." or None


def _sync_row(sync_s: float | None, step_s: float) -> dict[str, float]:
    """charts/weight_sync_* of a step (nothing when no rollout engine needs the weights)."""
    if sync_s is None:
        return {}
    return {"charts/weight_sync_s": sync_s, "charts/weight_sync_share": sync_s / max(step_s, 1e-9)}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def choose_heldout(rows: list[dict[str, Any]]) -> str | None:
    """The checkpoint of the best held-out row: the highest heldout/acc_s3 (the generator's accuracy with the
    searcher's documents), or heldout/reward when no row has an Acc (search_r1 mode, r1_searcher_stage1); ties go
    to the earlier step; rows without a finite score are passed over. None when no row has one."""
    import math

    def score(r: dict[str, Any], key: str) -> float | None:
        v = r.get(key)
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    key = "heldout/acc_s3" if any(score(r, "heldout/acc_s3") is not None for r in rows) else "heldout/reward"
    scored = [(v, -int(r["step"]), str(r["checkpoint"])) for r in rows if (v := score(r, key)) is not None]
    return max(scored)[2] if scored else None


def _step_times(run_dir: Path) -> dict[str, float]:
    """The wall time of the run's last warm-up step ('sft'), last RL step ('rl') and last held-out evaluation
    ('heldout') in metrics.jsonl (what a time budget judges the next step by, also right after a resume)."""
    if not (run_dir / "metrics.jsonl").is_file():
        return {}
    out: dict[str, float] = {}
    for row in read_metrics(run_dir):
        if isinstance(row.get("charts/step_seconds"), int | float):
            out["sft" if row.get("charts/sft") else "rl"] = float(row["charts/step_seconds"])
        if isinstance(row.get("charts/heldout_seconds"), int | float):
            out["heldout"] = float(row["charts/heldout_seconds"])
    return out


def make_trainer(cfg: TrainSettings, log: Callable[[str], None] = print) -> S3Trainer:
    """The parts of `cfg` (training/build.py) and the loop over them. training.mode = 'search_r1' builds Search-R1's
    parts (SearchR1Agent rollouts, the policy's own answer scored; no generator, no baseline); the loop is the same."""
    return S3Trainer(build_training(cfg, log), log)


def export_policy(checkpoint: str | Path, out: str | Path, base_model: str | None = None) -> Path:
    """Export a checkpoint as a plain Hugging Face dir. A LoRA checkpoint (adapter/) is merged into its base."""
    ckpt = Path(checkpoint)
    if (ckpt / "checkpoints" / "latest").is_file():
        ckpt = ckpt / "checkpoints" / (ckpt / "checkpoints" / "latest").read_text().strip()
    out = Path(out)
    if (ckpt / "adapter").is_dir() and base_model:
        from peft import PeftModel

        from searcher.policy.transformers_policy import TransformersPolicy

        pol = TransformersPolicy.load(base_model)
        merged = PeftModel.from_pretrained(pol.model, str(ckpt / "adapter"))
        export_model(merged, pol.tokenizer, out, lora=True)
        return out
    if not (ckpt / "policy").is_dir():
        raise S3Error(f"{ckpt} is not a training checkpoint (no policy/ directory)")
    if out.exists():
        raise S3Error(f"{out} exists; choose a new directory")
    shutil.copytree(ckpt / "policy", out)
    return out
