"""Cost accounting and budgets against a priced paid API: the loopback OpenAI-compatible server
(generator_adapters/testing.py) answering with varied lengths and reporting token usage the way OpenAI does
(tiktoken counts, completions cut at max_tokens), reached through litellm with prices from the config.

- `s3 eval`: totals equal the server's own token counts times the prices; a budget stops the run midway (exit 3,
  "budget reached", spend <= budget, the question it stopped at could not fit); the same command with a higher
  budget resumes and finishes; the dry run is within 10% of the real spend (and never below it), for training too.
- `s3 train`: a real (tiny) training run whose reward calls the priced API stops before the step that could pass
  its budget, with its checkpoint; resumed with a higher budget it finishes, the spend carried over.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from generator_adapters.testing import FakeLLMServer
from s3.cli import main as s3_main

pytestmark = pytest.mark.integration

IN_PRICE, OUT_PRICE = 2.5, 10.0  # dollars per million tokens (gpt-4o's list price)


@pytest.fixture(scope="module")
def priced_api():  # type: ignore[no-untyped-def]
    with FakeLLMServer(reply="varied", usage="tiktoken") as srv:
        yield srv


def priced(srv: FakeLLMServer, section: str) -> list[str]:
    return ["--set", f"{section}.model=openai/fake", "--set", f"{section}.api_base={srv.api_base}",
            "--set", f"{section}.input_cost_per_mtok={IN_PRICE}", "--set", f"{section}.output_cost_per_mtok={OUT_PRICE}",
            "--set", f"{section}.cache_path=none"]


@pytest.fixture(scope="module")
def tiny(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """10 HotpotQA dev questions with their 100 paragraphs, and a bm25 index over them."""
    from dataprep import prepare
    from searcher.retrieval import build_index

    root = tmp_path_factory.mktemp("tiny")
    raw = root / "hotpot10.jsonl"
    lines = (shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl").read_text(encoding="utf-8").splitlines()
    raw.write_text("\n".join(lines[:10]) + "\n", encoding="utf-8")
    prepare("hotpotqa", [raw], root / "data")
    return root / "data", build_index(root / "data" / "corpus.jsonl", "bm25", root / "index")


def eval_args(srv: FakeLLMServer, ds: Path, index: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--dataset", str(ds), "--method", "naive_rag", "--index", str(index), "--batch-size", "4",
            "--no-progress", "--out", str(out), "--set", "retriever.k=2", "--set", "generator.max_tokens=12",
            *priced(srv, "generator"), *priced(srv, "judge"), *extra]


def test_a_dry_run_of_a_live_searcher_writes_nothing(priced_api: FakeLLMServer, tiny: tuple[Path, Path],
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--dry-run` of a method whose searcher runs live (the title-following script here) prices the run and writes
    nothing, not even the searcher's trajectories (it used to fail on the run folder's missing contexts.jsonl)."""
    ds, index = tiny
    args = eval_args(priced_api, ds, index, tmp_path / "tf", "--dry-run", "--limit", "2")
    args[args.index("naive_rag")] = "title_following"
    assert s3_main(args) == 0
    assert "dry run: 2 questions to run" in capsys.readouterr().out and not (tmp_path / "tf").exists()


