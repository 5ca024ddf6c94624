"""`s3 eval` (one resumable evaluation run) and `s3 leaderboard` (one table from many runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.methods import METHODS
from s3core.errors import S3Error

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "eval",
        parents=[common],
        help="evaluate a method with a frozen generator on a prepared dataset (resumable)",
        description="Answer a prepared dataset's questions with the frozen generator, given contexts from a method; "
        "rows go to RUN_DIR/results.jsonl as they finish, a re-run resumes (retrying failed rows), and "
        "RUN_DIR/summary.json holds means over scored rows with bootstrap 95% intervals.",
    )
    p.add_argument("--dataset", required=True, metavar="DIR", help="folder written by `s3 data prepare`")
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--index", default=None, metavar="DIR", help="retrieval index (default: retriever.index)")
    p.add_argument("--contexts", default=None, metavar="FILE",
                   help="searcher contexts jsonl {id, documents:[{id,...}]} (method searcher)")
    p.add_argument("--searcher", default=None, metavar="NAME",
                   help="method searcher, run live: a named searcher (a shipped one, `s3 searchers`, or a trained run "
                   "directory / policy folder) on the settings it records (default: the [searcher] section's)")
    p.add_argument("--generator", default=None, metavar="MODEL",
                   help="litellm model string of the frozen generator (default: generator.model)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N questions")
    p.add_argument("--batch-size", type=int, default=16, metavar="N", help="questions per batch (default 16)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run folder (created; resumed if it exists)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--ray", action="store_true",
                   help="run the question batches on Ray workers ([ray]; same as eval.backend = 'ray')")
    p.add_argument("--max-cost-usd", type=float, default=None, metavar="USD",
                   help="cap on the run's spend on paid generator / judge calls (eval.budget_usd): it stops before "
                   "the batch that could pass it, exit status 3 'budget reached'; a higher cap resumes it")
    p.add_argument("--dry-run", action="store_true",
                   help="print what the rest of the run would cost (prompts measured, completions at max_tokens), "
                   "calling no paid API, and exit")
    p.set_defaults(handler=_eval)

    lb = sub.add_parser(
        "leaderboard",
        parents=[common],
        help="one table (markdown, CSV, HTML, PNG) from many eval runs",
        description="Rows = generator x label (a run's label is its method unless --label gives it one), "
        "columns = datasets, cells = GenAcc (EM), plus mean, cost, latency and GBR rows (searcher - naive RAG; "
        "with --baseline LABEL: every other label - LABEL) with paired-bootstrap 95% intervals over the questions "
        "both runs scored. Refuses runs of one method that differ in retriever, corpus or prompt, and runs of one label "
        "that differ in k. With --grid GRID.toml it first runs every generator x dataset x method "
        "cell as its own `s3 eval` run directory under DIR/runs (resumable; a re-run skips finished cells), "
        "one after the other or, with --ray, as Ray tasks (eval/grid.py documents the grid file).",
    )
    lb.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run folders (each with summary.json)")
    lb.add_argument("--grid", default=None, metavar="GRID.toml",
                    help="run the grid's cells first (generators x datasets x methods) into DIR/runs, then the table")
    lb.add_argument("--ray", action="store_true",
                    help="with --grid: the cells run as Ray tasks ([ray]; same as eval.backend = 'ray')")
    lb.add_argument("--label", action="append", default=[], metavar="RUN_DIR=NAME",
                    help="the row RUN_DIR fills (default: its method), so two runs of one method sit side by side, "
                    "e.g. runs/top4=naive_rag_top4 (repeatable)")
    lb.add_argument("--baseline", default=None, metavar="LABEL",
                    help="GBR rows for every other label minus LABEL's GenAcc, per dataset and on the mean (default: "
                    "the paper's GBR, searcher - naive_rag)")
    lb.add_argument("--out", required=True, metavar="DIR", help="where leaderboard.{md,csv,html,png} go")
    lb.set_defaults(handler=_leaderboard)


def _eval(args: argparse.Namespace, cfg: S3Config) -> int:
    from eval.build import build_run
    from eval.harness import EvalOptions, run_eval, validate_options

    given = {name for name in ("index", "contexts", "generator") if getattr(args, name) is not None}
    opts = EvalOptions(
        dataset=Path(args.dataset),
        method=args.method,
        out=Path(args.out),
        index=Path(args.index) if args.index else None,
        contexts=Path(args.contexts) if args.contexts else None,
        generator=args.generator,
        limit=args.limit,
        batch_size=args.batch_size,
        progress=not args.no_progress and sys.stderr.isatty(),
        given=given,
        max_cost_usd=args.max_cost_usd,
        dry_run=args.dry_run,
    )
    validate_options(opts)
    cfg = _trained_loop(args, cfg)
    dataset, comp, config = build_run(cfg, opts)
    if args.dry_run:
        return _dry_run(opts, dataset, comp)
    runner = None
    if args.ray or cfg.eval.backend == "ray":
        from eval.ray_eval import RayBatchRunner

        runner = RayBatchRunner(cfg, opts, config)
    try:
        summary = run_eval(opts, dataset, comp, config, n_resamples=cfg.eval.bootstrap_samples, seed=cfg.eval.seed,
                           runner=runner)
    finally:
        if runner is not None:
            runner.close()
    _print_summary(summary, opts.out)
    stopped = summary.get("stopped")
    if stopped:
        from generator_adapters.budget import BUDGET_EXIT_CODE

        n = summary["n_missing"]
        print(f"{stopped['message']} (--max-cost-usd / eval.budget_usd); {n} question{'' if n == 1 else 's'} not "
              f"run: the same command with a higher cap resumes", file=sys.stderr)
        return BUDGET_EXIT_CODE
    from eval.summary import verdict

    problem = verdict(summary, cfg.eval.max_failed_fraction)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return 0


def _trained_loop(args: argparse.Namespace, cfg: S3Config) -> S3Config:
    """A trained searcher (searcher.policy_path holding a searcher.json) is evaluated on the loop it was trained with,
    as `s3 search --policy` serves it: the record's loop settings (queries_per_turn, additive, the cap, ...) except the
    keys the config files or --set give. The index stays the evaluation's own (--index / retriever.index)."""
    from s3.build import trained_config
    from searcher.trained import find_record

    if getattr(args, "searcher", None) is not None:
        if args.method != "searcher" or args.contexts:
            raise S3Error("--searcher names the searcher --method searcher runs live (not with --contexts)")
        return trained_config(cfg, args.searcher, Path(args.index) if args.index else cfg.resolve(cfg.retriever.index))[0]
    raw = cfg.searcher.policy_path
    if args.method != "searcher" or args.contexts or not raw:
        return cfg

    policy = Path(raw) if Path(raw).exists() else cfg.resolve(raw)
    index = Path(args.index) if args.index else cfg.resolve(cfg.retriever.index)
    if index is None or not policy.exists() or find_record(policy) is None:
        return cfg  # build_run names what is missing; a policy without a record runs on the config's loop
    return trained_config(cfg, policy, index)[0]


