"""`s3 demo --quick` end to end: real corpus package, real bm25 index, real offline Qwen 0.5B generator and the
shipped trained searcher (searcher/policies/smollm2-135m-hotpotqa on the offline SmolLM2-135M), the default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_demo_quick_runs_and_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    r = subprocess.run(
        [sys.executable, "-m", "s3.cli", "demo", "--quick", "--limit", "2", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["n"] == 2
    # the title-following script beside the trained searcher: the control it is reported against; and the script with
    # the page its shipped ranker picks over the shipped reader's scores (the best searcher on hotpotqa_dev500)
    assert list(results["methods"]) == ["no_retrieval", "naive_rag", "title_following", "title_following_reader",
                                        "searcher"]
    for name, m in results["methods"].items():
        assert set(m) >= {"genacc", "em", "support_recall", "mean_turns"}
        assert m["n_scored"] + m["n_failed"] == 2, name
    assert results["methods"]["naive_rag"]["support_recall"] is not None
    assert results["methods"]["searcher"]["mean_turns"] is not None
    reading = json.loads((out / "runs" / "title_following_reader" / "run.json").read_text())["config"]["searcher"]
    assert (reading["read_last"], reading["ranker"]) == (16, "links-reader-hotpotqa")
    assert reading["reader"].endswith("reader-smollm2-135m-hotpotqa") and len(reading["reader_weights_sha256"]) == 64
    assert results["methods"]["title_following_reader"]["mean_context_docs"] >= results["methods"]["title_following"][
        "mean_context_docs"]
    # the trained searcher, on the loop its searcher.json recorded (additive, cap 5, k = 8)
    assert results["searcher"]["policy"] == "shipped: smollm2-135m-hotpotqa"
    assert (results["searcher"]["additive"], results["searcher"]["context_cap"], results["searcher"]["k"]) == (True, 5, 8)
    assert "s3 searcher (trained: shipped: smollm2-135m-hotpotqa)" in r.stdout
    for ext in ("md", "csv", "html", "png"):
        assert (out / "report" / f"leaderboard.{ext}").stat().st_size > 0
    assert "GenAcc" in r.stdout and "One trajectory" in r.stdout and "begin-with-search" in r.stdout
