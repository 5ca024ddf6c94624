"""The evaluation harness: questions -> contexts (by method) -> frozen generator -> metrics -> RUN_DIR/results.jsonl.

    dataset, components, config = build_run(cfg, opts)   # eval/build.py: the real pieces from the configuration
    summary = run_eval(opts, dataset, components, config)

Per batch of questions: the context source gives each question its documents D (or an agent its own answer), the
frozen generator answers G(Q, D), Acc scores the answers (eval/accuracy.py), and one row per question is appended to
results.jsonl. At the end summary.json is written from the final rows (eval/summary.py). A run is resumable: finished
rows are skipped, failed ones retried (eval/rundir.py keeps the run directory, its lock and its identity).

A failed context, generator or judge call is recorded with its error and is *missing* (never scored as 0).
The pieces (context source, answerer, scorer) are small async callables in `Components`, so tests can swap any of them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from eval.accuracy import METRIC_KEYS, Prediction, Scores
from eval.contexts import ContextFn, ContextOut
from eval.methods import METHODS, OPTIONS_USED
from eval.rundir import (
    INVOCATIONS_FILE,
    RESULTS_FILE,
    SUMMARY_FILE,
    check_run_identity,
    read_results,
    row_failed,
    run_lock,
)
from eval.summary import spend_totals, summarize, wall_clock
from generator_adapters.budget import Budget, BudgetReached
from generator_adapters.client import run_sync
from s3core.credentials import redact
from s3core.errors import ConfigError, DataFormatError, S3Error
from s3core.io import append_jsonl, file_sha256, repair_tail, stored, write_json_atomic
from s3core.types import Document, QAExample
from searcher.retrieval.metrics import support_recall

AnswerFn = Callable[[list[QAExample], list[list[Document]]], Awaitable[list[Prediction]]]
ScoreFn = Callable[[list[QAExample], list[str]], Awaitable[list[Scores]]]


@dataclass
class Components:
    """The swappable pieces of a run. `answer is None` means the context source's own answers are used."""

    contexts: ContextFn
    answer: AnswerFn | None
    score: ScoreFn
    cache_stats: Callable[[], dict[str, int]] | None = None
    close: Callable[[], None] | None = None
    has_contexts: bool = True  # False for no_retrieval: no support recall to report
    # spend (eval/build.py wires the generator's and the judge's clients): usage() totals so far (USAGE_KEYS of
    # eval/accuracy.py), project(questions, contexts) the most each question's paid calls can cost, and the budget
    usage: Callable[[], dict[str, float]] | None = None
    project: Callable[[list[QAExample], list[ContextOut]], list[float]] | None = None
    budget: Budget | None = None
    unpriced: list[str] = field(default_factory=list)  # "generator.model = 'x'" for each paid model of unknown price


@dataclass
class EvalOptions:
    """What `s3 eval` was asked to do (paths already resolved)."""

    dataset: Path
    method: str
    out: Path
    index: Path | None = None
    contexts: Path | None = None
    generator: str | None = None
    limit: int | None = None
    batch_size: int = 16
    progress: bool = True
    given: set[str] = field(default_factory=set)  # the options the user passed explicitly
    max_cost_usd: float | None = None  # --max-cost-usd: overrides eval.budget_usd (never part of the run's identity)
    dry_run: bool = False  # --dry-run: nothing is written (a live searcher's trajectories neither)


