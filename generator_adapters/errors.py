"""The generator layer's errors: the upstream hierarchy of s3core/errors.py under the names this layer has always used.

    GeneratorError (= s3core.errors.UpstreamError)
    ├── RetryableError                 retrying may help: the call is retried with exponential backoff
    │   ├── RateLimitedError           429
    │   ├── CallTimeoutError           timeout, or our own per-call deadline
    │   ├── ConnectionFailedError      server down, DNS, reset
    │   └── ServerError                5xx
    └── PermanentError                 retrying cannot fix it: fail the call at once
        ├── AuthError                  401 / 403
        ├── ContextTooLongError        context window exceeded
        ├── BadRequestError            400 / 422 and other 4xx
        └── ModelNotFoundError         404

The mapping from litellm's / the OpenAI SDK's exceptions lives in s3core/upstream.py (`map_exception`), shared with the
searcher policy, so every LLM call of the toolkit fails the same typed way with a redacted message.
"""

from __future__ import annotations

from s3core.errors import (
    AuthError,
    BadRequestError,
    CallTimeoutError,
    ConnectionFailedError,
    ContextTooLongError,
    ModelNotFoundError,
    PermanentError,
    RateLimitedError,
    RetryableError,
    ServerError,
)
from s3core.errors import UpstreamError as GeneratorError
from s3core.upstream import map_exception

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
