"""Offline models reached *through litellm*: an in-process `local/<name>` provider, and a loopback llama.cpp server.

In-process (the default; no server, no key, no GPU):

    from s3runtime.llm_local import register_local_provider
    register_local_provider()
    r = await litellm.acompletion(model="local/qwen2.5-coder-0.5b-instruct", messages=[...], max_tokens=32)

One `llama_cpp.Llama` is loaded per model (lazily, on first call) with the chat template stored in the GGUF.
llama.cpp keeps ONE KV cache per Llama, so calls on one model are serialised by a lock; async calls run in a worker
thread so the event loop stays free. Threads: env ``S3_LLAMA_THREADS`` (default: 2, capped by the CPU count);
context: env ``S3_LLAMA_CTX`` (default 4096).

Server (the alternative path; the same GGUF behind llama.cpp's OpenAI-compatible server, started and stopped by us):

    with llama_server("smollm2-135m-instruct") as srv:
        litellm.completion(model=srv.model, api_base=srv.api_base, api_key="none", messages=[...])

`model_fingerprint(model)` records what a run used: the litellm model string and, for local models, the GGUF sha256.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3core.errors import S3Error, ServiceError
from s3runtime.local_models import gguf_path, model_fingerprint, resolve_name

__all__ = [
    "PROVIDER",
    "LlamaServer",
    "default_threads",
    "get_llama",
    "llama_server",
    "local_chat",
    "model_fingerprint",
    "register_local_provider",
    "unload_models",
]

PROVIDER = "local"


def default_threads() -> int:
    """llama.cpp threads: $S3_LLAMA_THREADS, else 2 (capped by the CPU count), else 1 on a saturated machine.

    llama.cpp's worker threads meet at a barrier after every layer; when the CPUs are oversubscribed (1-minute load
    above the CPU count) a descheduled thread stalls the others, and 2 threads measured ~100x slower than 1 here.
    """
    env = os.environ.get("S3_LLAMA_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise S3Error(f"S3_LLAMA_THREADS must be an integer, got {env!r}") from None
        if n < 1:
            raise S3Error(f"S3_LLAMA_THREADS must be >= 1, got {n}")
        return n
    from s3core.devices import auto_cpu_threads

    return auto_cpu_threads()


def default_ctx() -> int:
    env = os.environ.get("S3_LLAMA_CTX")
    try:
        return int(env) if env else 4096
    except ValueError:
        raise S3Error(f"S3_LLAMA_CTX must be an integer, got {env!r}") from None


class _Loaded:
    """One Llama and the lock that serialises calls on it (llama.cpp has one KV cache per context)."""

    def __init__(self, llama: Any, path: Path) -> None:
        self.llama = llama
        self.path = path
        self.lock = threading.Lock()


_models: dict[str, _Loaded] = {}
_models_lock = threading.Lock()


def unload_models() -> None:
    """Free every loaded Llama (also run at exit, before llama_cpp's module globals are torn down)."""
    with _models_lock:
        loaded = list(_models.values())
        _models.clear()
    for m in loaded:
        with m.lock:
            m.llama.close()


atexit.register(unload_models)


def get_llama(name: str) -> tuple[Any, threading.Lock]:
    """The process-wide Llama for offline model `name` (loaded on first use) and its call lock."""
    model = resolve_name(name)
    with _models_lock:
        loaded = _models.get(model.name)
        if loaded is None:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise S3Error(
                    f'local model {model.name!r} needs llama-cpp-python: pip install -e ".[local]"'
                ) from None
            path = gguf_path(model.name)
            llama = Llama(
                model_path=str(path),
                n_ctx=default_ctx(),
                n_threads=default_threads(),
                n_threads_batch=default_threads(),
                verbose=False,
            )
            loaded = _models[model.name] = _Loaded(llama, path)
    return loaded.llama, loaded.lock


def local_chat(
    name: str,
    messages: list[dict[str, Any]],
    max_tokens: int | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop: list[str] | str | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """One chat completion on offline model `name` (blocking; serialised per model). Returns llama.cpp's
    OpenAI-shaped dict. A prompt that cannot fit the context raises litellm.ContextWindowExceededError."""
    import litellm

    llama, lock = get_llama(name)
    with lock:
        kwargs: dict[str, Any] = {
            "messages": messages,
            # llama.cpp trims max_tokens to what is left of the context; None = until the context is full
            "max_tokens": int(max_tokens) if max_tokens is not None else None,
            "temperature": float(temperature),
            "top_p": float(top_p),
            "stop": [stop] if isinstance(stop, str) else (list(stop) if stop else None),
        }
        if seed is not None:
            kwargs["seed"] = int(seed)
        try:
            out: dict[str, Any] = llama.create_chat_completion(**kwargs)
        except ValueError as e:  # llama.cpp raises ValueError when the prompt alone exceeds n_ctx
            raise litellm.ContextWindowExceededError(
                message=f"{e} (local context: {llama.n_ctx()} tokens; raise S3_LLAMA_CTX)",
                model=f"{PROVIDER}/{name}",
                llm_provider=PROVIDER,
            ) from None
    return out


def _model_name(model: str) -> str:
    return model.split("/", 1)[1] if model.startswith(f"{PROVIDER}/") else model


def _to_model_response(out: dict[str, Any], model: str, model_response: Any) -> Any:
    import litellm

    choice = out["choices"][0]
    text = choice["message"].get("content") or ""
    model_response.choices = [
        litellm.Choices(
            index=0,
            message=litellm.Message(role="assistant", content=text),
            finish_reason=choice.get("finish_reason") or "stop",
        )
    ]
    usage = out.get("usage") or {}
    model_response.usage = litellm.Usage(
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        total_tokens=int(usage.get("total_tokens", 0)),
    )
    model_response.model = f"{PROVIDER}/{model}"
    model_response.created = int(time.time())
    model_response.id = f"chatcmpl-local-{uuid.uuid4().hex[:12]}"
    return model_response


def _decoding(optional_params: dict[str, Any]) -> dict[str, Any]:
    p = optional_params or {}
    max_tokens = p.get("max_tokens", p.get("max_completion_tokens"))
    temperature = p.get("temperature")
    top_p = p.get("top_p")
    return {
        "max_tokens": int(max_tokens) if max_tokens is not None else None,
        "temperature": float(temperature) if temperature is not None else 0.0,
        "top_p": float(top_p) if top_p is not None else 1.0,
        "stop": p.get("stop"),
        "seed": p.get("seed"),
    }


def _make_provider_class() -> type:
    from litellm import CustomLLM

    class LocalLLM(CustomLLM):  # type: ignore[misc, valid-type]
        """litellm custom provider `local/<model>` running GGUF files through llama-cpp-python."""

        def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            name = _model_name(model)
            out = local_chat(name, messages, **_decoding(kwargs.get("optional_params") or {}))
            return _to_model_response(out, name, kwargs["model_response"])

        async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            name = _model_name(model)
            out = await asyncio.to_thread(local_chat, name, messages, **_decoding(kwargs.get("optional_params") or {}))
            return _to_model_response(out, name, kwargs["model_response"])

    return LocalLLM


_provider: Any = None
_register_lock = threading.Lock()


def register_local_provider() -> None:
    """Make `litellm.completion/acompletion(model="local/<name>")` run offline GGUF models. Idempotent."""
    global _provider
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    with _register_lock:
        for item in litellm.custom_provider_map:
            if item.get("provider") == PROVIDER:
                return
        if _provider is None:
            _provider = _make_provider_class()()
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": PROVIDER, "custom_handler": _provider},
        ]
        from litellm.utils import custom_llm_setup

        custom_llm_setup()


# ----------------------------------------------------------------------------------------------- loopback server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A running llama.cpp OpenAI-compatible server on loopback."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        """The litellm model string that reaches this server (pass `api_base` too)."""
        return f"openai/{self.name}"


@contextlib.contextmanager
def llama_server(
    name: str,
    port: int | None = None,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    startup_timeout_s: float = 120.0,
    log_path: str | Path | None = None,
) -> Iterator[LlamaServer]:
    """Start llama.cpp's OpenAI-compatible server (`python -m llama_cpp.server`) for offline model `name` on
    127.0.0.1, wait until it answers, yield it, and stop it on exit (terminate, then kill)."""
    import httpx

    model = resolve_name(name)
    path = gguf_path(model.name)
    port = port or free_port()
    log = Path(log_path) if log_path else Path(os.environ.get("TMPDIR", "/tmp")) / f"s3-llama-server-{port}.log"
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(path),
        "--model_alias", model.name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx or default_ctx()),
        "--n_threads", str(n_threads or default_threads()),
        "--n_threads_batch", str(n_threads or default_threads()),
    ]
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LlamaServer(model.name, port, proc, log)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-800:]
                raise ServiceError(f"llama.cpp server exited with code {proc.returncode} (log {log}): {tail}")
            try:
                r = httpx.get(f"{server.api_base}/models", timeout=2.0)
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ServiceError(f"llama.cpp server did not answer within {startup_timeout_s:.0f}s (log {log})")
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
