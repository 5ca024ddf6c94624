"""The generator layer's errors, and the one place where litellm's typed exceptions are mapped onto them.

    GeneratorError (S3Error)
    ├── RetryableError                 retrying may help: the call is retried with exponential backoff
    │   ├── RateLimitedError           429 (litellm.RateLimitError)
    │   ├── CallTimeoutError           litellm.Timeout, or our own per-call deadline
    │   ├── ConnectionFailedError      litellm.APIConnectionError (server down, DNS, reset)
    │   └── ServerError                5xx: InternalServerError, ServiceUnavailableError, BadGatewayError, APIError>=500
    └── PermanentError                 retrying cannot fix it: fail the call at once
        ├── AuthError                  401 / 403 (AuthenticationError, PermissionDeniedError)
        ├── ContextTooLongError        ContextWindowExceededError (checked before BadRequestError, its parent)
        ├── BadRequestError            400 / 422 and other 4xx
        └── ModelNotFoundError         404 (NotFoundError)

Errors are recognised by their *type* (and an HTTP status code where litellm only has its generic APIError),
never by matching message strings. Exceptions that are not litellm / OpenAI-SDK errors are bugs: they propagate.
"""

from __future__ import annotations

import asyncio

from s3core.errors import S3Error

__all__ = [
    "AuthError",
    "BadRequestError",
    "CallTimeoutError",
    "ConnectionFailedError",
    "ContextTooLongError",
    "GeneratorError",
    "ModelNotFoundError",
    "PermanentError",
    "RateLimitedError",
    "RetryableError",
    "ServerError",
    "map_exception",
]


class GeneratorError(S3Error):
    """An LLM call (generator or judge) failed."""

    retryable: bool = False

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class RetryableError(GeneratorError):
    """A failure that may pass on its own: retried with backoff."""

    retryable = True


class RateLimitedError(RetryableError):
    """The provider rate-limited the call (HTTP 429)."""


class CallTimeoutError(RetryableError):
    """The call did not finish within its timeout."""


class ConnectionFailedError(RetryableError):
    """The provider could not be reached."""


class ServerError(RetryableError):
    """The provider failed on its side (HTTP 5xx)."""


class PermanentError(GeneratorError):
    """A failure that retrying cannot fix."""


class AuthError(PermanentError):
    """Missing or rejected credentials (HTTP 401/403): set the key in the env variable named by api_key_env."""


class ContextTooLongError(PermanentError):
    """The prompt does not fit the model's context window."""


class BadRequestError(PermanentError):
    """The provider rejected the request (HTTP 400/422 or another 4xx)."""


class ModelNotFoundError(PermanentError):
    """The provider does not know the model (HTTP 404)."""


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def map_exception(exc: BaseException) -> GeneratorError | None:
    """Map a litellm / OpenAI-SDK exception (or asyncio.TimeoutError) onto our hierarchy.

    Returns None for exceptions that are neither: those are bugs and the caller re-raises them.
    """
    if isinstance(exc, GeneratorError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return CallTimeoutError(f"call timed out ({_short(exc)})")

    import litellm
    import openai

    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    msg = _short(exc)
    # Order matters: subclasses before their parents (Timeout < APIConnectionError, ContextWindow < BadRequest).
    if isinstance(exc, litellm.Timeout | openai.APITimeoutError):
        return CallTimeoutError(msg, status)
    if isinstance(exc, litellm.RateLimitError | openai.RateLimitError):
        return RateLimitedError(msg, status)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextTooLongError(msg, status)
    if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError):
        return AuthError(msg, status)
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return AuthError(msg, status)
    if isinstance(exc, litellm.NotFoundError | openai.NotFoundError):
        return ModelNotFoundError(msg, status)
    if isinstance(exc, litellm.BadRequestError | litellm.UnprocessableEntityError):
        return BadRequestError(msg, status)
    if isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError):
        return BadRequestError(msg, status)
    if isinstance(
        exc,
        litellm.InternalServerError | litellm.ServiceUnavailableError | litellm.BadGatewayError
        | openai.InternalServerError,
    ):
        return ServerError(msg, status)
    if isinstance(exc, litellm.APIConnectionError | openai.APIConnectionError):
        return ConnectionFailedError(msg, status)
    if isinstance(exc, litellm.APIError | openai.APIError):
        # litellm's generic APIError carries the HTTP status: 5xx (or unknown) may pass, other 4xx will not.
        if status is None or status >= 500 or status in (408, 409, 429):
            return ServerError(msg, status)
        return BadRequestError(msg, status)
    return None