def test_eval_totals_budget_stop_resume_and_dry_run(priced_api: FakeLLMServer, tiny: tuple[Path, Path],
                                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = priced_api
    ds, index = tiny
    # the whole run, unbudgeted: its totals are the server's token counts times the prices, to the last digit
    full = tmp_path / "full"
    before = dict(srv.usage_totals)
    assert s3_main(eval_args(srv, ds, index, full, "--dry-run")) == 0
    dry = capsys.readouterr().out
    assert srv.usage_totals == before, "the dry run called the API"
    projected = float(dry.split("projected at most $")[1].split()[0])
    assert s3_main(eval_args(srv, ds, index, full)) == 0
    pt = srv.usage_totals["prompt_tokens"] - before.get("prompt_tokens", 0)
    ct = srv.usage_totals["completion_tokens"] - before.get("completion_tokens", 0)
    totals = json.loads((full / "summary.json").read_text())["totals"]
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (pt, ct)
    assert totals["cost_usd"] == pytest.approx((pt * IN_PRICE + ct * OUT_PRICE) / 1e6, rel=1e-9, abs=1e-12)
    assert totals["paid_calls"] >= 10 and totals["cache_hits"] == 0
    real = totals["cost_usd"]
    assert real <= projected <= 1.10 * real, (projected, real)  # the dry run: an upper bound, within 10%

    # the same run with a budget of ~45% of it: stops midway, never above the budget, rows whole
    run = tmp_path / "budgeted"
    budget = round(0.45 * real, 8)
    assert s3_main(eval_args(srv, ds, index, run, "--max-cost-usd", str(budget))) == 3
    err = capsys.readouterr().err
    assert "budget reached" in err
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert 0 < len(rows) < 10 and summary["n_missing"] == 10 - len(rows)
    spent = summary["totals"]["cost_usd"]
    assert spent <= budget
    stop = summary["stopped"]
    assert stop["reason"] == "budget reached" and stop["budget_usd"] == budget
    # it stopped at the right question: the next one's bound did not fit what was left
    assert "question" in stop["message"]

    # resumed with a higher budget: it finishes, the spend carried over, rows from both invocations
    assert s3_main(eval_args(srv, ds, index, run, "--max-cost-usd", str(round(1.5 * real, 8)))) == 0
    summary2 = json.loads((run / "summary.json").read_text())
    assert summary2["n_scored"] + summary2["n_failed"] == 10 and "stopped" not in summary2
    assert summary2["totals"]["cost_usd"] == pytest.approx(real, rel=1e-9)  # same questions, same answers
    assert summary2["totals"]["cost_per_correct_usd"] is None or summary2["totals"]["cost_per_correct_usd"] > 0

    # the leaderboard carries the cost columns
    assert s3_main(["leaderboard", str(full), "--out", str(tmp_path / "lb")]) == 0
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "Cost ($)" in md and "$ / correct" in md and "Cache saved ($)" in md
    assert f"{real:.4f}" in md


def test_unknown_price_refuses_a_budgeted_eval(priced_api: FakeLLMServer, tiny: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    ds, index = tiny
    args = eval_args(priced_api, ds, index, tmp_path / "r", "--max-cost-usd", "1",
                     "--set", "judge.input_cost_per_mtok=none", "--set", "judge.output_cost_per_mtok=none")
    assert s3_main(args) == 2
    err = capsys.readouterr().err
    assert "judge.input_cost_per_mtok and judge.output_cost_per_mtok" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "results.jsonl").exists()


# ----------------------------------------------------------------------------------------------- training

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "smoke.toml"


def train_cfg(srv: FakeLLMServer, run: Path, budget: float | None, steps: int = 2) -> Any:
    from s3.config import load_config

    sets = [
        "training.data.max_questions=4", "training.rollout.batch_size=1", "training.rollout.group_size=2", f"training.total_steps={steps}",
        "searcher.max_new_tokens=16", "searcher.doc_token_budget=24", f"training.output_dir={run}",
        f"training.data.dir={run.parent / 'data'}",
        "generator.model=openai/fake", f"generator.api_base={srv.api_base}", "generator.cache_path=none",
        f"generator.input_cost_per_mtok={IN_PRICE}", f"generator.output_cost_per_mtok={OUT_PRICE}",
        "generator.max_tokens=12",
    ]
    if budget is not None:
        sets.append(f"training.budget_usd={budget}")
    return load_config(SMOKE, sets)


def test_training_stops_at_its_budget_and_resumes(priced_api: FakeLLMServer, tmp_path: Path) -> None:
    """Step 1 runs; with the budget then set to 1.5x what it cost, step 2's bound does not fit: the run stops there
    (no call made) with step 1's checkpoint; a new trainer with a higher budget resumes at step 1 and finishes."""
    from training.report.dryrun import dry_run
    from training.run.trainer import make_trainer
    from training.rundir import read_metrics

    srv, run = priced_api, tmp_path / "run"
    t = make_trainer(train_cfg(srv, run, 10.0), log=lambda s: None)
    d = dry_run(t.parts, t.step)  # nothing paid for it
    assert d["steps"] == 2 and d["reward_calls"] == 4 and d["spent_usd"] == 0 and d["projected_usd"] > 0
    calls0, tokens0 = srv.stats().get("answered", 0), dict(srv.usage_totals)
    assert t.train(max_steps=1)["stopped"] is None
    [row] = read_metrics(run)
    step1 = row["cost/usd_step"]
    assert step1 > 0 and row["cost/usd_total"] == step1 == pytest.approx(row["reward/cost_usd"])
    # exact: the server's own token counts for step 1 (a group's identical prompts are asked once), at the prices
    calls1 = srv.stats()["answered"]
    pt = srv.usage_totals["prompt_tokens"] - tokens0.get("prompt_tokens", 0)
    ct = srv.usage_totals["completion_tokens"] - tokens0.get("completion_tokens", 0)
    assert calls1 > calls0 and step1 == pytest.approx((pt * IN_PRICE + ct * OUT_PRICE) / 1e6, rel=1e-9)
    # the dry run priced step 1's own rollouts (its RNG restored after): an upper estimate within 10% of the step
    assert step1 <= d["per_step_usd"] <= 1.10 * step1, (d["per_step_usd"], step1)
    budget = round(1.5 * step1, 9)
    t.executor.budget.limit_usd = budget
    out = t.train()
    t.close()
    assert out["stopped"] is not None and "budget reached: step 2" in out["stopped"] and out["steps"] == 1
    assert srv.stats()["answered"] == calls1, "the refused step made a call"
    assert (run / "checkpoints" / "latest").read_text().strip().endswith("000001")
    assert [r["step"] for r in read_metrics(run)] == [1] and read_metrics(run)[-1]["cost/usd_total"] <= budget

    # resumed with a higher budget: from the checkpoint to the end, the spend carried over
    t = make_trainer(train_cfg(srv, run, 10 * budget), log=lambda s: None)
    assert t.step == 1
    out = t.train()
    t.close()
    assert out["stopped"] is None and out["steps"] == 2
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["cost/usd_total"] == pytest.approx(step1 + rows[1]["cost/usd_step"])
    assert rows[1]["cost/usd_total"] <= 10 * budget


def test_prepare_training_dry_run_budget_stop_and_resume(priced_api: FakeLLMServer, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`s3 prepare-training`: the dry run projects the naive-RAG baseline's paid calls without one (within 10% of
    what they then cost, never below); a cap of ~half stops between batches (exit 3, the cache kept, never above the
    cap); the same command with a higher cap finishes from there, the spend carried over (data/spend.json)."""
    srv, data = priced_api, tmp_path / "data"
    args = ["prepare-training", "--config", str(SMOKE), "--set", "training.data.max_questions=6",
            "--set", "training.data.baseline_batch=1", "--set", f"training.data.dir={data}",
            "--set", "generator.max_tokens=12", *priced(srv, "generator")]
    before = dict(srv.usage_totals)
    assert s3_main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert srv.usage_totals == before, "the dry run called the API"
    projected = float(out.split("projected at most $")[1].split()[0])
    assert projected > 0 and not (data / "baseline.jsonl").is_file()

    cap = round(0.5 * projected, 9)
    assert s3_main([*args, "--max-cost-usd", str(cap)]) == 3
    assert "budget reached" in capsys.readouterr().err
    spent = json.loads((data / "spend.json").read_text())["spent_usd"]
    done = len((data / "baseline.jsonl").read_text().splitlines())
    assert 0 < spent <= cap and done > 0

    assert s3_main([*args, "--max-cost-usd", str(10 * projected)]) == 0
    real = json.loads((data / "spend.json").read_text())["spent_usd"]
    pt = srv.usage_totals["prompt_tokens"] - before.get("prompt_tokens", 0)
    ct = srv.usage_totals["completion_tokens"] - before.get("completion_tokens", 0)
    assert real == pytest.approx((pt * IN_PRICE + ct * OUT_PRICE) / 1e6, rel=1e-9)  # the server's own counts
    assert real <= projected <= 1.10 * real, (projected, real)
    asked = json.loads((data / "manifest.json").read_text())["counts"]["after_drop_yes_no"]
    assert len((data / "baseline.jsonl").read_text().splitlines()) == asked  # each question once over both runs
