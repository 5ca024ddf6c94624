"""The evaluation harness: questions -> contexts (by method) -> frozen generator -> metrics -> results.jsonl.

One run = one RUN_DIR:

    run.json        the run's identity (dataset, method, retriever, k, corpus / prompt hashes, generator, judge);
                    a resume with a different identity is refused and the differing keys are named
    results.jsonl   one row per question, appended as batches finish (flush + fsync per batch); a resume skips
                    finished rows, retries failed ones, and the final view keeps the LATEST row per id. A line cut
                    short by a kill is tolerated (and trimmed before the next append)
    summary.json    {"metrics": {"genacc": {"mean", "ci95", "n"}, "span", "em", "f1", ...}, "n_scored",
                    "n_failed", "n_missing", "config", "totals", "invocation"} - means over SCORED rows only
    invocations.jsonl  one line per invocation (rows run / skipped, generator cache hits and misses)

Methods:
    no_retrieval   the generator answers from the question alone
    naive_rag      top-k (retriever.k) of the question itself
    searcher       contexts from a jsonl (--contexts, `{"id", "documents": [{"id", ...}]}`), or the live S3Searcher
    search_r1      the Search-R1 agent's own answer (no frozen generator)
    search_r1_ret  the Search-R1 agent's retrieved documents fed to the frozen generator

A failed generator or judge call is recorded with its error and is *missing* (never scored as 0).
The pieces (context source, answerer, scorer) are small async callables, so tests can swap any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.stats import mean_ci
from s3core.corpus import iter_corpus
from s3core.errors import ConfigError, DataFormatError, S3Error
from s3core.io import file_sha256
from s3core.types import Document, QAExample

METHODS = ("no_retrieval", "naive_rag", "searcher", "search_r1", "search_r1_ret")
METRIC_KEYS = ("genacc", "span", "em", "f1")
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
INVOCATIONS_FILE = "invocations.jsonl"

# Which CLI options each method uses. Anything else given is an error (never silently ignored).
_USES: dict[str, set[str]] = {
    "no_retrieval": {"generator"},
    "naive_rag": {"index", "generator"},
    "searcher": {"index", "contexts", "generator"},
    "search_r1": {"index"},
    "search_r1_ret": {"index", "generator"},
}
# Identity keys compared when resuming a RUN_DIR (dotted paths into run.json["config"]).
_IDENTITY_KEYS = (
    "dataset.questions_sha256",
    "method",
    "retriever.backend",
    "retriever.k",
    "retriever.corpus_sha256",
    "contexts.sha256",
    "generator.model",
    "generator.api_base",
    "generator.prompt_sha256",
    "generator.temperature",
    "generator.max_tokens",
    "generator.gguf_sha256",
    "judge.model",
    "judge.mode",
)


class RunDirError(S3Error):
    """RUN_DIR cannot be used: locked by another run, or it holds a run with a different configuration."""


# ----------------------------------------------------------------------------------------------- records


@dataclass
class Prediction:
    """One answer from the frozen generator (or an end-to-end agent). `text is None` with `error` = failed.

    An end-to-end agent that ran fine but wrote no `<answer>` gave a *wrong* answer, not a missing one: its text is
    "" (scored 0, like upstream Search-R1) and `note` says why."""

    text: str | None
    error: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    note: str | None = None


@dataclass
class ContextOut:
    """What a context source gives for one question: documents, maybe an agent's own answer, or an error."""

    documents: list[Document] = field(default_factory=list)
    answer: Prediction | None = None
    error: str | None = None
    latency_s: float = 0.0
    turns: int | None = None


@dataclass
class Scores:
    """Metrics of one answer. `genacc is None` with `error` set = the judge failed: the row is missing."""

    genacc: float | None
    span: float | None
    em: float | None
    f1: float | None
    judge: float | None = None
    error: str | None = None
    cost_usd: float = 0.0


ContextFn = Callable[[list[QAExample]], Awaitable[list[ContextOut]]]
AnswerFn = Callable[[list[QAExample], list[list[Document]]], Awaitable[list[Prediction]]]
ScoreFn = Callable[[list[QAExample], list[str]], Awaitable[list[Scores]]]


