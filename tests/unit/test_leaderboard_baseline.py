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


def _bars(axis: Any) -> dict[str, Any]:
    """label -> BarContainer of a leaderboard panel."""
    from matplotlib.container import BarContainer

    return {str(c.get_label()): c for c in axis.containers if isinstance(c, BarContainer)}


def _interval_at(container: Any, bar: Any) -> tuple[float, float] | None:
    """The error bar drawn on `bar` (lo, hi) in axis units; None where none is drawn (a NaN or no segment)."""
    import math

    x = bar.get_x() + bar.get_width() / 2
    for seg in container.errorbar.lines[2][0].get_segments():
        if len(seg) != 2:  # matplotlib leaves a NaN interval's segment empty
            continue
        (sx, lo), (_, hi) = seg
        if abs(sx - x) < 1e-9 and not (math.isnan(lo) or math.isnan(hi)):
            return lo, hi
    return None


def test_png_mean_bars_have_an_interval_and_a_run_keeps_its_colour_in_both_panels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PNG (issue 61 item 4): each mean bar carries a bootstrap interval over questions (each dataset's questions
    resampled within it; GBR: the paired differences), never a zero-width one; a run without results.jsonl over two
    datasets gets no mean bar and the figure says so; a run's colour is the same in the GenAcc and GBR panels, and
    one figure legend names them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.leaderboard import plot_leaderboard

    rag_a, s3_a = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    rag_b, s3_b = [0.0, 0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 1.0, 0.0]
    runs = [write_run(tmp_path, "none-a", "no_retrieval", qs(0, 0, 0, 1, 0, 0)),
            write_run(tmp_path, "none-b", "no_retrieval", qs(0, 0, 1, 0, 0), dataset="other"),
            write_run(tmp_path, "rag-a", "naive_rag", qs(*rag_a)), write_run(tmp_path, "s3-a", "searcher", qs(*s3_a)),
            write_run(tmp_path, "rag-b", "naive_rag", qs(*rag_b), dataset="other"),
            write_run(tmp_path, "s3-b", "searcher", qs(*s3_b), dataset="other")]
    for d in runs[:2]:
        (d / "results.jsonl").unlink()  # a run that kept only its summary: no per-question rows to resample
    board = build_leaderboard(runs)
    figs: list[Any] = []
    monkeypatch.setattr(plt, "close", figs.append)
    plot_leaderboard(board, tmp_path / "lb.png")
    (fig,) = figs
    top, bottom = fig.axes[:2]
    bars, gbars = _bars(top), _bars(bottom)
    assert sorted(bars) == [f"{GEN} · Naive RAG", f"{GEN} · No retrieval", f"{GEN} · s3 searcher"]
    assert list(gbars) == [f"{GEN} · GBR (searcher - naive RAG)"]
    by_row = {r.label: r for r in board.rows}
    searcher, gbr = by_row["s3 searcher"], by_row["GBR (searcher - naive RAG)"]
    drawn: dict[str, tuple[float, float]] = {}
    for container, row in [(bars[f"{GEN} · s3 searcher"], searcher), (bars[f"{GEN} · Naive RAG"], by_row["Naive RAG"]),
                           (gbars[f"{GEN} · GBR (searcher - naive RAG)"], gbr)]:
        mean_bar = container.patches[-1]  # the last group is "mean"
        mean = row.mean[0]
        assert mean is not None and mean_bar.get_height() == pytest.approx(100 * mean)
        got = _interval_at(container, mean_bar)
        assert got is not None and got[1] - got[0] > 1.0, (row.label, got)  # a real interval, not [m, m]
        assert got[0] <= mean_bar.get_height() <= got[1], (row.label, got)
        drawn[row.label] = got
    none = bars[f"{GEN} · No retrieval"]
    assert _interval_at(none, none.patches[-1]) is None  # no results.jsonl: no bar, not a zero-width one
    assert _interval_at(none, none.patches[0]) is not None  # its datasets' intervals come from summary.json
    # one colour per run across the panels, one legend for the figure
    colour = {name: c.patches[0].get_facecolor() for name, c in bars.items()}
    assert len(set(colour.values())) == 3
    assert gbars[f"{GEN} · GBR (searcher - naive RAG)"].patches[0].get_facecolor() == colour[f"{GEN} · s3 searcher"]
    assert not top.get_legend() and not bottom.get_legend() and len(fig.legends) == 1
    legend = fig.legends[0]
    assert {t.get_text() for t in legend.get_texts()} == {*bars, *gbars}
    # the mean intervals by hand: each dataset's questions resampled within it (GBR: the paired differences)
    from eval.stats import stratified_mean_ci

    hand = stratified_mean_ci([s3_a, s3_b], n_resamples=2000, seed=0)
    assert hand is not None and drawn["s3 searcher"] == pytest.approx([100 * v for v in hand])
    assert gbr.mean_ci is None  # 6 and 5 paired questions: the table gives no pooled interval, the PNG resamples
    diffs = [[s - r for s, r in zip(s3_a, rag_a, strict=True)], [s - r for s, r in zip(s3_b, rag_b, strict=True)]]
    hand = stratified_mean_ci(diffs, n_resamples=2000, seed=0)
    assert hand is not None and drawn["GBR (searcher - naive RAG)"] == pytest.approx([100 * v for v in hand])
    assert "no error bar where a run kept no results.jsonl" in legend.get_title().get_text()