def _dry_run(opts: Any, dataset: Any, comp: Any) -> int:
    from eval.harness import dry_run_async
    from generator_adapters.client import run_sync

    d = run_sync(dry_run_async(opts, dataset, comp))
    budget = d["budget_usd"]
    left = f"; budget ${budget:.6f}, ${d['spent_usd']:.6f} already spent" if budget is not None else ""
    print(f"dry run: {d['questions']} questions to run ({d['already_finished']} finished): projected at most "
          f"${d['projected_usd']:.6f} (${d['projected_usd_per_question']:.6f} a question; prompts measured, "
          f"completions at max_tokens, every answer judged; no paid API was called){left}")
    return 0


def _fmt(m: dict[str, Any] | None) -> str:
    if not m or m.get("mean") is None:
        return "n/a"
    ci = m.get("ci95") or [None, None]
    return f"{100 * m['mean']:.1f} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _cache_text(stats: dict[str, Any] | None) -> str:
    """The response cache's counts of this invocation, or nothing when there are none (no cache, or nothing asked).

    >>> _cache_text({"hits": 3, "misses": 7}), _cache_text({})
    ('; response cache: hits 3, misses 7', '')
    """
    if not stats:
        return ""
    return "; response cache: " + ", ".join(f"{k} {v}" for k, v in stats.items())


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    m = summary["metrics"]
    inv = summary.get("invocation", {})
    print(f"run: {out}")
    total = summary["n_scored"] + summary["n_failed"] + summary["n_missing"]
    print(f"scored {summary['n_scored']} of {total}; failed {summary['n_failed']} (no score; retried when the run is "
          f"resumed); not run yet {summary['n_missing']}"
          f" (this invocation: {inv.get('rows_written', 0)} rows, {inv.get('skipped_finished', 0)} skipped,"
          f" {inv.get('retried_failed', 0)} retried{_cache_text(inv.get('cache'))})")
    for key in ("genacc", "span", "em", "f1", "support_recall"):
        if key in m:
            print(f"  {key:<15} {_fmt(m[key])}")
    t = summary.get("totals", {})
    if t.get("mean_latency_s") is not None:
        wall = t.get("wall_s_per_question")
        wall_txt = f"wall {wall:.2f} s/question (the leaderboard's latency); " if wall is not None else ""
        print(f"  time            {wall_txt}per-row latency {t['mean_latency_s']:.2f} s (queueing in its batch "
              f"included)")
    if "paid_calls" in t:
        cost = "unknown (a model without a price: set its input/output_cost_per_mtok)" if t.get("cost_usd") is None \
            else f"${t['cost_usd']:.6f}"
        per = t.get("cost_per_correct_usd")
        print(f"  cost            {cost} for {t['paid_calls']} paid calls ({t['prompt_tokens']} tokens in, "
              f"{t['completion_tokens']} out); cache hits {t['cache_hits']} saved ${t['saved_usd']:.6f}"
              + (f"; ${per:.6f} per correct answer" if per is not None else ""))