@dataclass
class Components:
    """The swappable pieces of a run. `answer is None` means the context source's own answers are used."""

    contexts: ContextFn
    answer: AnswerFn | None
    score: ScoreFn
    cache_stats: Callable[[], dict[str, int]] | None = None
    close: Callable[[], Awaitable[None]] | None = None
    has_contexts: bool = True  # False for no_retrieval: no support recall to report


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


# ----------------------------------------------------------------------------------------------- validation


def validate_options(opts: EvalOptions) -> None:
    """Raise ConfigError when an option is given that the method does not use, or a value is out of range."""
    if opts.method not in METHODS:
        raise ConfigError(f"unknown method {opts.method!r}; choose one of: {', '.join(METHODS)}")
    unused = sorted(o for o in opts.given if o in {"index", "contexts", "generator"} and o not in _USES[opts.method])
    if unused:
        names = ", ".join(f"--{o}" for o in unused)
        raise ConfigError(
            f"--method {opts.method} does not use {names}; it uses: "
            + (", ".join(f"--{o}" for o in sorted(_USES[opts.method])) or "no extra options")
        )
    if opts.limit is not None and opts.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {opts.limit}")
    if opts.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {opts.batch_size}")
    if not opts.dataset.is_dir():
        raise DataFormatError(f"--dataset {opts.dataset}: not a directory (expected what `s3 data prepare` wrote)")
    if opts.contexts is not None and not opts.contexts.is_file():
        raise DataFormatError(f"--contexts {opts.contexts}: file not found")
    if opts.index is not None and not opts.index.is_dir():
        raise DataFormatError(f"--index {opts.index}: not a directory (build one with `s3 index build`)")


# ----------------------------------------------------------------------------------------------- dataset


@dataclass
class Dataset:
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
    from eval.datasets import load_prepared

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
    qfile = dir / str(manifest.get("questions_file") or "questions.jsonl")
    name = str(manifest.get("name") or dir.resolve().name)
    return Dataset(name=name, dir=dir, questions=questions, manifest=manifest,
                   questions_sha256=file_sha256(qfile), corpus_path=corpus_path)


