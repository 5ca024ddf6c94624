"""Two ways to reach a searcher, one answer shape (`SearchResponse`): in process, or over HTTP (`s3 serve`).

    backend = LocalSearch(searcher)                          # the Python API (S3Searcher)
    backend = SearchClient("http://127.0.0.1:8000")          # a running `s3 serve`
    response = backend.search("who wrote Hamlet?", k=4, max_turns=1)
    [d.title for d in response.documents]

The LangChain and LlamaIndex retrievers take either one.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from s3core.credentials import bearer_for, redact
from s3core.errors import S3Error, ServiceError
from searcher.service import (
    SearchResponse,
    SearchSettings,
    ServedSearcher,
    described_settings,
    policy_price,
    run_search,
    summarize_result,
)
from searcher.serving import describe_errors

__all__ = ["LocalSearch", "SearchBackend", "SearchClient", "as_backend"]


class SearchBackend(Protocol):
    def search(self, question: str, k: int | None = None, max_turns: int | None = None) -> SearchResponse: ...

    async def asearch(self, question: str, k: int | None = None, max_turns: int | None = None) -> SearchResponse: ...


class LocalSearch:
    """The in-process backend over an S3Searcher (or any `ServedSearcher`: its `cfg` and `search(questions, *,
    cfg=, cancelled=)`); per-call k / max_turns run as that call's settings.

    Calls are serialised with a lock: one policy, one batch at a time."""

    def __init__(self, searcher: ServedSearcher) -> None:
        if not callable(getattr(searcher, "search", None)):
            raise TypeError(f"LocalSearch needs a searcher with .search(questions), got {type(searcher).__name__}")
        self.searcher = searcher
        self.price = policy_price(searcher.cfg)
        self._lock = threading.Lock()

    def search(self, question: str, k: int | None = None, max_turns: int | None = None) -> SearchResponse:
        if not question.strip():
            raise S3Error("question must not be empty")
        cfg = self.searcher.cfg
        settings = SearchSettings(k=cfg.k if k is None else k, max_turns=cfg.max_turns if max_turns is None else max_turns)
        with self._lock:
            (result,) = run_search(self.searcher, [question], settings)
        return summarize_result(result, settings, price=self.price,
                                ran_with=described_settings(self.searcher, settings))

    async def asearch(self, question: str, k: int | None = None, max_turns: int | None = None) -> SearchResponse:
        return await asyncio.to_thread(self.search, question, k, max_turns)


def _error_detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return redact(resp.text)[:300]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    code = body.get("code") if isinstance(body, dict) else None
    text = redact(str(detail))[:500]
    return f"{text} [{code}]" if isinstance(code, str) else text


class SearchClient:
    """HTTP client of `POST /search` on a running `s3 serve` (sync and async).

    Errors: a 4xx answer raises S3Error with the server's message (e.g. the limit a request broke); connection
    failures, timeouts and 5xx raise ServiceError naming the URL (with the server's Retry-After, where it sent one).

    auth_token_env: the environment variable holding the server's bearer token (`s3 serve` with
    service.auth_token_env); the token is sent to this server's origin only, never followed through a redirect."""

    def __init__(
        self, url: str, timeout_s: float = 120.0, headers: dict[str, str] | None = None,
        auth_token_env: str | None = None,
    ) -> None:
        base = url.rstrip("/")
        if base.endswith("/search"):
            base = base[: -len("/search")]
        if not base.lower().startswith(("http://", "https://")):
            raise S3Error(f"SearchClient: url must start with http:// or https://, got {redact(url)!r}")
        self.base_url = base
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self._auth = bearer_for(auth_token_env, base, setting="auth_token_env")

    @property
    def search_url(self) -> str:
        return f"{self.base_url}/search"

    @staticmethod
    def _body(question: str, k: int | None, max_turns: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {"question": question}
        if k is not None:
            body["k"] = k
        if max_turns is not None:
            body["max_turns"] = max_turns
        return body

    def _parse(self, resp: httpx.Response) -> SearchResponse:
        if resp.status_code >= 500:
            retry = resp.headers.get("retry-after")
            raise ServiceError(f"{self.search_url} answered {resp.status_code}: {_error_detail(resp)}",
                               retry_after_s=float(retry) if retry and retry.isdigit() else None)
        if resp.status_code >= 400:
            raise S3Error(f"{self.search_url} rejected the request ({resp.status_code}): {_error_detail(resp)}")
        try:
            return SearchResponse.model_validate(resp.json())
        except ValidationError as e:
            raise ServiceError(f"{self.search_url} returned a body that is not a /search response: "
                               f"{describe_errors(e.errors(), skip=())}") from None
        except ValueError:
            raise ServiceError(f"{self.search_url} returned a body that is not JSON") from None

    def search(self, question: str, k: int | None = None, max_turns: int | None = None) -> SearchResponse:
        try:
            with httpx.Client(timeout=self.timeout_s, headers=self.headers, auth=self._auth) as client:
                resp = client.post(self.search_url, json=self._body(question, k, max_turns))
        except httpx.HTTPError as e:
            raise ServiceError(redact(f"{self.search_url}: {type(e).__name__}: {e}")) from None
        return self._parse(resp)

    async def asearch(self, question: str, k: int | None = None, max_turns: int | None = None) -> SearchResponse:
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers, auth=self._auth) as client:
                resp = await client.post(self.search_url, json=self._body(question, k, max_turns))
        except httpx.HTTPError as e:
            raise ServiceError(redact(f"{self.search_url}: {type(e).__name__}: {e}")) from None
        return self._parse(resp)

    def health(self) -> dict[str, Any]:
        try:
            resp = httpx.get(f"{self.base_url}/health", timeout=self.timeout_s, headers=self.headers, auth=self._auth)
            resp.raise_for_status()
        except httpx.HTTPError as e:
            raise ServiceError(redact(f"{self.base_url}/health: {type(e).__name__}: {e}")) from None
        result: dict[str, Any] = resp.json()
        return result


def as_backend(
    searcher: Any = None, url: str | None = None, timeout_s: float = 120.0, auth_token_env: str | None = None
) -> SearchBackend:
    """Exactly one of `searcher` (Python API) or `url` (a running `s3 serve`; `auth_token_env` names the variable
    holding its bearer token)."""
    if (searcher is None) == (url is None):
        raise S3Error("give exactly one of searcher= (an S3Searcher) or url= (a running `s3 serve`)")
    if url is not None:
        return SearchClient(url, timeout_s=timeout_s, auth_token_env=auth_token_env)
    if auth_token_env is not None:
        raise S3Error("auth_token_env is for url= (a running `s3 serve`), not for an in-process searcher")
    return LocalSearch(searcher)
