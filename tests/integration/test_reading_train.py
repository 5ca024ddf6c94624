"""`s3 train` makes the reading searcher end to end on real components (configs/reading_smoke.toml): HotpotQA training
questions and their paragraphs in bm25, each candidate page's credit from the offline Qwen2.5-Coder-0.5B (llama.cpp,
teacher-forced log p(gold answer)), a LoRA reader on the offline SmolLM2-135M trained on that credit, a ranker, the
stop chosen on held-out questions; then `s3 search --policy RUN/searcher` loads what it made. A second `s3 train`
resumes: nothing is scored or trained again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("training_data")]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "reading_smoke.toml"
S3 = [sys.executable, "-m", "s3.cli"]

pytest.importorskip("llama_cpp")
pytest.importorskip("peft")


def _s3(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "S3_LLAMA_THREADS": os.environ.get("S3_LLAMA_THREADS", "2")}
    return subprocess.run([*S3, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


def test_s3_train_makes_a_reading_searcher_that_s3_search_loads(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sets = ["--set", f"training.output_dir={run}"]
    done = _s3("train", "--config", str(SMOKE), *sets, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    where = Path(summary["searcher"])
    assert where == run / "searcher"
    record = json.loads((where / "searcher.json").read_text())
    assert record["kind"] == "reading"
    reading = record["searcher"]["reading"]
    assert reading["ranker"] == "ranker.json" and reading["reader"] == "reader"
    assert 0 <= reading["pages"] <= 2
    # what taught it is recorded: the generator's weights, the reader's and the ranker's hashes
    trained = record["trained"]
    assert trained["credit"]["generator"]["gguf_sha256"]
    assert len(trained["reader_sha256"]) == 64 and len(trained["ranker_sha256"]) == 64
    # the credit is real: per question a base log-probability and one gain a candidate, not all equal
    rows = [json.loads(x) for x in (run / "credit.jsonl").read_text().splitlines()[1:]]
    assert rows and all(len(r["gains"]) == len(r["candidates"]) for r in rows)
    assert all(r["base"] < 0 for r in rows)
    assert len({g for r in rows for g in r["gains"]}) > len(rows)
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps and all(s["stage"] == "reader" and s["loss"] >= 0 for s in steps)
    assert (run / "reading.png").stat().st_size > 0

    # resumed: every stage's output is there, nothing is redone
    lines = (run / "credit.jsonl").read_text()
    again = _s3("train", "--config", str(SMOKE), *sets, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "to score" not in again.stderr and "train: reader: step" not in again.stderr
    assert (run / "credit.jsonl").read_text() == lines

    # the product loads it: s3 search --policy RUN/searcher over the run's index
    q = "Which mythology figure is Lilu related to?"
    found = _s3("search", "--policy", str(where), "--index", str(run / "data" / "index"), "--json", q, cwd=tmp_path)
    assert found.returncode == 0, found.stderr[-3000:]
    result = json.loads(found.stdout)
    docs = result["documents"] if isinstance(result, dict) else result[0]["documents"]
    assert len(docs) >= 3
    assert "reading" in found.stderr  # `searcher: NAME: why` names what was loaded