def read_contexts_file(path: Path, wanted: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Read a contexts / rankings jsonl: `{"id", "documents": [{"id", ...}, ...]}` per question.

    Every wanted question id must be present (the error names how many are missing and the first few).
    """
    want = set(wanted)
    out: dict[str, list[dict[str, Any]]] = {}
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict) or "id" not in obj or not isinstance(obj.get("documents"), list):
                raise DataFormatError(f"{path}:{lineno}: expected {{\"id\", \"documents\": [{{\"id\", ...}}]}}")
            docs = obj["documents"]
            for d in docs:
                if not isinstance(d, dict) or "id" not in d:
                    raise DataFormatError(f"{path}:{lineno}: every document needs an 'id'")
            qid = str(obj["id"])
            if qid in want:
                out[qid] = docs
    missing = [q for q in wanted if q not in out]
    if missing:
        raise DataFormatError(
            f"{path}: no contexts for {len(missing)} of {len(want)} questions (first: {', '.join(missing[:5])})"
        )
    return out


def lookup_documents(ids: set[str], corpus: Path | None, getter: Callable[[list[str]], list[Any]] | None) -> dict[str, Document]:
    """Texts of the given doc ids, from a retriever's get(ids) when there is one, else by streaming the corpus."""
    found: dict[str, Document] = {}
    if getter is not None:
        order = sorted(ids)
        for i, d in zip(order, getter(order), strict=True):
            if d is not None:
                found[i] = d
    elif corpus is not None and corpus.is_file():
        for d in iter_corpus(corpus, check_unique=False):
            if d.id in ids:
                found[d.id] = d
    missing = sorted(ids - set(found))
    if missing:
        where = "the index" if getter is not None else str(corpus)
        raise DataFormatError(f"{len(missing)} context document ids are not in {where} (first: {', '.join(missing[:5])})")
    return found


# ----------------------------------------------------------------------------------------------- results store


def _iter_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(lineno, text, complete) for each line; the last line is incomplete when the file lacks a final newline."""
    data = path.read_bytes()
    if not data:
        return
    parts = data.split(b"\n")
    last_complete = data.endswith(b"\n")
    if last_complete:
        parts = parts[:-1]
    for i, raw in enumerate(parts, start=1):
        complete = last_complete or i < len(parts)
        yield i, raw.decode("utf-8", errors="replace"), complete


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """The final view of results.jsonl: the latest row per question id.

    A last line cut short by a kill (no final newline, or not parseable JSON at the end) is ignored; a broken line
    elsewhere is an error naming it.
    """
    latest: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return latest
    lines = list(_iter_lines(path))
    for idx, (lineno, text, complete) in enumerate(lines):
        if not text.strip():
            continue
        is_last = idx == len(lines) - 1
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            if is_last:
                continue  # a write cut short by a kill
            raise DataFormatError(f"{path}:{lineno}: not valid JSON (the file was edited or corrupted)") from None
        if not complete:
            continue
        if not isinstance(row, dict) or "id" not in row:
            raise DataFormatError(f"{path}:{lineno}: a result row needs an 'id'")
        latest[str(row["id"])] = row
    return latest


def repair_tail(path: Path) -> int:
    """Cut a partial last line (left by a kill mid-write) so appends start on a fresh line. Returns bytes cut."""
    if not path.is_file():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return 0
        # find the last newline
        pos = size
        chunk = 1 << 16
        keep = 0
        while pos > 0:
            start = max(0, pos - chunk)
            fh.seek(start)
            block = fh.read(pos - start)
            j = block.rfind(b"\n")
            if j >= 0:
                keep = start + j + 1
                break
            pos = start
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
        return size - keep


def append_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Append rows as one write, then flush + fsync: a batch is on disk before the next one starts."""
    if not rows:
        return
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    with path.open("ab") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())