def _leaderboard(args: argparse.Namespace, cfg: S3Config) -> int:
    from eval.leaderboard import build_leaderboard, parse_label, write_leaderboard
    from s3core.errors import ConfigError

    labels = dict(parse_label(spec) for spec in args.label)
    rc = 0
    if args.grid is not None:
        if args.runs:
            raise ConfigError("give either RUN_DIRs or --grid GRID.toml, not both")
        runs, rc = _run_grid(args, cfg)
    else:
        if args.ray:
            raise ConfigError("--ray runs the cells of a --grid; without --grid there is nothing to run")
        if not args.runs:
            raise ConfigError("give the RUN_DIRs to put in the table, or --grid GRID.toml to run them first")
        runs = [Path(r) for r in args.runs]
    if not runs:
        print("error: no cell finished; no leaderboard written", file=sys.stderr)
        return 1
    board = build_leaderboard(runs, labels=labels, baseline=args.baseline, seed=cfg.eval.seed)
    paths = write_leaderboard(board, Path(args.out))
    print(board.markdown())
    for p in paths:
        print(f"wrote {p}")
    return rc


def _run_grid(args: argparse.Namespace, cfg: S3Config) -> tuple[list[Path], int]:
    """Run the grid's cells; the run dirs of the cells that have a summary, and 1 when a cell failed or its verdict
    (eval.max_failed_fraction) is bad."""
    from eval.grid import CellResult, expand_grid, load_grid, run_grid
    from eval.summary import verdict

    grid = load_grid(Path(args.grid))
    cells = expand_grid(grid, Path(args.out), default_index=cfg.resolve(cfg.retriever.index))
    backend = "ray" if args.ray or cfg.eval.backend == "ray" else "local"
    print(f"grid: {len(cells)} cells ({len(grid.generators)} generators x {len(grid.datasets)} datasets x "
          f"{len(grid.methods)} methods) on {backend}")

    def show(r: CellResult) -> None:
        s = r.summary or {}
        what = r.error if r.status == "failed" else (
            f"scored {s.get('n_scored', 0)}, failed {s.get('n_failed', 0)}, missing {s.get('n_missing', 0)}")
        print(f"  {r.status:<7} {r.cell.key}: {what}  ({r.cell.out})", flush=True)

    results = run_grid(cfg, cells, backend=backend, on_result=show)
    bad = [r for r in results if r.status == "failed"]
    for r in results:
        problem = verdict(r.summary, cfg.eval.max_failed_fraction) if r.summary is not None else None
        if problem is not None:
            bad.append(r)
            print(f"error: {r.cell.key}: {problem}", file=sys.stderr)
    if bad:
        print(f"error: {len(bad)} of {len(cells)} cells failed or fell short; re-run the same command to resume them",
              file=sys.stderr)
    return [r.cell.out for r in results if r.summary is not None], 1 if bad else 0
