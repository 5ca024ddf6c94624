"""The secrets matrix (issue 18): policy / generator / judge / remote retriever x key variable set or not x api_base
local / remote / mixed case, on the wire. Each upstream is a loopback server that records the credential headers it
receives and, failing, quotes the Authorization header back in its error (a careless proxy). For every cell: where
the key went (what the upstream saw) and whether it came back out in a text we store, log or relay. 0 leaks.

"Remote" hosts are names under .s3-remote.test that this test resolves to 127.0.0.1 (socket.getaddrinfo patched; no
proxy variables): the requests still never leave the machine. The environment always holds OPENAI_API_KEY (the
provider variable litellm would pick up by itself); the configured key lives in a variable of our own.

With S3_SECRETS_MATRIX_OUT=path the matrix is also written there as markdown (benchmarks/results/secrets_matrix.md).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Request

from generator_adapters.testing import FakeLLMServer

pytestmark = pytest.mark.integration

IMPLICIT = "implicit-provider-value-0042"  # in OPENAI_API_KEY: must never travel anywhere
CONFIGURED = "configured-own-value-7319"  # in S3_MATRIX_KEY: only to its own endpoint, never stored
REMOTE_SUFFIX = ".s3-remote.test"


@pytest.fixture
def remote_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names under .s3-remote.test resolve to 127.0.0.1 (look remote to our code, stay on loopback)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if isinstance(name, str) and name.lower().endswith(REMOTE_SUFFIX):
            return real("127.0.0.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "*")
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", IMPLICIT)
    monkeypatch.setenv("S3_MATRIX_KEY", CONFIGURED)


@pytest.fixture(scope="module")
def echo_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(failure_rate=1.0, failure_kind="500", echo_headers=True) as srv:
        yield srv


class EchoRetrieve:
    """A /retrieve upstream that records credential headers and fails quoting the Authorization header back."""

    def __init__(self) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        self.seen: list[dict[str, str]] = []
        app = FastAPI()

        @app.post("/retrieve")
        async def retrieve(request: Request) -> Any:
            auth = request.headers.get("authorization")
            self.seen.append({"host": request.headers.get("host", ""), **({"authorization": auth} if auth else {})})
            return JSONResponse({"detail": f"proxy failed; your headers: authorization={auth}"}, status_code=500)

        self.app = app


@pytest.fixture(scope="module")
def echo_retrieve() -> Iterator[tuple[EchoRetrieve, str]]:
    from searcher.retrieval.server import serve_in_thread

    echo = EchoRetrieve()
    with serve_in_thread(echo.app) as url:
        yield echo, url


def _base(kind: str, port: int, path: str = "/v1") -> str:
    return {
        "local": f"http://127.0.0.1:{port}{path}",
        "remote": f"http://llm{REMOTE_SUFFIX}:{port}{path}",
        "mixed case": f"HTTP://LocalHost:{port}{path}",
    }[kind]


def _classify(headers: list[dict[str, str]]) -> str:
    """Which key the upstream saw: configured / placeholder / IMPLICIT / none."""
    kinds = set()
    for h in headers:
        auth = " ".join(v for k, v in h.items() if k not in ("path", "host"))
        if IMPLICIT in auth:
            kinds.add("IMPLICIT")
        elif CONFIGURED in auth:
            kinds.add("configured")
        elif "EMPTY" in auth:
            kinds.add("placeholder")
        elif auth.strip():
            kinds.add(f"other: {auth}")
        else:
            kinds.add("none")
    return ", ".join(sorted(kinds)) or "no request"


def _run_llm_cell(component: str, base: str, key_env: str | None) -> str:
    """One call of the component; returns the error text it produced (what is stored / relayed)."""
    common: dict[str, Any] = {"model": "openai/fake", "api_base": base, "api_key_env": key_env}
    if component == "policy":
        from searcher.build import build_policy
        from searcher.config import SearcherConfig

        policy = build_policy(SearcherConfig(**common, max_retries=0, timeout_s=10))
        (out,) = policy.generate(["Question: where did the key go?"])
        return out.error or ""
    if component == "generator":
        from generator_adapters.build import build_generator
        from generator_adapters.config import GeneratorConfig

        gen = build_generator(GeneratorConfig(**common, cache_path=None, max_retries=0, timeout_s=10))
        (answer,) = gen.answer_sync(["where did the key go?"])
        return answer.error or ""
    from generator_adapters.build import build_judge
    from generator_adapters.client import run_sync
    from generator_adapters.config import JudgeConfig

    judge = build_judge(JudgeConfig(**common, cache_path=None, max_retries=0, timeout_s=10))
    (verdict,) = run_sync(judge.acheck_answers(["an answer"], [["gold"]]))
    assert verdict is not None
    return verdict.error or ""


def _run_retriever_cell(url: str, key_env: str | None) -> str:
    from s3core.errors import RetrievalError
    from searcher.config import RemoteConfig
    from searcher.retrieval.remote import RemoteRetriever

    with RemoteRetriever(RemoteConfig(url=url, max_retries=0, timeout_s=10, auth_token_env=key_env)) as r:
        try:
            r.search(["where did the key go?"], 3)
        except RetrievalError as e:
            return str(e)
    raise AssertionError("the echo /retrieve upstream always fails")


COMPONENTS = ("policy", "generator", "judge", "remote retriever")
BASES = ("local", "remote", "mixed case")


def test_secrets_matrix_no_key_leaves_for_a_host_it_was_not_meant_for(
    remote_dns: None, keys: None, echo_llm: FakeLLMServer, echo_retrieve: tuple[EchoRetrieve, str]
) -> None:
    echo, retrieve_url = echo_retrieve
    retrieve_port = httpx.URL(retrieve_url).port
    assert retrieve_port is not None
    rows: list[dict[str, str]] = []
    leaks: list[str] = []
    for component in COMPONENTS:
        for key_set in (True, False):
            key_env = "S3_MATRIX_KEY" if key_set else None
            for base_kind in BASES:
                if component == "remote retriever":
                    before = len(echo.seen)
                    stored = _run_retriever_cell(_base(base_kind, retrieve_port, ""), key_env)
                    seen = echo.seen[before:]
                else:
                    before = len(echo_llm.seen_headers())
                    stored = _run_llm_cell(component, _base(base_kind, echo_llm.port), key_env)
                    seen = echo_llm.seen_headers()[before:]
                went = _classify(seen)
                hosts = sorted({h.get("host", "").split(":")[0].lower() for h in seen})
                expected = "configured" if key_set else ("none" if component == "remote retriever" else "placeholder")
                stored_leak = IMPLICIT in stored or CONFIGURED in stored
                rows.append({"component": component, "key variable": "set" if key_set else "not set",
                             "api_base": base_kind, "upstream saw": went, "host": ", ".join(hosts),
                             "key in stored / relayed text": "LEAK" if stored_leak else "no",
                             "error text (stored)": stored[:90]})
                cell = f"{component} / key {'set' if key_set else 'not set'} / {base_kind}"
                if went != expected:
                    leaks.append(f"{cell}: upstream saw {went}, expected {expected}")
                if stored_leak:
                    leaks.append(f"{cell}: a key is in the stored error text {stored!r}")
                if not stored:
                    leaks.append(f"{cell}: no error text recorded")
    out = os.environ.get("S3_SECRETS_MATRIX_OUT")
    if out:
        _write_matrix(Path(out), rows, leaks)
    assert leaks == [], "\n".join(leaks)
    assert len(rows) == 24


def _write_matrix(path: Path, rows: list[dict[str, str]], leaks: list[str]) -> None:
    cols = list(rows[0])
    lines = [
        "# Secrets matrix (tests/integration/test_secrets.py)", "",
        f"OPENAI_API_KEY (the provider variable) always set; the configured key in S3_MATRIX_KEY. Every upstream fails "
        f"and quotes the Authorization header back. {len(rows)} cells, {len(leaks)} leaks.", "",
        "| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |",
    ]
    lines += ["| " + " | ".join(r[c].replace("|", "/") for c in cols) + " |" for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------- where it is stored


def _scan(texts: dict[str, str]) -> list[str]:
    return [f"{where} holds a key" for where, t in texts.items() if IMPLICIT in t or CONFIGURED in t]


def test_eval_results_summary_and_output_hold_no_key(
    keys: None, echo_llm: FakeLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`s3 eval` against a generator upstream that echoes the header: results.jsonl `error`, summary.json and the
    command's output carry the failure, never the key (issue 18 defect 1)."""
    from s3.cli import main

    data = tmp_path / "ds"
    data.mkdir()
    rows = [{"id": f"q{i}", "question": f"question {i}?", "golden_answers": ["x"]} for i in range(3)]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = tmp_path / "run"
    rc = main(["eval", "--dataset", str(data), "--method", "no_retrieval", "--out", str(run), "--no-progress",
               "--set", "generator.model=openai/fake", "--set", f"generator.api_base={echo_llm.api_base}",
               "--set", "generator.api_key_env=S3_MATRIX_KEY", "--set", "generator.max_retries=0",
               "--set", "generator.cache_path=none", "--set", "eval.use_judge=false"])
    captured = capsys.readouterr()
    results = (run / "results.jsonl").read_text(encoding="utf-8")
    assert all(json.loads(line)["error"] for line in results.splitlines())  # the failure is recorded...
    assert rc != 0  # ...nothing was scored
    texts = {"results.jsonl": results, "summary.json": (run / "summary.json").read_text(encoding="utf-8"),
             "stdout": captured.out, "stderr": captured.err}
    assert _scan(texts) == []
    assert "[REDACTED]" in results


