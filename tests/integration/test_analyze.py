"""`s3 analyze` on real evaluation runs (the committed MuSiQue runs of the transfer experiment: an untrained and a
trained SmolLM2-135M searcher, 100 questions each), with the real bm25 index rebuilt from ../shared/data for the
premature-stop probe and the real offline generator for marginal GenAcc; wrong input gives one clear line."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from s3.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EVAL = REPO / "tests" / "fixtures" / "committed_runs" / "musique_dev200"  # attempt 1's runs, as committed


@pytest.fixture(scope="module")
def musique(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The two runs and the prepared slice (questions + corpus from ../shared/data) and its bm25 index."""
    root = tmp_path_factory.mktemp("analyze") / "musique_dev200"
    for name in ("untrained", "trained"):
        shutil.copytree(EVAL / name, root / name)
    data = root / "data"
    assert main(["data", "prepare", "musique", "--input", str(shared_data / "musique_dev200" / "musique.json"),
                 "--out", str(data)]) == 0
    # the prepared questions are the committed ones (same ids, same gold paragraphs)
    assert (data / "questions.jsonl").read_text() == (EVAL / "data" / "questions.jsonl").read_text()
    assert main(["index", "build", "--config", str(REPO / "configs" / "transfer.toml"), "--corpus",
                 str(data / "corpus.jsonl"), "--out", str(root / "index")]) == 0
    return root


def test_analyze_compares_untrained_and_trained(musique: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "analysis"
    rc = main(["analyze", str(musique / "untrained"), str(musique / "trained"), "--out", str(out), "--probe",
               "--index", str(musique / "index"), "--dataset", str(musique / "data"), "--resamples", "300"])
    assert rc == 0
    for f in ("analysis.md", "analysis.json", "behavior.csv", "per_turn.csv", "hops.csv", "behavior.png"):
        assert (out / f).is_file() and (out / f).stat().st_size > 100, f
    s = json.loads((out / "analysis.json").read_text())["s3"]
    un, tr = s["musique_dev200/untrained"], s["musique_dev200/trained"]
    assert un["questions"] == tr["questions"] == 100
    # the trained searcher stops at turn 0 on every question: no search turns, every stop before the budget
    assert tr["queries_per_question"]["mean"] == 0.0 and tr["stop_rate"]["mean"] == 1.0
    assert tr["redundant_turn_rate"]["mean"] is None
    assert 1.5 < un["queries_per_question"]["mean"] < 3.0  # 3 turns, some of them invalid replies without a query
    lo, hi = un["redundant_turn_rate"]["ci95"]
    assert 0.0 <= lo <= un["redundant_turn_rate"]["mean"] <= hi <= 1.0
    # premature stops were probed with the real index: a share of the stops with support missing
    p = tr["premature_stop_rate"]
    assert p["n"] == 100 and 0.0 < p["mean"] <= tr["stop_missing_support_rate"]["mean"]
    assert [r["turn"] for r in un["per_turn"]] == [0, 1, 2, 3]
    # turn 0 retrieves the same top-3; the untrained searcher keeps the whole window (no selection), the trained one
    # selects from it: never more gold than the window
    assert un["per_turn"][0]["recall_after"] >= tr["per_turn"][0]["recall_after"] > 0.3
    with (out / "hops.csv").open() as f:
        hops = list(csv.DictReader(f))
    assert {h["run"] for h in hops} == {"musique_dev200/untrained", "musique_dev200/trained"}
    for run in ("musique_dev200/untrained", "musique_dev200/trained"):
        assert sum(float(h["sum"]) for h in hops if h["run"] == run) == pytest.approx(100.0)
    md = (out / "analysis.md").read_text()
    assert "redundant turns" in md and "Retrievals vs annotated hops" in md and "[" in md


def test_printed_rates_carry_their_n(musique: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rate over one stop is not a finding: the printed table says n (questions, search turns, stops) beside each
    rate, as the CSV does."""
    out = tmp_path / "analysis_n"
    assert main(["analyze", str(musique / "trained"), "--out", str(out), "--dataset", str(musique / "data"),
                 "--resamples", "100"]) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "analysis.json").read_text())["s3"]["musique_dev200/trained"]
    stops = s["stop_missing_support_rate"]["n"]
    line = next(x for x in printed.splitlines() if x.startswith("| stops with support missing"))
    assert line.rstrip(" |").endswith(f"(n={stops})"), line
    assert f"(n={s['stop_rate']['n']})" in next(x for x in printed.splitlines() if x.startswith("| stopped before"))


def test_marginal_genacc_with_the_real_generator(musique: Path, tmp_path: Path) -> None:
    out = tmp_path / "genacc"
    rc = main(["analyze", str(musique / "untrained"), "--out", str(out), "--genacc-questions", "2",
               "--index", str(musique / "index"), "--dataset", str(musique / "data"), "--resamples", "100",
               "--set", "eval.use_judge=false", "--set", "generator.cache_path=none"])
    assert rc == 0
    s = json.loads((out / "analysis.json").read_text())["s3"]["musique_dev200/untrained"]
    t0 = s["per_turn"][0]
    assert t0["marginal_genacc_n"] == 2 and t0["genacc_after"] is not None


def test_wrong_input_is_one_clear_line(musique: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "g"
    garbage.mkdir()
    (garbage / "results.jsonl").write_text("{not json\n{\"id\": \"q\"}\n")
    cases = [
        (["analyze", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], "no such run directory"),
        (["analyze", str(musique / "data"), "--out", str(tmp_path / "o")], "no results.jsonl"),
        (["analyze", str(garbage), "--out", str(tmp_path / "o")], "results.jsonl:1"),
        (["analyze", str(musique / "untrained"), "--out", str(tmp_path / "o"), "--probe", "--index",
          str(tmp_path / "noindex")], "no retrieval index"),
        (["report", str(tmp_path / "nope")], "no such run directory"),
        (["analyze", str(musique / "untrained"), "--out", str(tmp_path / "o"), "--genacc-questions", "1",
          "--index", str(musique / "index"), "--set", "generator.model=local/smollm2-135m-instruct"],
         "--set generator.model=local/qwen2.5-coder-0.5b-instruct"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and msg in err, (argv, err)
