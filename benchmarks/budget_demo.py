"""A training run and an evaluation against a priced paid API, each stopped midway by its budget, then resumed.

    flock /tmp/s3-cpu.lock .venv/bin/python benchmarks/budget_demo.py [--questions 20] [--steps 4]

The API is the loopback OpenAI-compatible server (generator_adapters/testing.py: answers of varied lengths, token
usage reported as OpenAI counts it, completions cut at max_tokens) reached through litellm like any provider, priced
in the config at gpt-4o's list price ($2.50 / $10 per million tokens): a real HTTP API whose bill is known exactly.

1. `s3 eval` (naive RAG, HotpotQA dev, bm25 over the questions' paragraphs, generator + judge on the API): the dry run,
   the unbudgeted run (its spend = the server's token counts x the prices), then a run with ~40% of that as its
   budget (stops, exit 3), resumed with a higher budget; and the leaderboard of the two finished runs.
2. `s3 train` (the smoke recipe: SmolLM2-135M searcher, GRPO, the generator reward on the API): the dry run, one
   step, then a budget of 2.5x that step's cost (the run stops before the step whose bound would pass it, with a
   checkpoint), resumed with a higher budget to the end.

Writes benchmarks/results/budget/{README.md,results.json,leaderboard.md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "benchmarks" / "results" / "budget"
IN_PRICE, OUT_PRICE = 2.5, 10.0


def priced(api: str, section: str) -> list[str]:
    return ["--set", f"{section}.model=openai/fake", "--set", f"{section}.api_base={api}",
            "--set", f"{section}.input_cost_per_mtok={IN_PRICE}", "--set", f"{section}.output_cost_per_mtok={OUT_PRICE}",
            "--set", f"{section}.cache_path=none"]


def s3(args: list[str]) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "s3.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1800)
    return p.returncode, p.stdout, p.stderr


def last_line(text: str, needle: str) -> str:
    return next((ln for ln in reversed(text.splitlines()) if needle in ln), "")


def evaluation(api: str, srv: Any, tmp: Path, n: int) -> dict[str, Any]:
    from dataprep import prepare
    from searcher.retrieval import build_index

    raw = tmp / "hotpot.jsonl"
    lines = (DATA / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl").read_text(encoding="utf-8").splitlines()
    raw.write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
    data = tmp / f"hotpotqa_dev{n}"  # the dataset's name on the leaderboard (its folder's)
    prepare("hotpotqa", [raw], data)
    index = build_index(data / "corpus.jsonl", "bm25", tmp / "index")

    def args(out: Path, *extra: str) -> list[str]:
        return ["eval", "--dataset", str(data), "--method", "naive_rag", "--index", str(index),
                "--batch-size", "4", "--no-progress", "--out", str(out), "--set", "retriever.k=3",
                "--set", "generator.max_tokens=16", *priced(api, "generator"), *priced(api, "judge"), *extra]

    res: dict[str, Any] = {"questions": n}
    rc, out, err = s3(args(tmp / "full", "--dry-run"))
    res["dry_run_line"] = last_line(out, "dry run")
    res["dry_run_usd"] = float(res["dry_run_line"].split("projected at most $")[1].split()[0])
    before = dict(srv.usage_totals)
    rc, out, err = s3(args(tmp / "full"))
    assert rc == 0, err[-2000:]
    totals = json.loads((tmp / "full" / "summary.json").read_text())["totals"]
    pt = srv.usage_totals["prompt_tokens"] - before.get("prompt_tokens", 0)
    ct = srv.usage_totals["completion_tokens"] - before.get("completion_tokens", 0)
    res["full"] = {"totals": totals, "server_prompt_tokens": pt, "server_completion_tokens": ct,
                   "server_bill_usd": (pt * IN_PRICE + ct * OUT_PRICE) / 1e6}
    real = totals["cost_usd"]
    budget = round(0.4 * real, 6)
    rc, out, err = s3(args(tmp / "budgeted", "--max-cost-usd", str(budget)))
    s = json.loads((tmp / "budgeted" / "summary.json").read_text())
    res["budgeted"] = {"budget_usd": budget, "exit": rc, "message": last_line(err, "budget reached"),
                       "rows_written": s["n_scored"] + s["n_failed"], "spent_usd": s["totals"]["cost_usd"]}
    rc, out, err = s3(args(tmp / "budgeted", "--max-cost-usd", str(round(2 * real, 6))))
    s = json.loads((tmp / "budgeted" / "summary.json").read_text())
    res["resumed"] = {"budget_usd": round(2 * real, 6), "exit": rc, "rows": s["n_scored"] + s["n_failed"],
                      "spent_usd": s["totals"]["cost_usd"], "totals": s["totals"]}
    rc, out, err = s3(["leaderboard", str(tmp / "full"), str(tmp / "budgeted"), "--out", str(tmp / "lb")])
    if rc != 0:  # two runs of one method on one dataset: the leaderboard takes one; show the finished full run
        rc, out, err = s3(["leaderboard", str(tmp / "full"), "--out", str(tmp / "lb")])
    res["leaderboard_md"] = (tmp / "lb" / "leaderboard.md").read_text()
    return res


def training(api: str, tmp: Path, steps: int) -> dict[str, Any]:
    from s3.config import load_config
    from training.report.dryrun import dry_run
    from training.rollouts.budget import BudgetedExecutor
    from training.run.recovery import train_healing
    from training.run.trainer import make_trainer
    from training.rundir import read_metrics

    run = tmp / "train" / "run"

    def cfg(budget: float | None) -> Any:
        sets = ["training.data.max_questions=8", "training.rollout.batch_size=2", "training.rollout.group_size=2",
                f"training.total_steps={steps}", "searcher.max_new_tokens=24", "searcher.doc_token_budget=24",
                f"training.output_dir={run}", f"training.data.dir={tmp / 'train' / 'data'}",
                "generator.model=openai/fake", f"generator.api_base={api}", "generator.cache_path=none",
                f"generator.input_cost_per_mtok={IN_PRICE}", f"generator.output_cost_per_mtok={OUT_PRICE}",
                "generator.max_tokens=16"]
        if budget is not None:
            sets.append(f"training.budget_usd={budget}")
        return load_config(ROOT / "configs" / "smoke.toml", sets)

    res: dict[str, Any] = {"steps": steps}
    t0 = time.perf_counter()
    quiet = lambda s: None  # noqa: E731
    t = make_trainer(cfg(10.0), log=quiet)
    d = dry_run(t.parts, t.step)
    res["dry_run"] = d
    first = [t]  # the dry run's trainer takes the first step; a rollback (train_healing) builds a fresh one
    # as `s3 train` runs it (a recovery trigger rolls back and goes on): what one step really costs, then a budget of
    # 2.5 steps' worth, the run resumed from that step's checkpoint with it
    train_healing(lambda: first.pop() if first else make_trainer(cfg(10.0), log=quiet), max_steps=1)
    budget = round(2.5 * read_metrics(run)[0]["cost/usd_step"], 6)

    def budgeted() -> Any:
        t = make_trainer(cfg(budget), log=quiet)
        assert isinstance(t.executor, BudgetedExecutor)  # training.budget_usd is set
        return t

    out = train_healing(budgeted)
    rows = read_metrics(run)
    res["budgeted"] = {"budget_usd": budget, "stopped": out["stopped"], "stopped_at_step": out["steps"],
                       "spent_usd": rows[-1].get("cost/usd_total") if rows else 0.0,
                       "checkpoint": (run / "checkpoints" / "latest").read_text().strip()}
    resumed: list[int] = []

    def resume() -> Any:
        t = make_trainer(cfg(2 * d["projected_usd"]), log=quiet)
        resumed.append(t.step)
        return t

    out = train_healing(resume)
    resumed_from = resumed[0]
    rows = read_metrics(run)
    res["resumed"] = {"budget_usd": round(2 * d["projected_usd"], 6), "resumed_from_step": resumed_from,
                      "steps": out["steps"], "stopped": out["stopped"], "spent_usd": rows[-1]["cost/usd_total"],
                      "per_step": [{"step": r["step"], "usd": r["cost/usd_step"], "total": r["cost/usd_total"],
                                    "tokens_in": r.get("reward/prompt_tokens"),
                                    "tokens_out": r.get("reward/completion_tokens")} for r in rows]}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    from generator_adapters.testing import FakeLLMServer

    with FakeLLMServer(reply="varied", usage="tiktoken") as srv, tempfile.TemporaryDirectory(prefix="s3-budget-") as t:
        tmp = Path(t)
        ev = evaluation(srv.api_base, srv, tmp, a.questions)
        tr = training(srv.api_base, tmp, a.steps)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps({"eval": ev, "train": tr, "note": a.note}, indent=2, default=str) + "\n")
    (OUT / "leaderboard.md").write_text(ev["leaderboard_md"])
    full, b, r = ev["full"], ev["budgeted"], ev["resumed"]
    tb, trr, td = tr["budgeted"], tr["resumed"], tr["dry_run"]
    md = [
        "# Budgets against a priced API (loopback OpenAI-compatible server, $2.50 / $10 per million tokens)",
        "",
        "`flock $TMPDIR/s3-cpu.lock .venv/bin/python benchmarks/budget_demo.py`" + (f" ({a.note})" if a.note else ""),
        "",
        f"## s3 eval: naive RAG, {ev['questions']} HotpotQA dev questions, generator + judge on the API",
        "",
        f"- unbudgeted: ${full['totals']['cost_usd']:.6f} for {full['totals']['paid_calls']} paid calls "
        f"({full['totals']['prompt_tokens']} tokens in, {full['totals']['completion_tokens']} out); the server's own "
        f"count x the prices: ${full['server_bill_usd']:.6f}",
        f"- dry run before it (no call): ${ev['dry_run_usd']:.6f} = {ev['dry_run_usd'] / full['totals']['cost_usd']:.3f} "
        "x the real spend (completions counted at max_tokens, every answer judged: an upper bound)",
        f"- budget ${b['budget_usd']:.6f}: exit {b['exit']}, {b['rows_written']} of {ev['questions']} rows written, "
        f"spent ${b['spent_usd']:.6f} ({100 * b['spent_usd'] / b['budget_usd']:.1f}% of the budget); "
        f"`{b['message'][:200]}`",
        f"- resumed with ${r['budget_usd']:.6f}: exit {r['exit']}, {r['rows']} rows, total spent ${r['spent_usd']:.6f} "
        f"(the unbudgeted run: ${full['totals']['cost_usd']:.6f})",
        "",
        f"## s3 train: smoke recipe (SmolLM2-135M searcher, GRPO), {tr['steps']} steps of 2 questions x 2 rollouts",
        "",
        f"- dry run: {td['steps']} steps, {td['reward_calls']} reward calls, at most ${td['projected_usd']:.6f}",
        f"- budget ${tb['budget_usd']:.6f}: stopped at step {tb['stopped_at_step']} ({tb['checkpoint']}), spent "
        f"${tb['spent_usd']:.6f}; `{(tb['stopped'] or '')[:200]}`",
        f"- resumed from step {trr['resumed_from_step']} with ${trr['budget_usd']:.6f}: ran to step {trr['steps']}, "
        f"total spent ${trr['spent_usd']:.6f}; dry run / actual = {td['projected_usd'] / trr['spent_usd']:.3f}",
        "",
        "| step | cost/usd_step | cost/usd_total | reward tokens in | out |",
        "|---:|---:|---:|---:|---:|",
        *[f"| {p['step']} | {p['usd']:.6f} | {p['total']:.6f} | {p['tokens_in']:.0f} | {p['tokens_out']:.0f} |"
          for p in trr["per_step"]],
        "",
        "## Leaderboard (the finished runs)",
        "",
        ev["leaderboard_md"],
    ]
    (OUT / "README.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
