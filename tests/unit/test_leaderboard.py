"""The leaderboard: paper-style cells, GBR rows, refusal of incomparable runs, the four output files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from eval.leaderboard import LeaderboardError, build_leaderboard, write_leaderboard
from s3core.errors import DataFormatError


def write_run(root: Path, gen: str, method: str, ds: str, genacc: float, em: float, *, k: int = 3,
              backend: str = "bm25", corpus: str | None = None, prompt: str = "p1", failed: int = 0,
              cost: float = 0.0, lat: float = 1.0) -> Path:
    d = root / f"{gen.replace('/', '_')}-{method}-{ds}-{k}-{backend}-{prompt}-{corpus}"
    d.mkdir(parents=True)
    retr: dict[str, Any] = {} if method == "no_retrieval" else {
        "backend": backend, "k": k, "corpus_sha256": corpus or f"corpus-{ds}"}
    summary = {
        "metrics": {"genacc": {"mean": genacc, "ci95": [genacc - 0.05, genacc + 0.05], "n": 100},
                    "em": {"mean": em, "ci95": [em - 0.05, em + 0.05], "n": 100},
                    "f1": {"mean": em, "ci95": None, "n": 100}},
        "n_scored": 100, "n_failed": failed, "n_missing": 0,
        "totals": {"cost_usd": cost, "mean_latency_s": lat},
        "config": {"dataset": {"name": ds}, "method": method, "retriever": retr,
                   "generator": {"model": gen, "prompt_sha256": prompt}},
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_table_cells_mean_and_gbr(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path, "local/a", "no_retrieval", "hotpotqa", 0.20, 0.05, lat=1.0),
        write_run(tmp_path, "local/a", "naive_rag", "hotpotqa", 0.40, 0.10, lat=2.0, cost=0.5),
        write_run(tmp_path, "local/a", "naive_rag", "musique", 0.10, 0.02, lat=4.0, cost=0.25),
        write_run(tmp_path, "local/a", "searcher", "hotpotqa", 0.46, 0.12),
        write_run(tmp_path, "local/a", "searcher", "musique", 0.15, 0.03, failed=2),
    ]
    board = build_leaderboard(runs)
    assert board.datasets == ["hotpotqa", "musique"]
    md = board.markdown()
    # runs written before spend was recorded: no cost per correct answer, nothing saved
    assert "| local/a | Naive RAG | 40.0 (10.0) | 10.0 (2.0) | 25.0 (6.0) | 0.7500 | - | 0.0000 | 3.00 |" in md
    # no run on musique: its Mean is over hotpotqa only, marked and explained (issue 61 item 4)
    assert "| local/a | No retrieval | 20.0 (5.0) | - | 20.0 (5.0) * |" in md
    assert "Mean * of local/a/No retrieval: a row without a run on every dataset averages only the datasets" in md
    assert "| local/a | Naive RAG | 40.0 (10.0) | 10.0 (2.0) | 25.0 (6.0) |" in md  # every dataset: no mark
    # GBR = searcher - naive RAG, per dataset and on the mean, in points
    assert "| local/a | GBR (searcher - naive RAG) | +6.0 (+2.0) | +5.0 (+1.0) | +5.5 (+1.5) | - | - | - | - |" in md
    assert "local/a/searcher/musique: 2" in md
    order = [r.method for r in board.rows]
    assert order == ["no_retrieval", "naive_rag", "searcher", "gbr"]


def test_cost_columns(tmp_path: Path) -> None:
    """$ / correct = the row's dollars over its correct answers (GenAcc summed over datasets); an unknown price
    is 'unknown', never 0."""
    a = write_run(tmp_path, "openai/x", "naive_rag", "hotpotqa", 0.40, 0.10, cost=0.5)
    b = write_run(tmp_path, "openai/x", "naive_rag", "musique", 0.10, 0.02, cost=0.25)
    for d, correct, saved in ((a, 40.0, 0.1), (b, 10.0, 0.05)):
        s = json.loads((d / "summary.json").read_text())
        s["totals"].update(correct=correct, saved_usd=saved, cache_hits=3)
        (d / "summary.json").write_text(json.dumps(s))
    c = write_run(tmp_path, "openai/y", "naive_rag", "hotpotqa", 0.30, 0.10)
    s = json.loads((c / "summary.json").read_text())
    s["totals"].update(cost_usd=None, correct=30.0)
    (c / "summary.json").write_text(json.dumps(s))
    md = build_leaderboard([a, b, c]).markdown()
    assert "| openai/x | Naive RAG | 40.0 (10.0) | 10.0 (2.0) | 25.0 (6.0) | 0.7500 | 0.01500 | 0.1500 |" in md
    assert "| openai/y | Naive RAG | 30.0 (10.0) | - | 30.0 (10.0) * | unknown | - | 0.0000 |" in md  # hotpotqa only


def test_writes_markdown_csv_html_png(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, g, m, "hotpotqa", 0.3 + 0.1 * i, 0.1)
            for i, (g, m) in enumerate([("local/a", "no_retrieval"), ("local/a", "naive_rag"),
                                        ("local/b", "no_retrieval"), ("local/b", "naive_rag")])]
    paths = write_leaderboard(build_leaderboard(runs), tmp_path / "lb")
    assert [p.name for p in paths] == ["leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png"]
    rows = list(csv.reader((tmp_path / "lb" / "leaderboard.csv").read_text().splitlines()))
    assert rows[0][:4] == ["generator", "method", "hotpotqa_genacc", "hotpotqa_em"]
    assert rows[4][:3] == ["local/b", "naive_rag", "60.0"]
    assert "<td>60.0 (10.0)</td>" in (tmp_path / "lb" / "leaderboard.html").read_text()
    png = (tmp_path / "lb" / "leaderboard.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"k": 5}, r"naive_rag: retriever k 3 \(.*\) != 5"),
        ({"backend": "dense"}, r"naive_rag: retriever backend 'bm25' .* != 'dense'"),
        ({"prompt": "p2"}, r"naive_rag: generator prompt sha256 p1 .* != p2"),
        ({"corpus": "other"}, r"naive_rag on hotpotqa: corpus sha256 corpus-hotpo .* != other"),
    ],
)
def test_refuses_same_method_runs_that_differ(tmp_path: Path, kw: dict[str, Any], message: str) -> None:
    a = write_run(tmp_path, "local/a", "naive_rag", "hotpotqa", 0.4, 0.1)
    b = write_run(tmp_path, "local/b", "naive_rag", "hotpotqa", 0.5, 0.1, **kw)
    with pytest.raises(LeaderboardError, match=message):
        build_leaderboard([a, b])


def test_different_methods_may_differ_and_duplicates_are_refused(tmp_path: Path) -> None:
    a = write_run(tmp_path, "local/a", "naive_rag", "hotpotqa", 0.4, 0.1, k=3)
    b = write_run(tmp_path, "local/a", "searcher", "hotpotqa", 0.5, 0.1, k=8)
    assert len(build_leaderboard([a, b]).rows) == 3
    c = write_run(tmp_path / "again", "local/a", "naive_rag", "hotpotqa", 0.45, 0.1)
    with pytest.raises(LeaderboardError, match="two runs for local/a / naive_rag / hotpotqa"):
        build_leaderboard([a, c])


def test_bad_run_dirs(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"no summary\.json"):
        build_leaderboard([tmp_path])
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(DataFormatError, match=r"no config\.dataset\.name"):
        build_leaderboard([tmp_path])


def test_runs_over_different_question_sets_are_marked_and_the_html_keeps_every_footnote(tmp_path: Path) -> None:
    """Runs of one dataset that scored different numbers of questions (a1 on 100 beside top-3 on 500): their cells
    carry n=, the Mean is starred and not comparable, and the HTML has the same footnotes as the markdown."""
    a = write_run(tmp_path, "local/a", "naive_rag", "hotpotqa", 0.40, 0.10)
    b = write_run(tmp_path, "local/a", "searcher", "hotpotqa", 0.46, 0.12)
    s = json.loads((a / "summary.json").read_text())
    s["n_scored"] = 500
    (a / "summary.json").write_text(json.dumps(s))
    board = build_leaderboard([a, b])
    md = board.markdown()
    assert "| local/a | Naive RAG | 40.0 (10.0) n=500 | 40.0 (10.0) * |" in md
    assert "46.0 (12.0) n=100 | 46.0 (12.0) * |" in md
    assert "scored different numbers of questions" in md and "Scored questions per run: 100, 500." in md
    html = board.html()
    for line in ("scored different numbers of questions", "Scored questions per run: 100, 500."):
        assert line in html
    # one question set: no marks
    plain = build_leaderboard([write_run(tmp_path / "p", "local/a", "naive_rag", "hotpotqa", 0.4, 0.1),
                               write_run(tmp_path / "p", "local/a", "searcher", "hotpotqa", 0.46, 0.12)]).markdown()
    assert "n=" not in plain.split("\n\n")[0] and " * |" not in plain


def test_a_dataset_in_a_generic_folder_is_named_after_the_folder_above(tmp_path: Path) -> None:
    """Runs written with dataset "data" (its folder) take the name of the folder above it, so HotpotQA and MuSiQue
    runs share one board instead of being refused as one dataset with two corpora."""
    from eval.harness import dataset_name

    assert dataset_name(tmp_path / "hotpotqa_dev500" / "data") == "hotpotqa_dev500"
    assert dataset_name(tmp_path / "mine") == "mine"
    runs = []
    for ds in ("hotpotqa_dev500", "musique_dev200"):
        d = write_run(tmp_path / ds, "local/a", "naive_rag", "data", 0.3, 0.1, corpus=f"c-{ds}")
        s = json.loads((d / "summary.json").read_text())
        (tmp_path / ds / "data").mkdir()
        s["config"]["dataset"]["dir"] = "../data"
        (d / "summary.json").write_text(json.dumps(s))
        runs.append(d)
    assert build_leaderboard(runs).datasets == ["hotpotqa_dev500", "musique_dev200"]
