"""`s3 search` and `s3 serve` end to end: the real bm25s index over flashrag_sample and the real SmolLM2 searcher
(begin-with-search only, short replies), driven through the command line."""

from __future__ import annotations

import json
import os
import re
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


def test_search_on_an_untitled_index_shows_each_document_s_text(shared_data: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A corpus without titles (a manual, support tickets: ids like p-<hash>): each retrieved and each final document
    is shown by the start of its text, not as a bare id beside an empty title (issue 79 defect 5)."""
    from s3.cli import main
    from searcher.retrieval import build_index

    lines = (shared_data / "flashrag_sample" / "sample_data.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    rows = [json.loads(line) for line in lines]
    corpus = tmp_path / "corpus.jsonl"  # the titles dropped: one line of text each, under an id of another shape
    corpus.write_text("".join(json.dumps({"id": f"p-{r['id']}a7", "title": "", "text": " ".join(
        r["contents"].split("\n", 1)[1].split())}) + "\n" for r in rows), encoding="utf-8")
    index = build_index(corpus, "bm25", tmp_path / "index")
    assert main(["search", "Which American city was he born in?", "--index", str(index), *SMALL]) == 0
    out = capsys.readouterr().out
    texts = {f"p-{r['id']}a7": " ".join(r["contents"].split("\n", 1)[1].split()) for r in rows}
    shown = re.findall(r"^\s*(?:✓\s+)?(p-\d+a7)\s+(.*?)\s*$", out, flags=re.MULTILINE)
    assert len(shown) == 3, out  # begin-with-search's window
    for doc_id, label in shown:
        assert label.startswith('"') and texts[doc_id].startswith(label.strip('"…')[:60]), (doc_id, label)
    finals = re.findall(r"^\s+\d+\. \[(p-\d+a7)\] (\".*?…?\")", out, flags=re.MULTILINE)
    assert finals and all(texts[i].startswith(label.strip('"…')[:60]) for i, label in finals), out


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
        assert health["defaults"] == {"k": 3, "max_turns": 0, "max_select": 3, "context_cap": 3, "start": "top_k",
                                      "additive": False}
        assert health["kind"] == "llm" and list(health["request_fields"]) == ["question", "k", "max_turns",
                                                                             "max_documents"]
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
