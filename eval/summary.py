"""summary.json of an evaluation run, from its final rows: what `s3 eval` prints and the leaderboard reads.

    {"metrics": {"genacc": {"mean", "ci95", "n"}, "span", "em", "f1", ["judge"], ["support_recall"]},
     "n_scored", "n_failed", "n_missing", "failed_by_kind", "totals", "config", "invocation"}

Means and bootstrap 95% intervals are over SCORED rows only: a failed row is counted (by the kind of its error),
never scored as 0. `totals` holds cost and tokens over every row, mean latency and context size over scored rows,
and the wall-clock time over every invocation of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.accuracy import METRIC_KEYS
from eval.rundir import row_failed
from eval.stats import mean_ci
from s3core.io import read_log_jsonl


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
        # the cause in words (results.jsonl has every row's): the verdict line names it, not only its kind
        "first_error": next((" ".join(str(r["error"]).split())[:300] for r in failed if r.get("error")), None),
        "totals": totals,
        "config": config,
    }


def verdict(summary: dict[str, Any], max_failed_fraction: float) -> str | None:
    """None when a run is good enough to exit 0; else the one line that says why not (nothing scored, or more than
    `max_failed_fraction` of the rows failed), with the failures by kind and how to resume."""
    scored, failed = int(summary.get("n_scored", 0)), int(summary.get("n_failed", 0))
    total = scored + failed + int(summary.get("n_missing", 0))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted((summary.get("failed_by_kind") or {}).items(), key=lambda x: -x[1]))
    why = f" ({kinds})" if kinds else ""
    if summary.get("first_error"):
        why += f"; the first: {summary['first_error']}"
    resume = "fix the cause and run the same command again to retry the failed rows"
    if scored == 0:
        return f"nothing was scored: {failed} of {total} rows failed{why}; {resume}"
    if total and failed / total > max_failed_fraction:
        return (f"{failed} of {total} rows failed{why}, more than eval.max_failed_fraction={max_failed_fraction:g}; "
                f"{resume}")
    return None


def wall_clock(invocations: Path) -> dict[str, Any]:
    """Wall-clock seconds over every invocation of a run, and per row written (what a user waits per question,
    queueing included; per-row `latency_s` counts the time a call waited behind the others of its batch)."""
    secs, rows = 0.0, 0
    for inv in read_log_jsonl(invocations):
        secs += float(inv.get("seconds") or 0.0)
        rows += int(inv.get("rows_written") or 0)
    return {"wall_seconds": round(secs, 3), "wall_s_per_question": round(secs / rows, 4) if rows else None}


SPEND_KEYS = ("paid_calls", "prompt_tokens", "completion_tokens", "cost_usd", "unknown_cost_calls", "cache_hits",
              "saved_usd")


def spend_totals(invocations: Path, rows: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the run spent on paid LLM calls (generator and judge) over every invocation, from each invocation's
    `spend` record: paid calls, tokens, dollars, cache hits and the dollars they saved, and with the final `rows` the
    cost per correct answer (dollars / the sum of GenAcc over scored rows). `cost_usd` is None when a paid answer's
    price was unknown (never 0). Runs written before spend was recorded fall back to the rows' own figures."""
    totals = dict.fromkeys(SPEND_KEYS, 0.0)
    recorded = False
    for inv in read_log_jsonl(invocations):
        spend = inv.get("spend")
        if not isinstance(spend, dict):
            continue
        recorded = True
        for k in SPEND_KEYS:
            totals[k] += float(spend.get(k) or 0.0)
    out: dict[str, Any] = {}
    if recorded:
        out = {k: (round(v) if k not in ("cost_usd", "saved_usd") else round(v, 9)) for k, v in totals.items()}
        if totals["unknown_cost_calls"] > 0:
            out["cost_usd"] = None
    if rows is not None:
        cost = out.get("cost_usd") if recorded else float(sum(float(r.get("cost_usd") or 0.0) for r in rows))
        correct = sum(float(r["metrics"].get("genacc") or 0.0) for r in rows if not row_failed(r))
        out["correct"] = round(correct, 3)
        out["cost_per_correct_usd"] = (round(cost / correct, 9) if cost is not None and correct > 0 else None)
    return out