def validate_options(opts: EvalOptions) -> None:
    """Raise ConfigError when an option is given that the method does not use, or a value is out of range."""
    if opts.method not in METHODS:
        raise ConfigError(f"unknown method {opts.method!r}; choose one of: {', '.join(METHODS)}")
    uses = OPTIONS_USED[opts.method]
    unused = sorted(o for o in opts.given if o in {"index", "contexts", "generator"} and o not in uses)
    if unused:
        names = ", ".join(f"--{o}" for o in unused)
        raise ConfigError(
            f"--method {opts.method} does not use {names}; it uses: "
            + (", ".join(f"--{o}" for o in sorted(uses)) or "no extra options")
        )
    if opts.limit is not None and opts.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {opts.limit}")
    if opts.max_cost_usd is not None and opts.max_cost_usd < 0:
        raise ConfigError(f"--max-cost-usd must be >= 0, got {opts.max_cost_usd}")
    if opts.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {opts.batch_size}")
    if opts.out.exists() and not opts.out.is_dir():
        raise ConfigError(f"--out {opts.out} is a file: give a run directory (created, or resumed if it exists)")
    if not opts.dataset.is_dir():
        raise DataFormatError(f"--dataset {opts.dataset}: not a directory (expected what `s3 data prepare` wrote)")
    if opts.contexts is not None and not stored(opts.contexts).is_file():  # FILE, or FILE.gz where only that is kept
        raise DataFormatError(f"--contexts {opts.contexts}: file not found")
    if opts.index is not None and not opts.index.is_dir():
        raise DataFormatError(f"--index {opts.index}: not a directory (build one with `s3 index build`)")


# ----------------------------------------------------------------------------------------------- dataset


@dataclass
class Dataset:
    """A prepared dataset folder: its questions, its manifest, and what a run records of it."""

    name: str
    dir: Path
    questions: list[QAExample]
    manifest: dict[str, Any]
    questions_sha256: str
    corpus_path: Path | None = None

    @property
    def judge_only(self) -> bool:
        """Multiple-choice sets (MIRAGE) are scored by the judge alone: a span match on 'A' means nothing.
        (Items flagged `metadata.multiple_choice` are judge-only in any dataset.)"""
        m = self.manifest
        return bool(m.get("judge_only")) or str(m.get("format", "")).lower() == "mirage"


def load_dataset(dir: Path, limit: int | None = None) -> Dataset:
    """Open a prepared dataset folder (what `s3 data prepare` wrote: questions.jsonl [+ corpus.jsonl, manifest.json])."""
    from dataprep import load_prepared

    corpus_path, questions = load_prepared(dir)
    manifest: dict[str, Any] = {}
    mpath = dir / "manifest.json"
    if mpath.is_file():
        manifest = json.loads(mpath.read_text(encoding="utf-8"))  # load_prepared has validated it
    if not questions:
        raise DataFormatError(f"{dir}: the dataset has no questions")
    seen: set[str] = set()
    for q in questions:
        if q.id in seen:
            raise DataFormatError(f"{dir}: duplicate question id {q.id!r}")
        seen.add(q.id)
    if limit is not None:
        questions = questions[:limit]
    unanswered = [q.id for q in questions if not q.golden_answers]
    if unanswered:  # checked before the first paid call: such a row can only fail
        raise DataFormatError(f"{dir}: {len(unanswered)} of {len(questions)} questions have no golden_answers (first: "
                              f"{unanswered[0]!r}); every question needs the answers it is scored against")
    qfile = dir / str(manifest.get("questions_file") or "questions.jsonl")
    name = str(manifest.get("name") or dataset_name(dir))
    return Dataset(name=name, dir=dir, questions=questions, manifest=manifest,
                   questions_sha256=file_sha256(qfile), corpus_path=corpus_path)


# folder names that say nothing about the data in them: a dataset in one is named after the folder above it
GENERIC_DIR_NAMES = frozenset({"data", "dataset", "prepared"})


def dataset_name(dir: Path) -> str:
    """A dataset's name from its folder (when its manifest has none): the folder's own name, or for a generic folder
    (`hotpotqa_dev500/data`) the one above it, so two benchmarks' runs never share the name "data"."""
    d = dir.resolve()
    return d.parent.name if d.name.lower() in GENERIC_DIR_NAMES and d.parent.name else d.name


# ----------------------------------------------------------------------------------------------- the loop


class BatchRunner(Protocol):
    """Runs batches elsewhere (eval/ray_eval.py: Ray workers) and hands back each batch's rows as it finishes."""

    def run(self, batches: list[list[QAExample]], attempts: dict[str, int]) -> Iterator[list[dict[str, Any]]]: ...
    def cache_stats(self) -> dict[str, int]: ...


