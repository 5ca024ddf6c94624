"""`s3 search` and `s3 serve` end to end: the real bm25s index over flashrag_sample and the real SmolLM2 searcher
(begin-with-search only, short replies), driven through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_service_http import QUESTION, shared_index

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "--set", "searcher.policy=litellm", "--set", "searcher.model=local/smollm2-135m-instruct",
    "--set", "searcher.k=3", "--set", "searcher.max_turns=0",
    "--set", "searcher.doc_token_budget=24", "--set", "searcher.max_new_tokens=24", "--set", "retriever.k=3",
]


def test_search_one_question_prints_the_trajectory(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import main
    from searcher.config import RetrieverConfig
    from searcher.retrieval import load_retriever

    index = shared_index(shared_data)
    assert main(["search", QUESTION, "--index", str(index), *SMALL]) == 0
    out = capsys.readouterr().out
    assert f"Question: {QUESTION}" in out and "begin-with-search" in out and "Final documents" in out
    for d in load_retriever(RetrieverConfig(), index).search([QUESTION], 3)[0]:
        assert d.title in out  # every retrieved title is shown


def test_search_questions_file_writes_resumable_contexts(shared_data: Path, tmp_path: Path) -> None:
    from s3.cli import main

    index = shared_index(shared_data)
    # FlashRAG-shaped questions; one question text under three ids keeps llama.cpp's prompt cache warm
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(
        json.dumps({"id": f"q{i}", "question": QUESTION, "golden_answers": ["Wilhelm Conrad Röntgen"]}) + "\n"
        for i in range(3)), encoding="utf-8")
    out = tmp_path / "contexts.jsonl"
    args = ["search", "--index", str(index), "--questions", str(questions), "--out", str(out), *SMALL]
    assert main([*args, "--limit", "2"]) == 0
    first = out.read_text(encoding="utf-8")
    assert main([*args, "--limit", "3"]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith(first)  # the first two rows were kept, not recomputed
    rows = [json.loads(line) for line in text.splitlines()]
    assert [r["id"] for r in rows] == ["q0", "q1", "q2"]
    for r in rows:
        (step,) = r["steps"]
        assert r["turns"] == 0 and len(step["retrieved_ids"]) == 3
        assert 1 <= len(r["documents"]) <= 3
        for d in r["documents"]:
            assert set(d) == {"id", "title", "score", "turn"} and d["id"] in step["retrieved_ids"] and d["turn"] == 0


def test_serve_starts_and_answers_health(shared_data: Path) -> None:
    index = shared_index(shared_data)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3.cli", "serve", "--index", str(index), "--port", "0", *SMALL],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("s3 serve: http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        url = line.split()[2]
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{url}/health", timeout=5).json()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert health["model"] == "local/smollm2-135m-instruct" and health["corpus_size"] == 1000
        assert health["defaults"] == {"k": 3, "max_turns": 0}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def test_serve_bad_index_is_one_clear_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "s3.cli", "serve", "--index", str(tmp_path / "nope"), "--port", "0", *SMALL],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
