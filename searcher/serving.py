"""What every HTTP service of ours shares (/search and /retrieve): typed JSON errors, request limits, bearer auth,
and the uvicorn configuration. Limits come from `[service]` (searcher/config.py `ServiceConfig`).

    app = FastAPI(**app_kwargs(cfg)); ...routes...; protect(app, cfg)
    uvicorn.Server(uvicorn_config(app, cfg)).run(sockets=[sock])

Every error a client sees is JSON `{"code": "...", "detail": "...", "retry_after_s"?: n}` with a stable `code`
(ERROR_CODES for HTTP-level failures; `S3Error.code` for ours, e.g. `upstream_rate_limited`), the status from one
mapping (`S3Error.http_status`: 502 / 503 / 504 as fits) and `Retry-After` where it is known; `detail` is always one
string for people (a body that fails validation: its field errors, `describe_errors`, never the input echoed back or a
library's help URL). A bug is a typed 500 `internal_error` whose traceback goes to the log (redacted), never to the
client. The request limits of queries and questions are checked in one place each (`check_queries` here,
searcher/service.py `check_request`) for HTTP and MCP alike.

What stops a hostile or broken client, from the outside in:
- uvicorn's own limits: open connections (`limit_concurrency` = max_connections), header size
  (`h11_max_incomplete_event_size` = max_header_bytes), idle keep-alive (`timeout_keep_alive`); and, where uvicorn has
  none, a header-read deadline (`GuardedH11Protocol`: a connection that has not sent its request head within
  header_timeout_s is closed: slowloris);
- `ConcurrencyLimit`: at most max_concurrent_requests requests at once, beyond it 503 + Retry-After;
- `BearerAuth`: with service.auth_token_env set, `Authorization: Bearer <token>` on everything but /health, compared in
  constant time (401 + WWW-Authenticate);
- `BodyLimit`: Content-Length over max_body_bytes is refused before a byte is read (413), a body that streams past it
  is cut off (413), a body slower than body_timeout_s is refused (408), all before any parsing;
- the routes: per-request deadline (504), field limits (422), response-size budget (422, `check_response_budget`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from s3core.credentials import install_log_redaction, read_secret_env, redact
from s3core.errors import S3Error, ServiceError
from searcher.config import ServiceConfig

__all__ = [
    "ERROR_CODES",
    "ERROR_RESPONSES",
    "ApiError",
    "ErrorBody",
    "app_kwargs",
    "check_queries",
    "check_response_budget",
    "describe_errors",
    "is_json_type",
    "is_typed_error",
    "protect",
    "uvicorn_config",
]

log = logging.getLogger("s3.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ERROR_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    408: "request_timeout", 413: "body_too_large", 415: "unsupported_media_type", 422: "invalid_request",
    429: "too_many_requests", 500: "internal_error", 502: "upstream_error", 503: "service_unavailable",
    504: "deadline_exceeded",
}
OPEN_PATHS = frozenset({"/health"})


class ErrorBody(BaseModel):
    """The JSON body of every error response."""

    code: str = Field(description="Stable machine-readable error code, e.g. 'invalid_request', 'upstream_timeout'.")
    detail: str = Field(description="What went wrong, for people (for a body that fails validation: each field and "
                        "what is wrong with it, '; '-separated).")
    retry_after_s: float | None = Field(default=None, description="When to retry, where known (also Retry-After).")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": code}
    for status, code in ERROR_CODES.items() if status in (400, 401, 408, 413, 422, 500, 502, 503, 504)
}


def describe_errors(errors: Sequence[Mapping[str, Any]], *, skip: tuple[str, ...] = ("body",), most: int = 10) -> str:
    """pydantic's error list (`ValidationError.errors()`, FastAPI's `RequestValidationError.errors()`) as one line
    for people: `field: message` per error, the location's leading `skip` parts left out. Neither the input (a 4 MB
    invalid body must not come back as a 4 MB error) nor pydantic's help URL is repeated.

    >>> describe_errors([{"loc": ("body", "topk"), "msg": "Input should be a valid integer"},
    ...                  {"loc": ("body", "extra"), "msg": "Extra inputs are not permitted"}])
    'topk: Input should be a valid integer; extra: Extra inputs are not permitted'
    """
    parts = []
    for e in errors[:most]:
        loc = [str(x) for x in e.get("loc", ())]
        while loc and loc[0] in skip:
            loc = loc[1:]
        msg = str(e.get("msg", "invalid"))
        parts.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    more = f"; and {len(errors) - most} more" if len(errors) > most else ""
    return "; ".join(parts) + more if parts else "invalid request"


def is_json_type(content_type: str | None) -> bool:
    """A Content-Type FastAPI reads a body as JSON with: application/json or application/*+json, parameters aside.

    >>> is_json_type("application/json; charset=utf-8"), is_json_type("application/x-www-form-urlencoded")
    (True, False)
    """
    mime = (content_type or "").split(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def check_queries(queries: Sequence[str], topk: int | None, cfg: ServiceConfig, *, topk_name: str = "topk") -> None:
    """The limits of a batch of search queries (`/retrieve`, MCP `search`): at least one, at most
    max_queries_per_request, none empty or longer than max_query_chars, topk (None = the default; called
    `topk_name` in the request) within 1..max_topk. Raises ValueError naming the broken limit (a 422 over HTTP, a tool
    error over MCP)."""
    n = len(queries)
    if n == 0:
        raise ValueError("queries is empty: send at least one query")
    if n > cfg.max_queries_per_request:
        raise ValueError(f"too many queries: {n} > service.max_queries_per_request={cfg.max_queries_per_request}")
    for i, q in enumerate(queries):
        if not q.strip():
            raise ValueError(f"query {i} is empty")
        if len(q) > cfg.max_query_chars:
            raise ValueError(f"query {i} is too long: {len(q)} chars > service.max_query_chars={cfg.max_query_chars}")
    if topk is not None and topk < 1:
        raise ValueError(f"{topk_name} must be positive, got {topk}")
    if topk is not None and topk > cfg.max_topk:
        raise ValueError(f"{topk_name} too large: {topk} > service.max_topk={cfg.max_topk}")


class ApiError(Exception):
    """An HTTP error with its stable code, raised by route code (turned into the typed JSON body)."""

    def __init__(self, status: int, code: str, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.retry_after_s = status, code, detail, retry_after_s


def _error_parts(
    status: int, code: str, detail: str, retry_after_s: float | None = None
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body: dict[str, Any] = {"code": code, "detail": detail}
    headers = [(b"content-type", b"application/json")]
    if retry_after_s is not None:
        body["retry_after_s"] = retry_after_s
        headers.append((b"retry-after", str(max(0, round(retry_after_s))).encode()))
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="s3"'))
    raw = json.dumps(body, ensure_ascii=False, default=str).encode()
    headers.append((b"content-length", str(len(raw)).encode()))
    return raw, headers


def error_response(status: int, code: str, detail: str, retry_after_s: float | None = None) -> Any:
    from starlette.responses import Response

    raw, headers = _error_parts(status, code, detail, retry_after_s)
    return Response(raw, status_code=status, headers={k.decode(): v.decode() for k, v in headers if k != b"content-length"},
                    media_type="application/json")


async def send_error(send: Send, status: int, code: str, detail: str, retry_after_s: float | None = None,
                     close: bool = False) -> None:
    """A typed JSON error straight onto the ASGI channel (middlewares, before or instead of the app)."""
    raw, headers = _error_parts(status, code, detail, retry_after_s)
    if close:  # stop reading a body we refused: uvicorn closes the connection after this response
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw, "more_body": False})


def is_typed_error(response: Any) -> bool:
    """Whether an HTTP response's body (anything with `.json()`: httpx's, requests') is one of our typed JSON errors
    (`{"code": str, "detail", ...}`), what a load test or a fuzzer holds every error answer to."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("code"), str)


def s3_error_response(exc: S3Error) -> Any:
    retry = exc.retry_after_s if isinstance(exc, ServiceError) else None
    return error_response(exc.http_status, exc.code, redact(str(exc)), retry)


# ----------------------------------------------------------------------------------------------- middlewares


class CatchAll:
    """Outermost: an exception no handler took becomes a typed 500 (its traceback goes to the log, redacted)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.error(f"unhandled error in {scope.get('method')} {scope.get('path')}:\n"
                      f"{redact(traceback.format_exc())}")
            if not started:
                await send_error(send, 500, "internal_error", "internal error (the server log has the details)")


class ConcurrencyLimit:
    """At most `limit` requests in the app at once; the next get 503 `overloaded` + Retry-After (open paths pass)."""

    def __init__(self, app: ASGIApp, limit: int, retry_after_s: float, open_paths: Iterable[str] = OPEN_PATHS) -> None:
        self.app, self.limit, self.retry_after_s = app, limit, retry_after_s
        self.open_paths = frozenset(open_paths)
        self.inflight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        if self.inflight >= self.limit:
            await send_error(send, 503, "overloaded",
                             f"the server is at its limit of {self.limit} concurrent requests "
                             "(service.max_concurrent_requests): retry after a moment", self.retry_after_s)
            return
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1


class BearerAuth:
    """`Authorization: Bearer <token>` on every path but the open ones, compared in constant time (digests of equal
    length, so neither the content nor the length of the token leaks through timing)."""

    def __init__(self, app: ASGIApp, token: str, open_paths: Iterable[str] = OPEN_PATHS) -> None:
        self.app = app
        self._digest = hashlib.sha256(token.encode()).digest()
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        value = b""
        for name, v in scope.get("headers", []):
            if name == b"authorization":
                value = v
                break
        scheme, _, token = value.partition(b" ")
        given = hashlib.sha256(token.strip()).digest()
        if not (hmac.compare_digest(given, self._digest) and scheme.lower() == b"bearer"):
            await send_error(send, 401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer ...)")
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Read the whole request body before the app sees it: refuse a Content-Length over `max_bytes` at once, cut off a
    body that streams past it (chunked), refuse one slower than `timeout_s`; the app then reads the buffered body."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = f"{self.max_bytes} bytes (service.max_body_bytes)"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                if not value.strip().isdigit():
                    await send_error(send, 400, "bad_request", "Content-Length is not a number", close=True)
                    return
                if int(value) > self.max_bytes:
                    await send_error(send, 413, "body_too_large", f"the body ({int(value)} bytes) exceeds {limit}",
                                     close=True)
                    return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - loop.time()))
            except TimeoutError:
                await send_error(send, 408, "request_timeout",
                                 f"the body did not arrive within {self.timeout_s:g}s (service.body_timeout_s)",
                                 close=True)
                return
            if message["type"] == "http.disconnect":
                return  # the client left: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_error(send, 413, "body_too_large", f"the body exceeds {limit}", close=True)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect message, when it comes

        await self.app(scope, replay, send)


# ----------------------------------------------------------------------------------------------- the app


def app_kwargs(cfg: ServiceConfig) -> dict[str, Any]:
    """FastAPI(...) arguments: /docs, /redoc and /openapi.json only when service.openapi is on."""
    if cfg.openapi:
        return {}
    return {"docs_url": None, "redoc_url": None, "openapi_url": None}


def protect(app: Any, cfg: ServiceConfig, *, open_paths: Iterable[str] = OPEN_PATHS) -> None:
    """Install the typed error handlers and the limit / auth middlewares on a FastAPI app."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def on_api_error(request: Any, exc: Exception) -> Any:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.code, exc.detail, exc.retry_after_s)

    async def on_http(request: Any, exc: Exception) -> Any:
        assert isinstance(exc, StarletteHTTPException)
        code = ERROR_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, redact(str(exc.detail)))

    async def on_validation(request: Any, exc: Exception) -> Any:
        assert isinstance(exc, RequestValidationError)
        ctype = request.headers.get("content-type")
        if not is_json_type(ctype):
            # FastAPI reads a body as JSON only under a JSON Content-Type (none at all is refused too: its strict
            # content type, which keeps a browser page from posting to a service on localhost): say which to send
            got = f"not {ctype!r}" if ctype else "and this request had none"
            return error_response(415, "unsupported_media_type",
                                  f"the body must be JSON sent with Content-Type: application/json, {got} (curl -d "
                                  "sends application/x-www-form-urlencoded: add -H 'Content-Type: application/json')")
        return error_response(422, "invalid_request", describe_errors(exc.errors()))

    async def on_s3(request: Any, exc: Exception) -> Any:
        assert isinstance(exc, S3Error)
        if exc.http_status >= 500:
            log.warning(f"{request.method} {request.url.path}: {exc.code}: {redact(str(exc))}")
        return s3_error_response(exc)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(S3Error, on_s3)
    # add_middleware: the last added runs first (outermost)
    app.add_middleware(BodyLimit, max_bytes=cfg.max_body_bytes, timeout_s=cfg.body_timeout_s)
    token = read_secret_env(cfg.auth_token_env, setting="service.auth_token_env")
    if token:
        app.add_middleware(BearerAuth, token=token, open_paths=open_paths)
    app.add_middleware(ConcurrencyLimit, limit=cfg.max_concurrent_requests, retry_after_s=cfg.retry_after_s,
                       open_paths=open_paths)
    app.add_middleware(CatchAll)


def check_response_budget(n_bytes: int, cfg: ServiceConfig, what: str) -> None:
    """Refuse (422 `response_too_large`) a response whose documents would exceed service.max_response_bytes."""
    if n_bytes > cfg.max_response_bytes:
        raise ApiError(
            422, "response_too_large",
            f"{what} would hold about {n_bytes} bytes of documents, over service.max_response_bytes="
            f"{cfg.max_response_bytes}: ask for fewer queries or a smaller topk",
        )


# ----------------------------------------------------------------------------------------------- uvicorn


def guarded_h11(header_timeout_s: float) -> type:
    """uvicorn's h11 protocol plus the one limit uvicorn lacks: a deadline for the request head. A connection that
    has not sent a complete request line + headers within `header_timeout_s` of opening (or of the first byte after
    an idle keep-alive) is closed, so a slowloris client cannot hold a connection slot."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.info(f"closing a connection from {self.client}: no request head within {header_timeout_s:g}s")
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # (the rest of) a request head is still to come: the clock runs from its first byte
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            self._disarm()  # idle until the next request: the keep-alive timeout's business
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol


def uvicorn_config(app: Any, cfg: ServiceConfig, **kwargs: Any) -> Any:
    """The uvicorn.Config every service of ours runs with: the [service] limits, no Server header, redacted logs."""
    import uvicorn

    options: dict[str, Any] = {
        "http": guarded_h11(cfg.header_timeout_s),
        "h11_max_incomplete_event_size": cfg.max_header_bytes,
        "timeout_keep_alive": cfg.keep_alive_timeout_s,
        "limit_concurrency": cfg.max_connections,
        "log_level": "warning",
        "server_header": False,
        "lifespan": "on",
        **kwargs,
    }
    config = uvicorn.Config(app, **options)
    install_log_redaction()
    return config