def run_eval(opts: EvalOptions, dataset: Dataset, comp: Components, config: dict[str, Any],
             n_resamples: int = 1000, seed: int = 0, runner: BatchRunner | None = None) -> dict[str, Any]:
    """`run_eval_async` from synchronous code."""
    return run_sync(run_eval_async(opts, dataset, comp, config, n_resamples=n_resamples, seed=seed, runner=runner))


async def run_eval_async(
    opts: EvalOptions, dataset: Dataset, comp: Components, config: dict[str, Any], n_resamples: int = 1000,
    seed: int = 0, runner: BatchRunner | None = None,
) -> dict[str, Any]:
    """Run (or resume) an evaluation into opts.out; returns the summary dict (also written to summary.json).
    `runner`: the batches run there (eval.backend = "ray") instead of here; rows, resume and summary are the same."""
    run_dir = opts.out
    with run_lock(run_dir):
        check_run_identity(run_dir, config)
        results = run_dir / RESULTS_FILE
        cut = repair_tail(results)
        previous = read_results(results)
        wanted = dataset.questions
        done = {i for i, r in previous.items() if not row_failed(r)}
        todo = [q for q in wanted if q.id not in done]
        retried = sum(1 for q in todo if q.id in previous)
        attempts = {i: int(r.get("attempt", 1)) for i, r in previous.items()}
        cache_stats = runner.cache_stats if runner is not None else comp.cache_stats
        stats0 = dict(cache_stats()) if cache_stats else {}
        if comp.budget is not None:
            if runner is not None:
                raise ConfigError("eval.budget_usd / --max-cost-usd runs with eval.backend = 'local' (a Ray run's "
                                  "batches are not projected one by one yet): drop --ray or the budget")
            comp.budget.spent_usd = spend_totals(run_dir / INVOCATIONS_FILE).get("cost_usd") or 0.0  # earlier runs
        usage0 = dict(comp.usage()) if comp.usage is not None and runner is None else {}
        stopped: BudgetReached | None = None
        t0 = time.perf_counter()
        written = 0
        bar = _progress(len(wanted), len(wanted) - len(todo), opts.progress, f"{opts.method}")
        batches = [todo[start : start + opts.batch_size] for start in range(0, len(todo), opts.batch_size)]
        try:
            if runner is None:
                for batch in batches:
                    rows, stopped = await _run_batch(comp, batch, attempts)
                    if rows:  # whole rows only: a budget stop ends the run between two appends, never inside one
                        append_jsonl(results, rows)
                    written += len(rows)
                    bar.update(len(rows))
                    if stopped is not None:
                        break
            else:
                for rows in runner.run(batches, attempts):  # each batch's rows as it comes back
                    append_jsonl(results, rows)
                    written += len(rows)
                    bar.update(len(rows))
            stats1 = dict(cache_stats()) if cache_stats else {}
        finally:
            bar.close()
            if comp.close is not None:
                comp.close()
        final = read_results(results)
        rows = [final[q.id] for q in wanted if q.id in final]
        summary = summarize(rows, config, n_expected=len(wanted), n_resamples=n_resamples, seed=seed)
        invocation = {
            "ts": round(time.time(), 3),
            "rows_written": written,
            "skipped_finished": len(wanted) - len(todo),
            "retried_failed": retried,
            "trimmed_partial_bytes": cut,
            "seconds": round(time.perf_counter() - t0, 3),
            "cache": {k: stats1.get(k, 0) - stats0.get(k, 0) for k in stats1},
        }
        if usage0:
            assert comp.usage is not None
            now = comp.usage()
            invocation["spend"] = {k: round(float(now.get(k, 0.0)) - float(usage0.get(k, 0.0)), 9) for k in now
                                   if k not in ("generator_calls", "generator_failures")}
        if comp.budget is not None:
            invocation["budget_usd"] = comp.budget.limit_usd
        if stopped is not None:
            invocation["stopped"] = str(stopped)
        summary["invocation"] = invocation
        append_jsonl(run_dir / INVOCATIONS_FILE, [invocation])
        summary["totals"].update(wall_clock(run_dir / INVOCATIONS_FILE))
        summary["totals"].update(spend_totals(run_dir / INVOCATIONS_FILE, rows))
        if stopped is not None:
            summary["stopped"] = {"reason": "budget reached", "message": str(stopped),
                                  "budget_usd": stopped.limit_usd, "spent_usd": round(comp.budget.spent_usd, 9)
                                  if comp.budget is not None else None}
        write_json_atomic(run_dir / SUMMARY_FILE, summary)
        return summary


