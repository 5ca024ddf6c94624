"""The leaderboard's labels and swappable GBR baseline (issue 45): two runs of one method side by side, GBR rows of
every label against `--baseline`, paired-bootstrap intervals over the questions both runs scored, and the table
on the committed zero-training checks (benchmarks/results/transfer3/checks) matching their report."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from eval.leaderboard import LeaderboardError, build_leaderboard, parse_label, write_leaderboard
from eval.stats import paired_diff_ci
from s3.cli import main as s3_main

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "benchmarks" / "results" / "transfer3" / "checks"
GEN = "local/qwen2.5-coder-1.5b-instruct"


def write_run(root: Path, name: str, method: str, scores: dict[str, float | None], *, k: int = 3,
              dataset: str = "data", generator: str = GEN, backend: str = "bm25", em: dict[str, float] | None = None
              ) -> Path:
    """An `s3 eval` run folder in the committed format (benchmarks/results/transfer3/checks/runs/qwen15/*):
    results.jsonl (one row per question id; None = a failed row) and summary.json (means over scored rows)."""
    d = root / name
    d.mkdir(parents=True)
    em = em if em is not None else {q: 0.0 if s is None else s for q, s in scores.items()}
    rows = []
    for i, (q, s) in enumerate(scores.items()):
        failed = s is None
        rows.append({
            "id": q, "question": f"question {q}?", "golden_answers": [f"answer {q}"],
            "context_ids": [f"doc-{q}-{j}" for j in range(k)], "answer": f"reply {q}",
            "metrics": None if failed else {"genacc": s, "span": s, "em": em[q], "f1": em[q], "judge": None},
            "support_recall": 0.5, "latency_s": 1.0, "context_latency_s": 0.0, "generation_latency_s": 1.0,
            "prompt_tokens": 100, "completion_tokens": 3, "cost_usd": 0.0, "cached": False, "turns": None,
            "note": None, "error": {"kind": "generator", "message": "timeout"} if failed else None, "attempt": 1,
            "ts": 1795800720.0 + i,
        })
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    scored = [q for q, s in scores.items() if s is not None]
    genacc = sum(scores[q] or 0.0 for q in scored) / len(scored)
    mean_em = sum(em[q] for q in scored) / len(scored)
    retriever: dict[str, Any] = {"backend": backend, "k": k, "doc_count": 4943, "corpus_sha256": f"corpus-{dataset}"}
    summary = {
        "metrics": {"genacc": {"mean": genacc, "ci95": [genacc - 0.1, genacc + 0.1], "n": len(scored)},
                    "em": {"mean": mean_em, "ci95": [mean_em - 0.1, mean_em + 0.1], "n": len(scored)},
                    "f1": {"mean": mean_em, "ci95": None, "n": len(scored)}},
        "n_scored": len(scored), "n_failed": len(scores) - len(scored), "n_missing": 0, "failed_by_kind": {},
        "totals": {"cost_usd": 0.0, "mean_latency_s": 1.0, "wall_s_per_question": 1.0, "correct": genacc * len(scored),
                   "cache_hits": 0, "saved_usd": 0.0},
        "config": {"dataset": {"name": dataset, "n_questions": len(scores)}, "method": method, "batch_size": 16,
                   "retriever": retriever,
                   "generator": {"model": generator, "prompt": "s3_answer", "prompt_sha256": "da8ebcb77b818cbf"},
                   "eval": {"metric": "genacc", "use_judge": True, "bootstrap_samples": 1000, "seed": 0}},
    }
    (d / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return d


def qs(*vals: float | None) -> dict[str, float | None]:
    return {f"q{i}": v for i, v in enumerate(vals)}


def gbr_rows(board: Any) -> dict[tuple[str, str], Any]:
    return {(r.generator, r.name): r for r in board.rows if r.method == "gbr"}


def test_labels_and_baseline_paired_interval(tmp_path: Path) -> None:
    """top-3 and top-4 naive RAG (same method, different k) and two searchers side by side under their labels; each
    GBR cell = the mean per-question difference over the questions both runs scored (a failed row and a question
    only one run has are left out), with paired_diff_ci's interval over exactly those questions."""
    top3 = write_run(tmp_path, "top3", "naive_rag", qs(1, 0, 0, 1, 0, None, 0, 1))
    top4 = write_run(tmp_path, "top4", "naive_rag", qs(1, 0, 1, 1, 0, 0, 0, 1), k=4)
    trained = write_run(tmp_path, "trained", "searcher", {**qs(1, 1, 1, 1, 0, 1, None, 0), "extra": 1.0})
    untrained = write_run(tmp_path, "untrained", "searcher", qs(1, 0, 0, 1, 0, 1, 0, 1))
    labels = {top3: "naive_rag_top3", top4: "naive_rag_top4", trained: "searcher_trained",
              untrained: "searcher_untrained"}
    board = build_leaderboard([top3, top4, trained, untrained], labels=labels, baseline="naive_rag_top3")
    assert [r.name for r in board.rows if r.method != "gbr"] == [
        "naive_rag_top3", "naive_rag_top4", "searcher_trained", "searcher_untrained"]
    gbr = gbr_rows(board)
    assert sorted(n for _, n in gbr) == ["naive_rag_top4", "searcher_trained", "searcher_untrained"]
    # by hand: trained vs top3 over q0..q7 minus q5 (top3 failed) and q6 (trained failed); "extra" only in trained
    a = {"q0": 1, "q1": 1, "q2": 1, "q3": 1, "q4": 0, "q7": 0}
    b = {"q0": 1, "q1": 0, "q2": 0, "q3": 1, "q4": 0, "q7": 1}
    hand = sum(a[q] - b[q] for q in a) / len(a)  # (0 + 1 + 1 + 0 + 0 - 1) / 6
    row = gbr[(GEN, "searcher_trained")]
    assert row.cells["data"][0] == pytest.approx(hand) == pytest.approx(1 / 6)
    assert row.n_paired == {"data": 6}
    ref = paired_diff_ci({q: float(v) for q, v in a.items()}, {q: float(v) for q, v in b.items()}, seed=0)
    assert row.ci["data"] == ref["ci95"] and row.mean_ci == ref["ci95"]
    lo, hi = row.ci["data"]
    assert lo <= hand <= hi and lo < 0 < hi
    assert row.label == "GBR (searcher_trained - naive_rag_top3)"
    # identical answers on every paired question: difference 0, interval [0, 0]
    same = gbr[(GEN, "searcher_untrained")]
    assert same.cells["data"][0] == 0.0 and same.ci["data"] == [0.0, 0.0] and same.n_paired == {"data": 7}
    md = board.markdown()
    assert "| GBR (searcher_trained - naive_rag_top3) | +16.7 [" in md
    assert "GBR rows: each label - naive_rag_top3, points." in md
    assert "paired-bootstrap 95% over the questions both runs scored (2000 resamples, seed 0" in md


def test_default_gbr_is_searcher_minus_naive_rag_with_an_interval(tmp_path: Path) -> None:
    """No labels, no --baseline: the one GBR row is searcher - naive RAG as before (no_retrieval gets none); with
    results.jsonl it now carries its interval. --baseline naive_rag adds the no_retrieval row."""
    runs = [write_run(tmp_path, "none", "no_retrieval", qs(0, 0, 1, 0)),
            write_run(tmp_path, "rag", "naive_rag", qs(1, 0, 1, 0)),
            write_run(tmp_path, "s3", "searcher", qs(1, 1, 1, 1))]
    board = build_leaderboard(runs)
    assert [r.method for r in board.rows] == ["no_retrieval", "naive_rag", "searcher", "gbr"]
    (row,) = gbr_rows(board).values()
    assert row.label == "GBR (searcher - naive RAG)" and row.cells["data"][0] == pytest.approx(0.5)
    assert row.ci["data"] is not None and board.notes == []
    assert "GBR rows: searcher - naive RAG, points." in board.markdown()
    explicit = build_leaderboard(runs, baseline="naive_rag")
    assert sorted(n for _, n in gbr_rows(explicit)) == ["no_retrieval", "searcher"]
    assert gbr_rows(explicit)[(GEN, "no_retrieval")].cells["data"][0] == pytest.approx(-0.25)


def test_mean_interval_only_when_datasets_pair_equally(tmp_path: Path) -> None:
    """Mean column = mean of the datasets' differences; its interval pools the paired questions, given only when
    every dataset pairs the same number (then the pooled mean is that mean)."""
    def board(n_second: int) -> Any:
        root = tmp_path / str(n_second)
        runs = [write_run(root, "rag-a", "naive_rag", qs(0, 0, 1, 1)),
                write_run(root, "s3-a", "searcher", qs(1, 0, 1, 1)),
                write_run(root, "rag-b", "naive_rag", qs(*[0.0] * n_second), dataset="other"),
                write_run(root, "s3-b", "searcher", qs(*[1.0] * n_second), dataset="other")]
        return build_leaderboard(runs)

    (eq,) = gbr_rows(board(4)).values()
    assert eq.mean[0] == pytest.approx((0.25 + 1.0) / 2) and eq.n_paired == {"data": 4, "other": 4}
    pooled = paired_diff_ci({f"{i}": v for i, v in enumerate([1, 0, 1, 1, 1, 1, 1, 1])},
                            {f"{i}": v for i, v in enumerate([0, 0, 1, 1, 0, 0, 0, 0])}, seed=0)
    assert eq.mean_ci is not None and eq.mean_ci[0] <= eq.mean[0] <= eq.mean_ci[1]
    assert pooled["diff"] == pytest.approx(eq.mean[0])
    (uneq,) = gbr_rows(board(6)).values()
    assert uneq.mean[0] == pytest.approx((0.25 + 1.0) / 2) and uneq.mean_ci is None


def test_refusals(tmp_path: Path) -> None:
    a = write_run(tmp_path, "a", "naive_rag", qs(1, 0))
    b = write_run(tmp_path, "b", "naive_rag", qs(1, 1), k=4)
    # two runs with one label for one cell: both named
    both = re.escape(f"{a} and {b}")
    with pytest.raises(LeaderboardError, match=rf"two runs for {GEN} / naive_rag / data: {both}"):
        build_leaderboard([a, b])
    with pytest.raises(LeaderboardError, match=rf"two runs for {GEN} / top / data: {both}"):
        build_leaderboard([a, b], labels={a: "top", b: "top"})
    # k is compared within a label only; backend and prompt still within the method
    other = write_run(tmp_path / "g2", "b", "naive_rag", qs(1, 1), k=4, generator="local/other")
    with pytest.raises(LeaderboardError, match=r"naive_rag: retriever k 3 \(.*\) != 4"):
        build_leaderboard([a, other])
    assert len(build_leaderboard([a, b], labels={b: "naive_rag_top4"}).rows) == 2
    dense = write_run(tmp_path, "dense", "naive_rag", qs(1, 1), backend="dense")
    with pytest.raises(LeaderboardError, match=r"naive_rag: retriever backend 'bm25' .* != 'dense'"):
        build_leaderboard([a, dense], labels={dense: "dense_rag"})
    s = write_run(tmp_path, "s", "searcher", qs(1, 1))
    with pytest.raises(LeaderboardError, match=r"label x: runs of two methods, naive_rag .* and searcher"):
        build_leaderboard([a, write_run(tmp_path / "o", "s", "searcher", qs(1, 1), dataset="o")],
                          labels={a: "x", tmp_path / "o" / "s": "x"})
    # an unknown baseline names the labels present
    with pytest.raises(LeaderboardError, match=r"baseline 'naive_rag_top3' is not a label .* present: "
                                               r"naive_rag, naive_rag_top4, searcher"):
        build_leaderboard([a, b, s], labels={b: "naive_rag_top4"}, baseline="naive_rag_top3")
    # labels: one for a run not given, a bad name, the CLI form
    with pytest.raises(LeaderboardError, match="not one of the runs given"):
        build_leaderboard([a], labels={b: "top4"})
    with pytest.raises(LeaderboardError, match="letters, digits"):
        build_leaderboard([a], labels={a: "top 3"})
    with pytest.raises(LeaderboardError, match="RUN_DIR=NAME"):
        parse_label("naive_rag_top4")
    assert parse_label("runs/x=y=top4") == (Path("runs/x=y"), "top4")


def test_missing_baseline_is_a_note_and_outputs_carry_intervals(tmp_path: Path) -> None:
    """A generator without the baseline gets no GBR row and one note line; md / csv / html / png carry the rows."""
    runs = [write_run(tmp_path, "rag", "naive_rag", qs(0, 1, 0, 1)),
            write_run(tmp_path, "s3", "searcher", qs(1, 1, 0, 1)),
            write_run(tmp_path, "s3-b", "searcher", qs(1, 1, 1, 1), generator="local/b")]
    board = build_leaderboard(runs)
    assert board.notes == ["local/b: no naive_rag run, so no GBR row for searcher."]
    paths = write_leaderboard(board, tmp_path / "lb")
    md, cs, ht, png = (p.read_bytes() for p in paths)
    assert b"local/b: no naive_rag run, so no GBR row for searcher." in md and b"local/b: no naive_rag" in ht
    row = gbr_rows(board)[(GEN, "searcher")]
    lo, hi = (f"{100 * x:+.1f}" for x in row.ci["data"])
    assert f"<td>+25.0 [{lo}, {hi}] (+25.0)</td>".encode() in ht
    table = list(csv.DictReader(cs.decode().splitlines()))
    g = next(r for r in table if r["method"] == "gbr")
    assert (g["label"], g["baseline"], g["data_genacc"], g["data_gbr_n"]) == ("searcher", "naive_rag", "25.0", "4")
    assert float(g["data_gbr_ci95_lo"]) == round(100 * row.ci["data"][0], 2)
    assert g["mean_gbr_ci95_hi"] == g["data_gbr_ci95_hi"]
    assert next(r for r in table if r["method"] == "naive_rag")["data_gbr_ci95_lo"] == ""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_on_the_committed_checks_matches_their_report(tmp_path: Path) -> None:
    """`s3 leaderboard` over the committed qwen2.5-coder-1.5b runs with --baseline the top-3 run's label gives the
    paired differences and intervals of benchmarks/results/transfer3/checks/report.md (A1: +0.110 [+0.040, +0.200])."""
    runs = CHECKS / "runs" / "qwen15"
    names = ["naive_rag_top3", "naive_rag_top4", "a1", "heuristic"]
    args = ["leaderboard", *(str(runs / n) for n in names)]
    for n in names:
        args += ["--label", f"{runs / n}={n}"]
    assert s3_main([*args, "--baseline", "naive_rag_top3", "--out", str(tmp_path / "lb")]) == 0
    lines = (tmp_path / "lb" / "leaderboard.csv").read_text(encoding="utf-8").splitlines()
    table = {r["label"]: r for r in csv.DictReader(lines) if r["method"] == "gbr"}
    a1 = table["a1"]
    # the committed runs recorded the dataset as "data" (its folder): named after the folder above it now
    assert (a1["hotpotqa_dev500_genacc"], a1["hotpotqa_dev500_gbr_ci95_lo"], a1["hotpotqa_dev500_gbr_ci95_hi"],
            a1["hotpotqa_dev500_gbr_n"]) == (
        "11.0", "4.0", "20.0", "100")
    # the report has one table per finished length; each leaderboard row pairs its run with the baseline over the
    # questions both scored, which is the report's table of that length
    # (a run stopped between lengths, e.g. 348 of 500, pairs over questions no report table has: skipped, and at
    # least one row is always compared)
    tables = json.loads((CHECKS / "report.json").read_text())["generators"]["qwen15"]["tables"]
    compared = 0
    for name in names[1:]:
        row = table[name]
        n = int(row["hotpotqa_dev500_gbr_n"])
        refs = [m["vs"]["naive_rag_top3"] for t in tables if t["questions"] == n
                for m in t["methods"] if m["method"] == name]
        if not refs:
            assert n not in {t["questions"] for t in tables}, (name, n)
            continue
        (ref,) = refs
        compared += 1
        # the CSV rounds points to 2 decimals (eval/leaderboard.py; the heuristic's upper bound on 500 is 11.005 -> 11.0)
        assert float(row["hotpotqa_dev500_genacc"]) == pytest.approx(round(100 * ref["diff"], 2))
        assert [float(row["hotpotqa_dev500_gbr_ci95_lo"]), float(row["hotpotqa_dev500_gbr_ci95_hi"])] == pytest.approx(
            [round(100 * x, 2) for x in ref["ci95"]])
        assert int(row["hotpotqa_dev500_gbr_n"]) == ref["n"]
    assert compared >= 1
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "| GBR (a1 - naive_rag_top3) | +11.0 [+4.0, +20.0] (+9.0) |" in md
