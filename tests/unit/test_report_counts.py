"""`s3 report` and `s3 analyze` on a run whose results rows outnumber its trajectories (issue 61 item 3): the committed
hotpotqa_dev500 `untrained` run of attempt 1 scored 300 questions and kept 144 trajectories. Its GenAcc is the run's
over the 300 scored rows (summary.json's, the leaderboard's 24.7), and both commands say that 156 rows have no
trajectory and that the behaviour numbers are over the 144 with one; never "GenAcc over 144 questions"."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from s3.cli import main

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "benchmarks" / "results" / "transfer" / "eval" / "hotpotqa_dev500"  # as committed (gzip'd rows)


@pytest.fixture
def untrained(tmp_path: Path) -> Path:
    """The committed run and its dataset folder, unpacked side by side as `s3 eval` wrote them (run.json: ../data)."""
    root = tmp_path / "hotpotqa_dev500"
    for sub in ("untrained", "data"):
        (root / sub).mkdir(parents=True)
        for f in (COMMITTED / sub).iterdir():
            if f.suffix == ".gz":
                (root / sub / f.stem).write_bytes(gzip.decompress(f.read_bytes()))
            else:
                shutil.copyfile(f, root / sub / f.name)
    run = root / "untrained"
    rows = (run / "results.jsonl").read_text().splitlines()
    traces = (run / "contexts.jsonl").read_text().splitlines()
    assert (len(rows), len(traces)) == (300, 144)  # the input this test is about
    return run


def test_report_gives_the_runs_genacc_over_every_scored_row_and_counts_the_rows_without_a_trajectory(
        untrained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = json.loads((untrained / "summary.json").read_text())
    assert summary["n_scored"] == 300 and f"{summary['metrics']['genacc']['mean']:.3f}" == "0.247"
    assert main(["report", str(untrained)]) == 0
    capsys.readouterr()
    page = (untrained / "report" / "index.html").read_text()
    assert "GenAcc 0.247 [" in page and "over 300 scored questions (95% bootstrap CI)" in page
    assert "156 of the run" in page and "300 results rows have no trajectory" in page
    assert "over the 144 questions with one" in page
    assert "over 144 questions" not in page


def test_analyze_says_the_same_and_writes_no_hops_csv_for_hotpotqa(untrained: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "analysis"
    assert main(["analyze", str(untrained), "--out", str(out), "--resamples", "50"]) == 0
    printed = capsys.readouterr().out
    md = (out / "analysis.md").read_text()
    assert "| questions with a trajectory | 144 |" in md and "| results rows without one | 156 |" in md
    assert "| GenAcc (final D_s3, every scored row) | 24.7 [" in md and "(n=300)" in md
    assert ("156 of the run's 300 results rows have no trajectory in contexts.jsonl: GenAcc is over the 300 scored "
            "rows, every behaviour number over the 144 questions with a trajectory") in md
    (a,) = json.loads((out / "analysis.json").read_text())["s3"].values()
    assert a["genacc"]["n"] == 300 and a["genacc"]["mean"] == pytest.approx(74 / 300)
    assert a["questions"] == 144 and a["rows_without_trajectory"] == 156
    # HotpotQA questions carry no hop count: no hops.csv, and the report says why (issue 61 item 8)
    assert not (out / "hops.csv").exists() and "No hops.csv: no question of these runs" in md
    assert "hops.csv" not in printed.splitlines()[0] and "per_turn.csv" in printed.splitlines()[0]


def test_analyze_help_says_when_hops_csv_is_written(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "hops.csv only where questions carry an annotated hop count (MuSiQue's ids, Bamboogle; not HotpotQA" in text