def row_failed(row: dict[str, Any]) -> bool:
    return row.get("error") is not None or row.get("metrics", {}).get("genacc") is None


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """An exclusive lock on RUN_DIR: two evals appending to one results.jsonl would interleave rows."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fh = (run_dir / ".lock").open("w")
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(f"{run_dir} is in use by another `s3 eval` (lock held on {run_dir / '.lock'})") from None
        yield
    finally:
        fh.close()


def _get(d: dict[str, Any], dotted: str) -> Any:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def identity_diff(a: dict[str, Any], b: dict[str, Any], keys: Sequence[str] = _IDENTITY_KEYS) -> list[str]:
    """Human-readable differences between two run configs on the given dotted keys."""
    return [f"{k}: {_get(a, k)!r} != {_get(b, k)!r}" for k in keys if _get(a, k) != _get(b, k)]


def check_run_identity(run_dir: Path, config: dict[str, Any]) -> None:
    """Write run.json for a new run, or refuse to resume a run whose identity differs."""
    path = run_dir / RUN_FILE
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise RunDirError(f"{path}: not valid JSON; remove the run dir or fix the file") from None
        diff = identity_diff(old.get("config", {}), config)
        if diff:
            raise RunDirError(
                f"{run_dir} holds a different run; refusing to mix results ({'; '.join(diff)}). Use a new --out."
            )
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"config": config, "created": time.time()}, indent=2), encoding="utf-8")
    tmp.replace(path)


# ----------------------------------------------------------------------------------------------- summary


def support_recall(context_ids: Sequence[str], supporting: Sequence[str]) -> float | None:
    """Fraction of the gold supporting paragraphs that are in the context (None without gold ids).

    >>> support_recall(["a", "b", "c"], ["b", "d"])
    0.5
    """
    gold = set(supporting)
    if not gold:
        return None
    return len(gold & set(context_ids)) / len(gold)


def summarize(
    rows: Sequence[dict[str, Any]],
    config: dict[str, Any],
    n_expected: int | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """summary.json from the final rows: means + bootstrap 95% intervals over SCORED rows only."""
    ok = [r for r in rows if not row_failed(r)]
    failed = [r for r in rows if row_failed(r)]
    metrics = {}
    for key in (*METRIC_KEYS, "judge"):
        vals = [r["metrics"].get(key) for r in ok]
        if key == "judge" and all(v is None for v in vals):
            continue
        metrics[key] = mean_ci(vals, n_resamples=n_resamples, seed=seed)
    rec = [r.get("support_recall") for r in ok]
    if any(v is not None for v in rec) and config.get("method") != "no_retrieval":
        metrics["support_recall"] = mean_ci(rec, n_resamples=n_resamples, seed=seed)
    lat = [float(r.get("latency_s") or 0.0) for r in ok]
    totals = {
        "cost_usd": float(sum(float(r.get("cost_usd") or 0.0) for r in rows)),
        "prompt_tokens": int(sum(int(r.get("prompt_tokens") or 0) for r in rows)),
        "completion_tokens": int(sum(int(r.get("completion_tokens") or 0) for r in rows)),
        "mean_latency_s": (sum(lat) / len(lat)) if lat else None,
        "mean_context_docs": (sum(len(r.get("context_ids") or []) for r in ok) / len(ok)) if ok else None,
    }
    errors: dict[str, int] = {}
    for r in failed:
        kind = str(r.get("error") or "judge failed").split(":", 1)[0]
        errors[kind] = errors.get(kind, 0) + 1
    return {
        "metrics": metrics,
        "n_scored": len(ok),
        "n_failed": len(failed),
        "n_missing": (max(0, n_expected - len(rows)) if n_expected is not None else 0),
        "failed_by_kind": errors,
        "totals": totals,
        "config": config,
    }


def wall_clock(invocations: Path) -> dict[str, Any]:
    """Wall-clock seconds over every invocation of a run, and per row written (what a user waits per question,
    queueing included; per-row `latency_s` counts the time a call waited behind the others of its batch)."""
    secs, rows = 0.0, 0
    if invocations.is_file():
        for inv in read_jsonl_tolerant(invocations):
            secs += float(inv.get("seconds") or 0.0)
            rows += int(inv.get("rows_written") or 0)
    return {"wall_seconds": round(secs, 3), "wall_s_per_question": round(secs / rows, 4) if rows else None}


def read_jsonl_tolerant(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON object line of a log file (a line cut short by a kill is skipped)."""
    out = []
    for _, text, complete in _iter_lines(path):
        if not complete or not text.strip():
            continue
        with contextlib.suppress(json.JSONDecodeError):
            obj = json.loads(text)
            if isinstance(obj, dict):
                out.append(obj)
    return out


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(path)


# ----------------------------------------------------------------------------------------------- the loop


def _make_row(
    q: QAExample, ctx: ContextOut, pred: Prediction | None, sc: Scores | None, attempt: int, has_contexts: bool = True
) -> dict[str, Any]:
    ids = [d.id for d in ctx.documents]
    error = ctx.error or (pred.error if pred is not None else None) or (sc.error if sc is not None else None)
    if pred is not None and pred.error is None and pred.text is None:
        error = "generator: no answer text"
    metrics: dict[str, Any] = {k: None for k in (*METRIC_KEYS, "judge")}
    if sc is not None and error is None:
        metrics = {"genacc": sc.genacc, "span": sc.span, "em": sc.em, "f1": sc.f1, "judge": sc.judge}
    elif sc is not None:  # keep what was measured (e.g. em/f1 when only the judge failed), genacc stays missing
        metrics = {"genacc": None, "span": sc.span, "em": sc.em, "f1": sc.f1, "judge": sc.judge}
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
        "cost_usd": (pred.cost_usd if pred is not None else 0.0) + (sc.cost_usd if sc is not None else 0.0),
        "cached": bool(pred.cached) if pred is not None else False,
        "turns": ctx.turns,
        "note": pred.note if pred is not None else None,
        "error": error,
        "attempt": attempt,
        "ts": round(time.time(), 3),
    }