def _fit_budget(comp: Components, costs: list[float]) -> tuple[int, float]:
    """How many questions (a prefix) of those whose paid calls are projected at most `costs` fit what the budget has
    left now, and what they may cost together."""
    assert comp.budget is not None
    n, total = 0, 0.0
    for usd in costs:
        if not comp.budget.fits(total + usd):
            break
        n, total = n + 1, total + usd
    return n, total


async def _run_batch(
    comp: Components, batch: list[QAExample], attempts: dict[str, int]
) -> tuple[list[dict[str, Any]], BudgetReached | None]:
    """Contexts, then answers for the questions that got them, then scores for the answers that came back. With a
    budget, only the questions whose paid calls (projected) fit what is left run; when one does not fit, the ones
    before it run first, and it is checked again against what they really cost (a projection is an upper bound).
    The stop names that question, ITS projected cost and what has been spent after the rows before it ran."""
    ctxs = await comp.contexts(batch)
    if len(ctxs) != len(batch):
        raise S3Error(f"context source returned {len(ctxs)} results for {len(batch)} questions")
    if comp.budget is None or comp.project is None:
        return await _answer_and_score(comp, batch, ctxs, attempts), None
    costs = comp.project(batch, ctxs)
    rows: list[dict[str, Any]] = []
    while batch:
        n, reserved = _fit_budget(comp, costs)
        if n == 0:  # the stop reads the budget now, after the rows before this question were paid for
            return rows, comp.budget.stop(costs[0], f"question {batch[0].id!r}")
        comp.budget.reserve(reserved)
        usage0 = comp.usage() if comp.usage is not None else {}
        try:
            rows += await _answer_and_score(comp, batch[:n], ctxs[:n], attempts)
        finally:
            spent = (float(comp.usage().get("cost_usd", 0.0)) - float(usage0.get("cost_usd", 0.0))
                     if comp.usage is not None else reserved)
            comp.budget.settle(reserved, spent)
        batch, ctxs, costs = batch[n:], ctxs[n:], costs[n:]
    return rows, None


async def _answer_and_score(
    comp: Components, batch: list[QAExample], ctxs: list[ContextOut], attempts: dict[str, int]
) -> list[dict[str, Any]]:
    preds: list[Prediction | None] = [None] * len(batch)
    if comp.answer is None:
        preds = [c.answer if c.error is None else None for c in ctxs]
        for i, c in enumerate(ctxs):
            if c.error is None and c.answer is None:
                preds[i] = Prediction(text=None, error="agent: gave no answer")
    else:
        todo = [i for i, c in enumerate(ctxs) if c.error is None]
        if todo:
            got = await comp.answer([batch[i] for i in todo], [ctxs[i].documents for i in todo])
            if len(got) != len(todo):
                raise S3Error(f"generator returned {len(got)} answers for {len(todo)} questions")
            for i, p in zip(todo, got, strict=True):
                preds[i] = p
    scores: list[Scores | None] = [None] * len(batch)
    answered = [(i, p.text) for i, p in enumerate(preds) if p is not None and p.error is None and p.text is not None]
    if answered:
        got_s = await comp.score([batch[i] for i, _ in answered], [text for _, text in answered])
        for (i, _), s in zip(answered, got_s, strict=True):
            scores[i] = s
    return [
        _make_row(q, c, p, s, attempts.get(q.id, 0) + 1, comp.has_contexts)
        for q, c, p, s in zip(batch, ctxs, preds, scores, strict=True)
    ]


