"""The one mapping from an upstream failure (litellm's typed exceptions, the OpenAI SDK's, our own deadline) to our
hierarchy (s3core/errors.py). Every LLM call of the toolkit goes through it: the generator and the judge
(generator_adapters/client.py) and the litellm searcher policy (searcher/policy/litellm_policy.py).

Errors are recognised by their *type* (and an HTTP status code where there is only a generic APIError), never by
matching message strings. Every message is redacted here, where it enters. litellm's exceptions all derive from the
OpenAI SDK's (litellm.InternalServerError is an openai.InternalServerError, not a litellm.APIError), so the SDK's
classes are the ones checked, with litellm's own subclasses first where they say more (context window, 503, 502).
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import time
from typing import Any

from s3core.credentials import redact
from s3core.errors import (
    AuthError,
    BadRequestError,
    CallTimeoutError,
    ConnectionFailedError,
    ContextTooLongError,
    ModelNotFoundError,
    PermanentError,
    RateLimitedError,
    ServerError,
    UpstreamError,
)

__all__ = ["map_exception", "quiet_litellm", "retry_after_seconds"]


def _short(exc: BaseException, limit: int = 300) -> str:
    text = redact(f"{type(exc).__name__}: {exc}").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after_seconds(exc: BaseException) -> float | None:
    """The upstream's Retry-After (seconds or an HTTP date; `retry-after-ms` too) where its response carried one."""
    headers: Any = None
    response = getattr(exc, "response", None)
    if response is not None:
        headers = getattr(response, "headers", None)
    if headers is None:
        headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            v = _parse_retry_after(str(ms))
            return v / 1000.0 if v is not None else None
        return _parse_retry_after(headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None


def map_exception(exc: BaseException) -> UpstreamError | None:
    """Map a litellm / OpenAI-SDK exception (or asyncio.TimeoutError) onto our hierarchy, with a redacted message.

    Returns None for exceptions that are neither: those are bugs and the caller re-raises them."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return CallTimeoutError(f"call timed out ({_short(exc)})")

    import litellm
    import openai

    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    msg = _short(exc)
    retry = retry_after_seconds(exc)
    # Order matters: subclasses before their parents (Timeout < APIConnectionError, ContextWindow < BadRequest).
    if isinstance(exc, openai.APITimeoutError):
        return CallTimeoutError(msg, status)
    if isinstance(exc, openai.RateLimitError):
        return RateLimitedError(msg, status, retry)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextTooLongError(msg, status)
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return AuthError(msg, status)
    if isinstance(exc, openai.NotFoundError):
        return ModelNotFoundError(msg, status)
    if isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError):
        return BadRequestError(msg, status)
    if isinstance(exc, openai.InternalServerError | litellm.ServiceUnavailableError | litellm.BadGatewayError):
        return ServerError(msg, status, retry)
    if isinstance(exc, openai.APIConnectionError):
        return ConnectionFailedError(msg, status)
    if isinstance(exc, openai.APIResponseValidationError):
        return ServerError(msg, status)  # the upstream answered something that is not a valid response
    if isinstance(exc, openai.APIError):
        # a generic APIError carries the HTTP status: 5xx (or unknown) may pass, other 4xx will not
        if status is None or status >= 500 or status in (408, 409, 429):
            return ServerError(msg, status, retry)
        if status in (401, 403):
            return AuthError(msg, status)
        return BadRequestError(msg, status)
    if isinstance(exc, openai.OpenAIError):
        # raised by the SDK before any request (e.g. no api_key at all): a client-side configuration problem
        return PermanentError(msg, status)
    return None


_quiet = False


def quiet_litellm() -> None:
    """Import litellm without its network cost-map fetch, and silence its stdout banners ("Give Feedback / Get Help"
    per failed call): our own one-line errors say what failed. Idempotent."""
    global _quiet
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    if not _quiet:
        litellm.suppress_debug_info = True
        litellm.set_verbose = False
        _quiet = True