async def _run_batch(comp: Components, batch: list[QAExample], attempts: dict[str, int]) -> list[dict[str, Any]]:
    ctxs = await comp.contexts(batch)
    if len(ctxs) != len(batch):
        raise S3Error(f"context source returned {len(ctxs)} results for {len(batch)} questions")
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
    answered = [i for i, p in enumerate(preds) if p is not None and p.error is None and p.text is not None]
    if answered:
        texts = [preds[i].text or "" for i in answered]  # type: ignore[union-attr]
        got_s = await comp.score([batch[i] for i in answered], texts)
        for i, s in zip(answered, got_s, strict=True):
            scores[i] = s
    return [
        _make_row(q, c, p, s, attempts.get(q.id, 0) + 1, comp.has_contexts)
        for q, c, p, s in zip(batch, ctxs, preds, scores, strict=True)
    ]


def _progress(total: int, initial: int, enabled: bool, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc=desc, unit="q", file=sys.stderr, leave=False)


async def run_eval_async(
    opts: EvalOptions, dataset: Dataset, comp: Components, config: dict[str, Any], n_resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Run (or resume) an evaluation into opts.out; returns the summary dict (also written to summary.json)."""
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
        stats0 = dict(comp.cache_stats()) if comp.cache_stats else {}
        t0 = time.perf_counter()
        written = 0
        bar = _progress(len(wanted), len(wanted) - len(todo), opts.progress, f"{opts.method}")
        try:
            for start in range(0, len(todo), opts.batch_size):
                batch = todo[start : start + opts.batch_size]
                rows = await _run_batch(comp, batch, attempts)
                append_rows(results, rows)
                written += len(rows)
                bar.update(len(rows))
        finally:
            bar.close()
            if comp.close is not None:
                await comp.close()
        stats1 = dict(comp.cache_stats()) if comp.cache_stats else {}
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
        summary["invocation"] = invocation
        append_rows(run_dir / INVOCATIONS_FILE, [invocation])
        summary["totals"].update(wall_clock(run_dir / INVOCATIONS_FILE))
        write_json_atomic(run_dir / SUMMARY_FILE, summary)
        return summary


def run_eval(opts: EvalOptions, dataset: Dataset, comp: Components, config: dict[str, Any],
             n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    return asyncio.run(run_eval_async(opts, dataset, comp, config, n_resamples=n_resamples, seed=seed))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------------------- real components


def scorer_from_metrics(judge: Any | None, judge_only: bool) -> ScoreFn:
    """A ScoreFn over eval.metrics: span / EM / F1, and GenAcc = span OR judge (the judge only asked when the span
    check fails; judge-only for multiple-choice sets or items flagged `metadata.multiple_choice`)."""
    from eval import metrics as M

    def _score_sync(qs: list[QAExample], answers: list[str]) -> list[Scores]:
        golds = [q.golden_answers for q in qs]
        only = [judge_only or bool(q.metadata.get("multiple_choice")) for q in qs]
        span = M.span_check(answers, golds)
        em = M.exact_match(answers, golds)
        f1 = M.f1(answers, golds)
        if judge is None and any(only):
            raise ConfigError("judge-only scoring (multiple-choice questions) needs a judge: set eval.use_judge = true")
        acc = M.genacc(answers, golds, judge, judge_only=only)
        out = []
        for i in range(len(qs)):
            asked = judge is not None and (only[i] or span[i] == 0.0)
            err = None
            if acc[i] is None:
                err = "judge: no verdict (call failed)" if asked and span[i] is not None else "unscorable: no usable gold answer"
            out.append(Scores(genacc=acc[i], span=span[i], em=em[i], f1=f1[i], judge=acc[i] if asked else None, error=err))
        return out

    async def score(qs: list[QAExample], answers: list[str]) -> list[Scores]:
        # metrics and the (sync) judge run off the event loop: the judge may drive its own loop
        return await asyncio.to_thread(_score_sync, qs, answers)

    return score


def _answer_to_prediction(a: Any) -> Prediction:
    """Map a generator_adapters Answer (or any object with text/error/usage/latency/cost) onto a Prediction."""
    err = getattr(a, "error", None)
    usage = getattr(a, "usage", None) or {}
    if not isinstance(usage, dict):
        usage = {k: getattr(usage, k, 0) for k in ("prompt_tokens", "completion_tokens")}
    return Prediction(
        text=None if err is not None else getattr(a, "text", None),
        error=None if err is None else str(err),
        latency_s=float(getattr(a, "latency_s", None) or getattr(a, "latency", None) or 0.0),
        prompt_tokens=int(usage.get("prompt_tokens") or getattr(a, "prompt_tokens", 0) or 0),
        completion_tokens=int(usage.get("completion_tokens") or getattr(a, "completion_tokens", 0) or 0),
        cost_usd=float(getattr(a, "cost_usd", None) or getattr(a, "cost", None) or 0.0),
        cached=bool(getattr(a, "cached", False)),
    )


def _policy_error(result: Any) -> str | None:
    for s in getattr(result, "steps", []):
        reason = s.invalid_reason or ""
        if reason.startswith("policy call failed"):
            return f"searcher: {reason}"
    return None


def agent_contexts(agent: Any, own_answer: bool) -> ContextFn:
    """A ContextFn running an S3Searcher / SearchR1Agent (sync, batched) off the event loop."""

    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        t0 = time.perf_counter()
        results = await asyncio.to_thread(agent.search, qs)
        per_q = (time.perf_counter() - t0) / max(len(qs), 1)
        out = []
        for r in results:
            err = _policy_error(r)
            ans = None
            if own_answer and err is None:
                toks = sum(s.prompt_tokens for s in r.steps), sum(s.completion_tokens for s in r.steps)
                ans = Prediction(text=r.answer if r.answer is not None else "", latency_s=0.0,
                                 prompt_tokens=toks[0], completion_tokens=toks[1],
                                 note=None if r.answer is not None else "agent: no <answer> within the turn budget")
            out.append(ContextOut(documents=list(r.documents), answer=ans, error=err,
                                  latency_s=r.seconds or per_q, turns=r.turns))
        return out

    return contexts


def retriever_contexts(retriever: Any, k: int) -> ContextFn:
    """Naive RAG: top-k of the question itself, one batched retrieval call per batch."""
    from s3core.errors import RetrievalError

    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        t0 = time.perf_counter()
        try:
            docs = await asyncio.to_thread(retriever.search, [q.question for q in qs], k)
        except RetrievalError as e:  # e.g. a remote retriever down after its retries: rows are missing, retried
            return [ContextOut(error=f"retrieval: {e}") for _ in qs]
        per_q = (time.perf_counter() - t0) / max(len(qs), 1)
        return [ContextOut(documents=list(d), latency_s=per_q) for d in docs]

    return contexts


def fixed_contexts(docs_by_q: dict[str, list[Document]]) -> ContextFn:
    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        return [ContextOut(documents=docs_by_q[q.id]) for q in qs]

    return contexts


async def _no_contexts(qs: list[QAExample]) -> list[ContextOut]:
    return [ContextOut() for _ in qs]


def _local_gguf_sha256(model: str, api_base: str | None = None) -> str | None:
    """sha256 of the GGUF behind an offline model string (s3core.llm_local.model_fingerprint; hashed from the file
    when the registry has no pinned value yet)."""
    from s3core import llm_local, local_models

    info = llm_local.model_fingerprint(model, api_base)
    if "gguf_sha256" not in info:
        return None
    if info["gguf_sha256"]:
        return str(info["gguf_sha256"])
    name = model.partition("/")[2]
    return file_sha256(local_models.gguf_path(name))


def _llm_fingerprint(obj: Any, llm_cfg: Any) -> dict[str, Any]:
    fp: dict[str, Any] = {}
    f = getattr(obj, "fingerprint", None)
    if callable(f):
        fp.update(f())
    elif isinstance(f, dict):
        fp.update(f)
    if "prompt_hash" in fp:
        fp["prompt_sha256"] = fp.pop("prompt_hash")
    fp.setdefault("model", llm_cfg.model)
    fp.setdefault("api_base", llm_cfg.api_base)
    fp.setdefault("temperature", llm_cfg.temperature)
    fp.setdefault("max_tokens", llm_cfg.max_tokens)
    for key in ("temperature", "max_tokens"):  # top level, for run identity checks
        fp[key] = (fp.get("decoding") or {}).get(key, fp[key])
    fp.setdefault("prompt", llm_cfg.prompt if len(llm_cfg.prompt) < 40 else "custom")
    if "prompt_sha256" not in fp:
        template = getattr(obj, "prompt_template", None) or llm_cfg.prompt
        fp["prompt_sha256"] = sha256_text(str(template))
    if not fp.get("gguf_sha256"):
        fp["gguf_sha256"] = _local_gguf_sha256(str(fp["model"]), fp.get("api_base"))
    return fp


def build_run(cfg: Any, opts: EvalOptions) -> tuple[Dataset, Components, dict[str, Any]]:
    """Assemble the real pieces for `s3 eval` from the config: dataset, retriever, searcher, generator, judge."""
    dataset = load_dataset(opts.dataset, opts.limit)
    method = opts.method
    qids = [q.id for q in dataset.questions]
    index_dir = opts.index or cfg.resolve(cfg.retriever.index)
    needs_index = method in ("naive_rag", "search_r1", "search_r1_ret") or (method == "searcher" and opts.contexts is None)
    if needs_index and index_dir is None:
        raise ConfigError(f"--method {method} needs a retrieval index: pass --index DIR or set retriever.index")
    retriever = None
    if index_dir is not None and (needs_index or "index" in opts.given):
        from searcher.retrieval import load_retriever

        retriever = load_retriever(cfg.retriever, index_dir)

    config: dict[str, Any] = {
        "dataset": {"name": dataset.name, "format": dataset.manifest.get("format"), "dir": str(dataset.dir),
                    "questions_sha256": dataset.questions_sha256,
                    "n_questions": len(dataset.questions), "limit": opts.limit},
        "method": method,
        "batch_size": opts.batch_size,
    }
    if retriever is not None:
        config["retriever"] = _retriever_fingerprint(cfg, retriever, index_dir, dataset)

    contexts: ContextFn
    if method == "no_retrieval":
        contexts = _no_contexts
    elif method == "naive_rag":
        contexts = retriever_contexts(retriever, cfg.retriever.k)
    elif method == "searcher" and opts.contexts is not None:
        raw = read_contexts_file(opts.contexts, qids)
        wanted_ids = {str(d["id"]) for docs in raw.values() for d in docs}
        getter = retriever.get if retriever is not None else None
        if getter is None and dataset.corpus_path is None:
            raise DataFormatError(f"{dataset.dir} has no corpus.jsonl to look context texts up in: pass --index DIR")
        texts = lookup_documents(wanted_ids, dataset.corpus_path if getter is None else None, getter)
        contexts = fixed_contexts({q: [texts[str(d["id"])] for d in docs] for q, docs in raw.items()})
        config["contexts"] = {"file": str(opts.contexts), "sha256": file_sha256(opts.contexts)}
        if "retriever" not in config:
            config["retriever"] = {"backend": "contexts-file", "k": None,
                                   "corpus_sha256": file_sha256(dataset.corpus_path) if dataset.corpus_path else None}
    else:
        from searcher.agent import S3Searcher, SearchR1Agent
        from searcher.policy import load_policy

        policy = load_policy(cfg.searcher)
        cls = SearchR1Agent if method.startswith("search_r1") else S3Searcher
        assert retriever is not None  # needs_index above
        agent = cls(policy, retriever, cfg.searcher, k0=cfg.retriever.k)
        contexts = agent_contexts(agent, own_answer=(method == "search_r1"))
        s = cfg.searcher
        config["searcher"] = {"class": cls.__name__, "policy": s.policy, "model": s.model, "policy_path": s.policy_path,
                              "k": s.k, "max_turns": s.max_turns, "doc_token_budget": s.doc_token_budget,
                              "max_select": s.max_select, "temperature": s.temperature,
                              "gguf_sha256": _local_gguf_sha256(s.model)}
        if method == "search_r1":
            config["generator"] = {"model": f"{s.model} (search_r1 agent)", "prompt_sha256": "search_r1"}

    answer: AnswerFn | None = None
    cache_stats: Callable[[], dict[str, int]] | None = None
    closers: list[Any] = []
    use_judge = cfg.eval.use_judge and cfg.eval.metric in ("genacc", "judge")
    judge_only = dataset.judge_only or cfg.eval.metric == "judge"
    from generator_adapters import Generator, Judge

    models = [opts.generator or cfg.generator.model, cfg.judge.model, cfg.searcher.model]
    if any(m.startswith("local/") for m in models):
        from s3core.llm_local import register_local_provider

        register_local_provider()  # idempotent: offline `local/<name>` models reachable through litellm

    if method != "search_r1":
        gen_cfg = cfg.generator_resolved
        if opts.generator:
            gen_cfg = gen_cfg.model_copy(update={"model": opts.generator})
        generator = Generator(gen_cfg)
        config["generator"] = _llm_fingerprint(generator, gen_cfg)

        no_context = method == "no_retrieval"

        async def answer_fn(qs: list[QAExample], ctxs: list[list[Document]]) -> list[Prediction]:
            # contexts=None selects the generator's no-context prompt (direct inference)
            got = await generator.answer([q.question for q in qs], None if no_context else ctxs)
            return [_answer_to_prediction(a) for a in got]

        answer = answer_fn
        cache_stats = _stats_fn(generator)
        closers.append(generator)
    judge = None
    if use_judge or judge_only:
        judge_cfg = cfg.judge_resolved
        judge = Judge(judge_cfg)
        config["judge"] = {**_llm_fingerprint(judge, judge_cfg),
                           "mode": "judge_only" if judge_only else "span_or_judge"}
        closers.append(judge)
    else:
        config["judge"] = {"model": None, "mode": "span_only"}
    config["eval"] = {"metric": cfg.eval.metric, "use_judge": cfg.eval.use_judge,
                      "bootstrap_samples": cfg.eval.bootstrap_samples, "seed": cfg.eval.seed}

    async def close() -> None:
        for c in closers:
            fn = getattr(c, "aclose", None) or getattr(c, "close", None)
            if fn is None:
                continue
            res = fn()
            if asyncio.iscoroutine(res):
                await res

    comp = Components(contexts=contexts, answer=answer, score=scorer_from_metrics(judge, judge_only),
                      cache_stats=cache_stats, close=close, has_contexts=method != "no_retrieval")
    return dataset, comp, config


def _stats_fn(obj: Any) -> Callable[[], dict[str, int]] | None:
    f = getattr(obj, "cache_stats", None)
    if f is None:
        cache = getattr(obj, "cache", None)
        f = getattr(cache, "stats", None)
    if not callable(f):
        return None

    def stats() -> dict[str, int]:
        raw = f() or {}
        return {k: int(v) for k, v in raw.items() if k in ("hits", "misses", "writes", "calls") and isinstance(v, int)}

    return stats


def _retriever_fingerprint(cfg: Any, retriever: Any, index_dir: Path | None, dataset: Dataset) -> dict[str, Any]:
    fp: dict[str, Any] = {"backend": getattr(retriever, "backend", cfg.retriever.backend), "k": cfg.retriever.k,
                          "index": str(index_dir) if index_dir else None}
    corpus_sha = None
    if index_dir is not None:
        with contextlib.suppress(Exception):
            from searcher.retrieval.store import read_manifest

            m = read_manifest(index_dir)
            corpus_sha = m.corpus.sha256 if m.corpus else None
            fp["index_params"] = m.params
            fp["doc_count"] = m.doc_count
    if corpus_sha is None and dataset.corpus_path is not None:
        corpus_sha = file_sha256(dataset.corpus_path)
    fp["corpus_sha256"] = corpus_sha
    return fp