def _make_row(
    q: QAExample, ctx: ContextOut, pred: Prediction | None, sc: Scores | None, attempt: int, has_contexts: bool = True
) -> dict[str, Any]:
    """One results.jsonl row. The first error met (contexts, generator, judge) makes the row failed: GenAcc missing."""
    ids = [d.id for d in ctx.documents]
    error = ctx.error or (pred.error if pred is not None else None) or (sc.error if sc is not None else None)
    if pred is not None and pred.error is None and pred.text is None:
        error = "generator: no answer text"
    metrics: dict[str, Any] = {k: None for k in (*METRIC_KEYS, "judge")}
    if sc is not None:  # keep what was measured (e.g. em/f1 when only the judge failed); a failed row has no GenAcc
        metrics = {"genacc": sc.genacc if error is None else None, "span": sc.span, "em": sc.em, "f1": sc.f1,
                   "judge": sc.judge}
    gen_lat = pred.latency_s if pred is not None else 0.0
    return {
        "id": q.id,
        "question": q.question,
        "golden_answers": q.golden_answers,
        "context_ids": ids,
        "answer": pred.text if pred is not None else None,
        "metrics": metrics,
        "support_recall": support_recall(ids, q.supporting_ids) if ctx.error is None and has_contexts else None,
        "latency_s": round(ctx.latency_s + gen_lat, 4),
        "context_latency_s": round(ctx.latency_s, 4),
        "generation_latency_s": round(gen_lat, 4),
        "prompt_tokens": pred.prompt_tokens if pred is not None else 0,
        "completion_tokens": pred.completion_tokens if pred is not None else 0,
        "cost_usd": pred.cost_usd if pred is not None else 0.0,
        "cached": bool(pred.cached) if pred is not None else False,
        "turns": ctx.turns,
        "note": pred.note if pred is not None else None,
        "error": redact(error) if error else None,  # the one redaction step for every stored error text
        "attempt": attempt,
        "ts": round(time.time(), 3),
    }


def _progress(total: int, initial: int, enabled: bool, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc=desc, unit="q", file=sys.stderr, leave=False)


async def dry_run_async(opts: EvalOptions, dataset: Dataset, comp: Components) -> dict[str, Any]:
    """What the rest of the run would cost, without one paid call: the questions not yet finished get their contexts
    (the method's own source: retrieval, a contexts file, a local searcher), and their generator and judge prompts
    are measured and priced (completions at max_tokens; answers the cache holds cost nothing)."""
    if comp.project is None:
        raise ConfigError("--dry-run needs a run whose generator and judge prices are known")
    done = {i for i, r in read_results(opts.out / RESULTS_FILE).items() if not row_failed(r)}
    todo = [q for q in dataset.questions if q.id not in done]
    per_q: list[float] = []
    try:
        for start in range(0, len(todo), opts.batch_size):
            batch = todo[start : start + opts.batch_size]
            ctxs = await comp.contexts(batch)
            per_q += comp.project(batch, ctxs)
    finally:
        if comp.close is not None:
            comp.close()
    spent = spend_totals(opts.out / INVOCATIONS_FILE).get("cost_usd") if opts.out.is_dir() else None
    total = float(sum(per_q))
    if total == float("inf"):
        which = " and ".join(comp.unpriced) or "the generator or the judge model"
        sections = " and ".join(sorted({u.split(".")[0] for u in comp.unpriced})) or "generator / judge"
        raise ConfigError(f"--dry-run: the price of {which} is unknown (litellm's cost map does not list it): set "
                          f"input_cost_per_mtok and output_cost_per_mtok in [{sections}] (dollars per million "
                          "tokens; 0 for a self-hosted server)")
    return {"questions": len(todo), "already_finished": len(done), "projected_usd": total,
            "projected_usd_per_question": total / len(todo) if todo else 0.0, "spent_usd": spent or 0.0,
            "budget_usd": comp.budget.limit_usd if comp.budget is not None else None}
