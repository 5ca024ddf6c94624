"""A real loopback OpenAI-compatible HTTP server with configurable latency and failures, for tests and benchmarks.

It is a genuine FastAPI/uvicorn server on 127.0.0.1 (in a background thread), reached through litellm exactly like
any provider (`model="openai/fake"`, `api_base=server.api_base`). It stands in for a *remote LLM service* so our
client's concurrency, timeouts, retries and error accounting can be tested; it is not a stand-in for a model.

    with FakeLLMServer(latency_s=0.2, failure_rate=0.2, failure_kind="500") as srv:
        Generator(GeneratorConfig(model="openai/fake", api_base=srv.api_base)).answer_sync([...])
        srv.stats()

Which prompts fail is deterministic (sha256 of the prompt and `seed`), so a test knows them in advance;
`failures_per_prompt` says how many times a failing prompt fails before it succeeds (a large number = always).

For the secrets tests it records the credential headers of every request (`headers_seen`), and with
`echo_headers=True` its injected errors quote the Authorization header back, like a careless proxy would: a key that
reaches it must never come back out of our error texts. `hang_on="..."` hangs every prompt containing that text
(one hung upstream among healthy ones). `reply="s3"` is a scripted s3 searcher (`s3_reply`), also in a child process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from s3core.errors import ServiceError

__all__ = ["FakeLLMServer", "default_reply", "s3_reply", "varied_reply", "wait_until_serving"]

FailureKind = Literal["500", "503", "429", "timeout", "400", "401", "mixed"]
# request headers that carry credentials: recorded per request for the secrets tests
CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key", "proxy-authorization")
S3_REPLY_MARK = "[fake-s3-turn]"


def default_reply(prompt: str) -> str:
    """Deterministic text: 'yes' for judge prompts, else an echo of the question line."""
    if "Golden answers:" in prompt:
        return "yes"
    for line in prompt.splitlines():
        if line.startswith("Question:"):
            return "answer to " + line.removeprefix("Question:").strip()
    return "answer"


def s3_reply(prompt: str) -> str:
    """A scripted s3 searcher, for real searcher loops without a model: the first reply selects document 1 and asks
    one follow-up query, the next ones select document 1 and stop."""
    turn = prompt.count(S3_REPLY_MARK)
    if turn == 0:
        question = next((ln for ln in prompt.splitlines() if ln.strip() and "<" not in ln), "more")[:80]
        query = json.dumps({"query": f"{question} details"})
        return (f"{S3_REPLY_MARK}<important_info>[1]</important_info><search_complete>False</search_complete>"
                f"<query>{query}</query>")
    return f"{S3_REPLY_MARK}<important_info>[1]</important_info><search_complete>True</search_complete>"


def varied_reply(prompt: str) -> str:
    """Answers of varied lengths (1 to 12 filler words after the echo, by a hash of the prompt): 'yes' for judge
    prompts. For the cost tests: known, different completion sizes."""
    if "Golden answers:" in prompt:
        return "yes"
    n = 1 + hashlib.sha256(prompt.encode()).digest()[0] % 12
    return " ".join([default_reply(prompt), *(["indeed"] * n)])


REPLIES: dict[str, Callable[[str], str]] = {"default": default_reply, "s3": s3_reply, "varied": varied_reply}
Usage = Literal["words", "tiktoken"]


def count_usage(messages: list[dict[str, Any]], text: str, usage: Usage, model: str = "fake") -> tuple[int, int]:
    """(prompt, completion) tokens a provider reports: whitespace words, or ("tiktoken") what litellm's counter gives
    for the model named in the request (the tokenizer litellm knows for it, the chat template's tokens included), as
    an OpenAI-compatible provider counts them."""
    if usage == "words":
        return len(FakeLLMServer.prompt_of(messages).split()), len(text.split())
    import litellm

    from s3core.pricing import count_prompt_tokens

    return count_prompt_tokens(model, messages), int(litellm.token_counter(model=model, text=text))


def truncate_tokens(text: str, max_tokens: int, usage: Usage, model: str = "fake") -> str:
    """The reply cut at max_tokens, like a provider's `finish_reason: length`."""
    if usage == "words":
        return " ".join(text.split()[:max_tokens])
    import litellm

    ids = list(litellm.encode(model=model, text=text))
    return text if len(ids) <= max_tokens else str(litellm.decode(model=model, tokens=ids[:max_tokens]))


def wait_until_serving(url: str, proc: Any, timeout_s: float, interval_s: float = 0.5) -> None:
    """Poll GET `url` until it answers 200 while the server process `proc` (a Popen) lives. Raises ServiceError when
    the process exits first or `timeout_s` passes (the caller adds the process's log to its own message)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServiceError(f"the server process exited with code {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise ServiceError(f"{url} did not answer within {timeout_s:.0f} s")
        time.sleep(interval_s)


class FakeLLMServer:
    """Loopback `/v1/chat/completions` + `/v1/models` with latency and deterministic failures."""

    def __init__(
        self,
        latency_s: float = 0.0,
        failure_rate: float = 0.0,
        failure_kind: FailureKind = "500",
        failures_per_prompt: int = 1_000_000,
        hang_s: float = 30.0,
        seed: int = 0,
        reply: Callable[[str], str] | str = default_reply,
        process: bool = False,
        echo_headers: bool = False,
        hang_on: str | None = None,
        usage: Usage = "words",
    ) -> None:
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be within [0, 1], got {failure_rate}")
        self.latency_s = latency_s
        self.failure_rate = failure_rate
        self.failure_kind = failure_kind
        self.failures_per_prompt = failures_per_prompt
        self.hang_s = hang_s
        self.seed = seed
        if isinstance(reply, str):
            if reply not in REPLIES:
                raise ValueError(f"reply {reply!r}: choose one of {', '.join(REPLIES)} or pass a function")
            reply = REPLIES[reply]
        self.reply = reply
        self.echo_headers = echo_headers
        self.hang_on = hang_on
        self.usage = usage
        self.usage_totals: Counter[str] = Counter()  # prompt / completion tokens of the answers given (cost tests)
        self.headers_seen: list[dict[str, str]] = []  # per request: path + credential headers (secrets tests)
        self.port = 0
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._counts: Counter[str] = Counter()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.process = process
        self._stopping = False
        self._proc: Any = None
        self._log: Any = None

    # ------------------------------------------------------------------ failure plan

    def _u(self, prompt: str, salt: str) -> float:
        h = hashlib.sha256(f"{self.seed}\0{salt}\0{prompt}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64

    def fails(self, prompt: str) -> bool:
        """Whether this prompt is one of the failing ones (independent of how often it was asked)."""
        return self._u(prompt, "fail") < self.failure_rate

    def kind_for(self, prompt: str) -> str:
        if self.failure_kind != "mixed":
            return self.failure_kind
        return "timeout" if self._u(prompt, "kind") < 0.5 else "500"

    @staticmethod
    def prompt_of(messages: list[dict[str, Any]]) -> str:
        return "\n".join(str(m.get("content", "")) for m in messages)

    # ------------------------------------------------------------------ app

    def _app(self) -> Any:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "s3-tests"}]}

        @app.get("/_stats")
        async def stats() -> dict[str, int]:
            return self._local_stats()

        @app.post("/_attempts")
        async def attempts(request: Request) -> dict[str, int]:
            body = await request.json()
            with self._lock:
                return {"attempts": self._seen[str(body.get("prompt", ""))]}

        @app.get("/_headers")
        async def headers() -> list[dict[str, str]]:
            with self._lock:
                return list(self.headers_seen)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            prompt = self.prompt_of(body.get("messages", []))
            creds = {h: request.headers[h] for h in CREDENTIAL_HEADERS if h in request.headers}
            with self._lock:
                self._counts["requests"] += 1
                self._seen[prompt] += 1
                n = self._seen[prompt]
                self.headers_seen.append({"path": request.url.path, "host": request.headers.get("host", ""), **creds})
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            hang = self.hang_on is not None and self.hang_on in prompt
            if hang or (self.fails(prompt) and n <= self.failures_per_prompt):
                kind = "timeout" if hang else self.kind_for(prompt)
                with self._lock:
                    self._counts[f"failed_{kind}"] += 1
                if kind == "timeout":  # hang (past the client's timeout), but let a stopping server finish
                    until = time.monotonic() + self.hang_s
                    while time.monotonic() < until and not self._stopping:
                        await asyncio.sleep(0.05)
                    return JSONResponse({"error": {"message": "too late"}}, status_code=504)
                status = int(kind)
                echo = f"; request headers: {creds}" if self.echo_headers else ""
                return JSONResponse(
                    {"error": {"message": f"injected failure {status}{echo}", "type": "server_error", "code": status}},
                    status_code=status,
                )
            text = self.reply(prompt)
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
            if self.usage == "tiktoken" and isinstance(max_tokens, int) and max_tokens > 0:  # "words": as it was
                text = truncate_tokens(text, max_tokens, self.usage, str(body.get("model", "fake")))
            n_prompt, n_completion = count_usage(body.get("messages", []), text, self.usage,
                                                 str(body.get("model", "fake")))
            with self._lock:
                self._counts["answered"] += 1
                self.usage_totals["prompt_tokens"] += n_prompt
                self.usage_totals["completion_tokens"] += n_completion
            return {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": n_completion,
                    "total_tokens": n_prompt + n_completion,
                },
            }

        return app

    # ------------------------------------------------------------------ lifecycle

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> FakeLLMServer:
        """Serve in a background thread of this process, or (process=True) in a child process of its own."""
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        if self.process:
            self._start_process(timeout_s)
            return self
        import uvicorn

        config = uvicorn.Config(
            self._app(), host="127.0.0.1", port=self.port, log_level="error", access_log=False,
            timeout_graceful_shutdown=1, backlog=4096,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fake-llm-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServiceError(f"fake LLM server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def _start_process(self, timeout_s: float) -> None:
        import subprocess
        import sys


        names = {fn: name for name, fn in REPLIES.items()}
        if self.reply not in names:
            raise ValueError("a custom reply function only works in-process (process=False); by name: "
                             + ", ".join(REPLIES))
        cmd = [
            sys.executable, "-m", "generator_adapters.testing", "--port", str(self.port),
            "--latency", str(self.latency_s), "--failure-rate", str(self.failure_rate),
            "--failure-kind", self.failure_kind, "--failures-per-prompt", str(self.failures_per_prompt),
            "--hang", str(self.hang_s), "--seed", str(self.seed), "--reply", names[self.reply],
            "--usage", self.usage,
        ]
        if self.echo_headers:
            cmd.append("--echo-headers")
        if self.hang_on is not None:
            cmd += ["--hang-on", self.hang_on]
        import tempfile

        # its log (a hung request cancelled at shutdown is logged there) goes to a file, read back if it fails to start
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop(), it outlives this call
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log)
        try:
            wait_until_serving(f"{self.api_base}/models", self._proc, timeout_s, interval_s=0.1)
        except ServiceError as e:
            self._log.seek(0)
            tail = self._log.read()[-1000:]
            self.stop()
            raise ServiceError(f"fake LLM server on port {self.port}: {e}: {tail}") from None

    def stop(self) -> None:
        self._stopping = True
        if self._proc is not None:
            import subprocess

            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
            self._proc = None
            self._log.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None
        self._stopping = False

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _local_stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def stats(self) -> dict[str, int]:
        """Requests received, answered, and injected failures by kind."""
        if self._proc is not None:
            import httpx

            return dict(httpx.get(f"http://127.0.0.1:{self.port}/_stats", timeout=10).json())
        return self._local_stats()

    def seen_headers(self) -> list[dict[str, str]]:
        """Path, Host and credential headers of every request received, in order."""
        if self._proc is not None:
            import httpx

            return list(httpx.get(f"http://127.0.0.1:{self.port}/_headers", timeout=10).json())
        with self._lock:
            return list(self.headers_seen)

    def attempts(self, prompt: str) -> int:
        """How many times this exact prompt was requested."""
        if self._proc is not None:
            import httpx

            r = httpx.post(f"http://127.0.0.1:{self.port}/_attempts", json={"prompt": prompt}, timeout=10)
            return int(r.json()["attempts"])
        with self._lock:
            return self._seen[prompt]


def main(argv: list[str] | None = None) -> None:
    """`python -m generator_adapters.testing --port P [--latency S] ...`: serve until terminated."""
    import argparse

    import uvicorn

    ap = argparse.ArgumentParser(description="loopback OpenAI-compatible fake LLM server (tests, benchmarks)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--failure-rate", type=float, default=0.0)
    ap.add_argument("--failure-kind", default="500")
    ap.add_argument("--failures-per-prompt", type=int, default=1_000_000)
    ap.add_argument("--hang", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reply", default="default", choices=sorted(REPLIES))
    ap.add_argument("--echo-headers", action="store_true")
    ap.add_argument("--hang-on", default=None)
    ap.add_argument("--usage", default="words", choices=["words", "tiktoken"])
    a = ap.parse_args(argv)
    srv = FakeLLMServer(a.latency, a.failure_rate, a.failure_kind, a.failures_per_prompt, a.hang, a.seed,
                        reply=a.reply, echo_headers=a.echo_headers, hang_on=a.hang_on, usage=a.usage)
    uvicorn.run(srv._app(), host="127.0.0.1", port=a.port, log_level="error", access_log=False,
                timeout_graceful_shutdown=1, backlog=4096)


if __name__ == "__main__":
    main()
