"""Training commands: `s3 prepare-training`, `s3 train`, `s3 plot RUN_DIR`, `s3 export-policy`, `s3 train-eval`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("prepare-training", help="build the training set and cache the naive-RAG baseline", parents=[common])
    p.add_argument("--out", default=None, help="training directory (default: training.data.dir or OUTPUT_DIR/data)")
    p.add_argument("--max-cost-usd", type=float, default=None,
                   help="cap on what preparations of this training directory spend on paid generator / judge calls "
                        "(the naive-RAG baseline, the gold-context check): no batch is started that could pass it; "
                        "the run stops with exit status 3 and 'budget reached', and resumes with a higher cap")
    p.add_argument("--dry-run", action="store_true",
                   help="build the corpus and index, then print the projected cost of the paid calls; call no paid API")
    p.set_defaults(handler=_prepare)

    p = sub.add_parser("train", help="train a searcher (GRPO/PPO; s3 or Search-R1 mode); resumes a run dir", parents=[common])
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many more steps (checkpointed)")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="the command's wall-time budget: no step is started that would end past it (judged by the last "
                        "step's time); the run stops with a checkpoint and resumes from it (for a session or a "
                        "preemptible machine that ends at a known time)")
    p.add_argument("--max-cost-usd", type=float, default=None, metavar="USD",
                   help="cap on the run's spend on paid reward calls (training.budget_usd): no step is started that "
                   "could pass it; the run stops with a checkpoint, exit status 3 'budget reached', and resumes with a "
                   "higher cap")
    p.add_argument("--dry-run", action="store_true",
                   help="print the projected cost of the rest of the run (measured prompts, prices; a fresh run "
                   "prices its first RL step's own rollouts, a resumed one its measured steps; a reward that calls no "
                   "generator counts 0 calls and says so), calling no paid API, and exit")
    p.set_defaults(handler=_train)

    p = sub.add_parser("plot", help="training curves of a run directory -> PNG, and whether the reward rose beyond noise", parents=[common])
    p.add_argument("run_dir")
    p.add_argument("--out", default=None)
    p.set_defaults(handler=_plot)

    p = sub.add_parser("export-policy", help="export a checkpoint (LoRA merged) as a plain Hugging Face dir", parents=[common])
    p.add_argument("checkpoint", help="a checkpoint dir or a run dir (its latest checkpoint)")
    p.add_argument("--out", required=True)
    p.set_defaults(handler=_export)

    p = sub.add_parser("train-eval", help="held-out reward of a checkpoint vs the untrained policy", parents=[common])
    p.add_argument("--policy", action="append", required=True, help="policy dir or base model name (repeatable)")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--split", choices=("heldout", "train"), default="heldout",
                   help="the held-out questions (default) or the training questions, both decoded greedily")
    p.add_argument("--questions", metavar="FILE", default=None,
                   help="append each policy's per-question rows (reward, documents, queries) to this jsonl file: "
                        "paired comparisons between policies")
    p.set_defaults(handler=_train_eval)


def _prepare(args: argparse.Namespace, cfg: S3Config) -> int:
    from generator_adapters.budget import BUDGET_EXIT_CODE, BudgetReached
    from s3core.errors import S3Error
    from training.prep.data import PrepSpend, prepare_training

    if args.max_cost_usd is not None and args.max_cost_usd < 0:
        raise S3Error(f"--max-cost-usd must be >= 0, got {args.max_cost_usd}")
    spend = PrepSpend(limit_usd=args.max_cost_usd, dry_run=args.dry_run)
    try:
        m = prepare_training(cfg, Path(args.out) if args.out else None, spend=spend)
    except BudgetReached as e:
        print(f"{e} (--max-cost-usd); what is cached stays: the same command with a higher cap resumes", file=sys.stderr)
        return BUDGET_EXIT_CODE
    if args.dry_run:
        print(f"dry run: {spend.projected_calls} questions to ask the generator about: projected at most "
              f"${spend.projected_usd:.6f} (prompts measured, completions at max_tokens, cached answers free); "
              "no paid API was called")
        return 0
    print(json.dumps(m["counts"]))
    return 0


def _train(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3core.errors import S3Error
    from searcher.heap import freeze_loaded_heap
    from training.run.trainer import make_trainer

    if args.max_minutes is not None and args.max_minutes <= 0:
        raise S3Error(f"--max-minutes must be > 0, got {args.max_minutes}")
    if args.max_cost_usd is not None:
        if args.max_cost_usd < 0:
            raise S3Error(f"--max-cost-usd must be >= 0, got {args.max_cost_usd}")
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={"budget_usd": args.max_cost_usd})})
    if cfg.searcher.kind == "reading":  # the reading searcher: credit, reader, ranker (training/reading/)
        return _train_reading(args, cfg)
    if args.dry_run:
        return _train_dry_run(cfg)
    from training.run.recovery import RECOVERY_EXIT_CODE, RecoveryExhausted, train_healing

    def build() -> Any:
        trainer = make_trainer(cfg)  # again after each rollback: resumed from its checkpoint, with its changes
        freeze_loaded_heap()  # policy, reference, generator, index and libraries: out of every later full GC pass
        return trainer

    try:  # the Ray backend's workers stop with each trainer (train_healing closes it)
        # the budget is the command's: the start-up (models, engines, data) is spent from it
        budget = args.max_minutes * 60 if args.max_minutes is not None else None
        out = train_healing(build, max_steps=args.max_steps, max_seconds=budget)
    except RecoveryExhausted as e:
        print(f"s3 train: {e}", file=sys.stderr)
        return RECOVERY_EXIT_CODE
    print(json.dumps({k: v for k, v in out.items() if k != "last"}))
    if out.get("stopped"):
        from generator_adapters.budget import BUDGET_EXIT_CODE

        print(f"{out['stopped']} (--max-cost-usd / training.budget_usd); stopped at step {out['steps']} with its "
              "checkpoint: the same command with a higher cap resumes", file=sys.stderr)
        return BUDGET_EXIT_CODE
    return 0


def _train_reading(args: argparse.Namespace, cfg: S3Config) -> int:
    from training.reading.trainer import ReadingRun

    budget = args.max_minutes * 60 if args.max_minutes is not None else None
    run = ReadingRun(cfg, max_seconds=budget, log=lambda m: print(m, file=sys.stderr, flush=True),
                     max_cost_usd=args.max_cost_usd)
    if args.dry_run:
        print(run.dry_run())
        return 0
    from generator_adapters.budget import BUDGET_EXIT_CODE, BudgetReached

    try:
        out = run.run()
    except BudgetReached as e:  # the credit scored so far is kept: the same command with a higher cap resumes
        print(f"s3 train: {e}", file=sys.stderr)
        return BUDGET_EXIT_CODE
    print(json.dumps(out))
    return 1 if out.get("stopped") == "credit missing" else 0  # failed calls: not trained yet, run it again


def _train_dry_run(cfg: S3Config) -> int:
    from s3core.errors import S3Error
    from training.prep.data import load_training_set, training_dir
    from training.report.dryrun import dry_run, dry_run_message
    from training.run.build import Prepared, build_training, step_memory
    from training.rundir import checkpoint_step

    memory = step_memory(cfg)  # a step that cannot fit is refused first, prepared data or not
    try:  # the naive-RAG baseline is paid for by prepare-training: a dry run never computes it
        data = load_training_set(cfg, training_dir(cfg))
    except S3Error as e:
        raise S3Error(f"--dry-run needs a prepared training directory with its baseline ({e}): run "
                      "`s3 prepare-training` first (it calls the generator once per question)") from None
    # the prepared set as it is: no preparation stage, no distillation
    parts = build_training(cfg, Prepared(data, memory=memory))
    try:
        parts.executor.sync()  # a resumed run's weights into the rollout engines, as the trainer's start does
        d = dry_run(parts, checkpoint_step(parts.resume_dir) if parts.resume_dir is not None else 0)
    finally:
        parts.close()
    print(dry_run_message(d))
    return 0


def _plot(args: argparse.Namespace, cfg: S3Config) -> int:
    from training.report.plots import format_trend, plot_run, reward_trend
    from training.rundir import read_metrics

    print(plot_run(args.run_dir, args.out))
    rows = read_metrics(args.run_dir)
    for key in ("reward/mean", "reward/acc_s3", "search/docs", "search/turns"):  # the reward, and the behaviour behind it
        if any(r.get(key) is not None for r in rows):
            print(format_trend(reward_trend(rows, key)))
    return 0


def _export(args: argparse.Namespace, cfg: S3Config) -> int:
    from training.learn.export import export_policy

    print(export_policy(args.checkpoint, args.out, base_model=cfg.training.base_model))
    return 0


def _train_eval(args: argparse.Namespace, cfg: S3Config) -> int:
    from training.run.evaluate import heldout_rewards

    questions = Path(args.questions) if args.questions else None
    for row in heldout_rewards(cfg, args.policy, limit=args.limit, split=args.split, questions_out=questions):
        print(json.dumps(row), flush=True)  # one line per policy as soon as it is scored
    return 0
