"""`s3 eval` on real components: hotpotqa_dev500 from ../shared/data, a real bm25 index, the real SmolLM2 GGUF
through litellm (killed with SIGKILL midway and resumed), and the real loopback failing server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eval.rundir import RESULTS_FILE, read_results
from s3.cli import main as s3_main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hotpot(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """hotpotqa_dev500 prepared (questions + its 4,943 paragraphs) and a bm25 index over it."""
    from dataprep import prepare
    from searcher.retrieval import build_index

    root = tmp_path_factory.mktemp("hotpot")
    ds = root / "data"
    prepare("hotpotqa", [shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"], ds)
    index = build_index(ds / "corpus.jsonl", "bm25", root / "index")
    return ds, index


def _cmd(ds: Path, index: Path, out: Path, cache: Path, limit: int) -> list[str]:
    return [
        sys.executable, "-m", "s3.cli", "eval", "--dataset", str(ds), "--method", "naive_rag", "--index", str(index),
        "--generator", "local/smollm2-135m-instruct", "--limit", str(limit), "--batch-size", "1", "--no-progress",
        "--out", str(out), "--set", f"generator.cache_path={cache}", "--set", "eval.use_judge=false",
        # one passage per question and short answers keep this test in seconds on a busy 2-core machine
        "--set", "retriever.k=1", "--set", "generator.max_tokens=16",
    ]


def _complete_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    text = path.read_text()
    lines = text.split("\n")[:-1]  # the part after the last newline is incomplete
    return [json.loads(x) for x in lines if x.strip()]


def test_real_run_killed_midway_and_resumed(hotpot: tuple[Path, Path], tmp_path: Path) -> None:
    ds, index = hotpot
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    env = {**os.environ, "S3_LLAMA_THREADS": "2", "PYTHONPATH": str(REPO)}
    limit = 6
    proc = subprocess.Popen(_cmd(ds, index, out, cache, limit), cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while len(_complete_lines(out / RESULTS_FILE)) < 1:
            assert proc.poll() is None, f"eval exited early: {proc.stderr.read().decode() if proc.stderr else ''}"
            assert time.monotonic() < deadline, "no row written within 240 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    before = _complete_lines(out / RESULTS_FILE)
    assert 1 <= len(before) < limit, "the kill must land midway"
    assert not (out / "summary.json").exists()

    r = subprocess.run(_cmd(ds, index, out, cache, limit), cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    inv = summary["invocation"]
    assert inv["skipped_finished"] == len(before)
    assert inv["rows_written"] == limit - len(before)
    # every question once, none lost, none duplicated; rows finished before the kill were kept as they were
    rows = _complete_lines(out / RESULTS_FILE)
    qids = [json.loads(x)["id"] for x in (ds / "questions.jsonl").read_text().splitlines()[:limit]]
    assert [row["id"] for row in rows] == qids
    assert rows[: len(before)] == before
    assert summary["n_scored"] + summary["n_failed"] == limit and summary["n_missing"] == 0
    assert all(len(row["context_ids"]) == 1 for row in rows)
    assert summary["config"]["generator"]["gguf_sha256"] == (
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")
    assert summary["config"]["retriever"]["k"] == 1 and summary["config"]["retriever"]["backend"] == "bm25"

    # a fresh run dir sharing the cache repeats no generator call: every answer is a cache hit
    out2 = tmp_path / "run2"
    r2 = subprocess.run(_cmd(ds, index, out2, cache, limit), cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=300)
    assert r2.returncode == 0, r2.stderr[-2000:]
    s2 = json.loads((out2 / "summary.json").read_text())
    assert s2["invocation"]["cache"]["hits"] == limit and s2["invocation"]["cache"]["misses"] == 0
    assert [x["answer"] for x in _complete_lines(out2 / RESULTS_FILE)] == [x["answer"] for x in rows]
    assert all(x["cached"] for x in _complete_lines(out2 / RESULTS_FILE))


def test_failing_server_rows_missing_and_retried(hotpot: tuple[Path, Path], tmp_path: Path) -> None:
    """20% of prompts fail (500s and timeouts) on the real loopback server: those rows are failed, the summary counts
    them, means are over scored rows, and a re-run retries exactly them."""
    from eval.metrics import span_check
    from generator_adapters import Generator, Judge
    from generator_adapters.testing import FakeLLMServer
    from s3.config import load_config
    from searcher.retrieval import load_retriever

    ds, index = hotpot
    n = 20
    out = tmp_path / "run"
    with FakeLLMServer(failure_rate=0.2, failure_kind="mixed", failures_per_prompt=2, hang_s=8.0, seed=7) as srv:
        sets = [
            f"generator.api_base={srv.api_base}", "judge.model=openai/fake", f"judge.api_base={srv.api_base}",
            f"generator.cache_path={tmp_path / 'c.sqlite'}", f"judge.cache_path={tmp_path / 'c.sqlite'}",
        ]
        for sec in ("generator", "judge"):
            sets += [f"{sec}.timeout_s=3", f"{sec}.max_retries=1", f"{sec}.backoff_s=0.01"]
        argv = ["eval", "--dataset", str(ds), "--method", "naive_rag", "--index", str(index), "--generator",
                "openai/fake", "--limit", str(n), "--no-progress", "--out", str(out)]
        for s in sets:
            argv += ["--set", s]

        # which rows must fail: the generator prompt fails, or (span check failing) the judge prompt fails
        cfg = load_config(None, [*sets, "generator.model=openai/fake"])
        gen = Generator(cfg.generator.model_copy(update={"cache_path": None}))
        judge = Judge(cfg.judge.model_copy(update={"cache_path": None}))
        retriever = load_retriever(cfg.retriever, index)
        qs = [json.loads(x) for x in (ds / "questions.jsonl").read_text().splitlines()[:n]]
        docs = retriever.search([q["question"] for q in qs], 3)
        expected_failed: set[str] = set()  # after the first run
        expected_failed2: set[str] = set()  # after the re-run: generator recovered, then the judge fails twice
        ok_prompts = []
        for q, d in zip(qs, docs, strict=True):
            prompt = srv.prompt_of(gen.messages(q["question"], d))
            reply = srv.reply(prompt)
            judged = span_check([reply], [q["golden_answers"]])[0] == 0.0
            judge_fails = judged and srv.fails(srv.prompt_of([{"content": judge.prompt(reply, q["golden_answers"])}]))
            if srv.fails(prompt):
                expected_failed.add(q["id"])
                if judge_fails:
                    expected_failed2.add(q["id"])
            elif judge_fails:
                expected_failed.add(q["id"])
            else:
                ok_prompts.append(prompt)
        assert 1 <= len(expected_failed) < n

        # more than eval.max_failed_fraction (0.1) of the rows failed: the run says so with a non-zero exit
        assert s3_main(argv) == (1 if len(expected_failed) / n > 0.1 else 0)
        s1 = json.loads((out / "summary.json").read_text())
        rows1 = read_results(out / RESULTS_FILE)
        failed1 = {i for i, r in rows1.items() if r["error"] is not None}
        assert failed1 == expected_failed
        assert s1["n_failed"] == len(expected_failed) and s1["n_scored"] == n - len(expected_failed)
        assert all(rows1[i]["metrics"]["genacc"] is None for i in failed1)
        scored = [r["metrics"]["genacc"] for i, r in rows1.items() if i not in failed1]
        assert s1["metrics"]["genacc"]["mean"] == pytest.approx(sum(scored) / len(scored))
        assert s1["metrics"]["genacc"]["n"] == n - len(expected_failed)
        requests_before = srv.stats()["requests"]

        assert s3_main(argv) == (1 if len(expected_failed2) / n > 0.1 else 0)
        s2 = json.loads((out / "summary.json").read_text())
        assert s2["n_failed"] == len(expected_failed2) and s2["n_scored"] == n - len(expected_failed2)
        assert s2["invocation"]["retried_failed"] == len(expected_failed)
        assert s2["invocation"]["skipped_finished"] == n - len(expected_failed)
        lines = (out / RESULTS_FILE).read_text().splitlines()
        assert len(lines) == n + len(expected_failed)
        assert {json.loads(x)["id"] for x in lines[n:]} == expected_failed
        # rows scored in the first run were not asked again: their prompts reached the server exactly once
        assert all(srv.attempts(p) == 1 for p in ok_prompts)
        # the re-run sent at most: one generator call (or a cache hit) + two judge attempts per failed row
        assert srv.stats()["requests"] - requests_before <= 3 * len(expected_failed)


@pytest.mark.parametrize("method", ["searcher", "search_r1", "search_r1_ret"])
def test_live_agents_through_eval(method: str, hotpot: tuple[Path, Path], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The searcher and the Search-R1 agent run LIVE inside `s3 eval` (real SmolLM2 GGUF as the policy through
    litellm, real bm25): rows carry the agent's documents and turns; search_r1 scores the agent's own answer (an
    agent that wrote no <answer> is wrong, with a note, never missing); the others ask the frozen generator."""
    ds, index = hotpot
    monkeypatch.setenv("S3_LLAMA_THREADS", "2")
    out = tmp_path / method
    argv = ["eval", "--dataset", str(ds), "--method", method, "--index", str(index), "--limit", "2",
            "--no-progress", "--out", str(out)]
    sets = ["eval.use_judge=false", "searcher.policy=litellm", "searcher.model=local/smollm2-135m-instruct",
            "searcher.max_turns=1", "searcher.k=2", "searcher.doc_token_budget=64", "searcher.max_select=2",
            "searcher.max_new_tokens=48",
            f"generator.cache_path={tmp_path / 'c.sqlite'}"]
    if method != "search_r1":
        argv += ["--generator", "local/smollm2-135m-instruct"]
        sets += ["generator.max_tokens=16"]
    for s in sets:
        argv += ["--set", s]
    assert s3_main(argv) == 0
    rows = list(read_results(out / RESULTS_FILE).values())
    summary = json.loads((out / "summary.json").read_text())
    assert len(rows) == 2 and summary["n_scored"] == 2 and summary["n_failed"] == 0
    assert summary["config"]["searcher"]["class"] == ("S3Searcher" if method == "searcher" else "SearchR1Agent")
    for r in rows:
        assert r["error"] is None and isinstance(r["answer"], str) and r["turns"] >= 0
        assert r["metrics"]["em"] in (0.0, 1.0)
        if method == "searcher":  # begin-with-search: D0 = top-3 of the question at least
            assert r["context_ids"] and r["turns"] >= 0
        if method == "search_r1":
            assert (r["answer"] == "") == (r["note"] is not None)
            assert r["generation_latency_s"] == 0.0  # no frozen generator was called
        else:
            assert r["note"] is None
    # the agent's trajectories are kept next to the rows: one contexts.jsonl row per question, the same documents
    traj = {t["id"]: t for t in map(json.loads, (out / "contexts.jsonl").read_text().splitlines())}
    assert traj.keys() == {r["id"] for r in rows}
    for r in rows:
        t = traj[r["id"]]
        assert [d["id"] for d in t["documents"]] == r["context_ids"] and t["turns"] == r["turns"]
        assert t["steps"][0]["turn"] == 0 and all("selected_ids" in st for st in t["steps"])
    if method == "searcher":  # ... and they replay: `s3 eval --contexts` gives the generator the same documents
        replay = tmp_path / "replay"
        argv = ["eval", "--dataset", str(ds), "--method", "searcher", "--contexts", str(out / "contexts.jsonl"),
                "--index", str(index), "--limit", "2", "--no-progress", "--out", str(replay),
                "--generator", "local/smollm2-135m-instruct"]
        for s in sets[:1] + sets[-2:]:
            argv += ["--set", s]
        assert s3_main(argv) == 0
        again = read_results(replay / RESULTS_FILE)
        assert {i: a["context_ids"] for i, a in again.items()} == {r["id"]: r["context_ids"] for r in rows}
        assert not (replay / "contexts.jsonl").exists()  # a replay runs no agent