def test_search_response_and_server_log_hold_no_key(
    keys: None, echo_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """/search with a policy upstream that echoes the header: the degraded answer relays the failure (code, message)
    without the key, and so does the log (issue 18 defect 1)."""
    from fastapi.testclient import TestClient

    from s3core.types import Document
    from searcher.build import build_policy, build_searcher
    from searcher.config import SearcherConfig, ServiceConfig
    from searcher.service import create_search_app

    class Tiny:
        backend = "tiny"

        def search(self, queries: list[str], k: int) -> list[list[Document]]:
            return [[Document(id=f"d{j}", title=f"T{j}", text=f"text {j}") for j in range(k)] for _ in queries]

        def __len__(self) -> int:
            return 3

    scfg = SearcherConfig(model="openai/fake", api_base=echo_llm.api_base, api_key_env="S3_MATRIX_KEY",
                          max_retries=0, timeout_s=10, k=3, max_turns=1)
    searcher = build_searcher(scfg, Tiny(), build_policy(scfg), k0=3)
    with caplog.at_level("DEBUG"), TestClient(create_search_app(searcher, Tiny(), ServiceConfig(batch_window_ms=1))) as c:
        r = c.post("/search", json={"question": "where did the key go?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["degraded"] is True and body["error"]["code"] == "upstream_server_error"
    assert [d["id"] for d in body["documents"]] == ["d0", "d1", "d2"]  # D0, not an empty list
    assert _scan({"response": r.text, "log": caplog.text}) == []
