"""The toolkit's own small exception hierarchy. Third-party errors are mapped onto these at the boundary.

    S3Error                                 code / http_status: how a service answers when this escapes a request
    ├── ConfigError                         a setting is unknown, malformed or inconsistent
    ├── DataFormatError                     an input file does not have the expected shape
    ├── IndexDirError                       an index directory is missing, incomplete or mismatched
    ├── RetrievalError                      a retriever could not answer                         502
    └── ServiceError                        a remote service failed after the last retry         503
        ├── UpstreamError                   an upstream call (LLM provider, ...) failed           502
        │   ├── RetryableError              retrying may help: retried with backoff
        │   │   ├── RateLimitedError        429                                                   503 + Retry-After
        │   │   ├── CallTimeoutError        timeout (the provider's, or our own deadline)         504
        │   │   ├── ConnectionFailedError   server down, DNS, reset                               502
        │   │   └── ServerError             5xx                                                   502
        │   └── PermanentError              retrying cannot fix it
        │       ├── AuthError               401 / 403, or no credentials                          502
        │       ├── ContextTooLongError     the prompt does not fit the model's context           502
        │       ├── BadRequestError         400 / 422 and other 4xx                               502
        │       └── ModelNotFoundError      404                                                   502
        ├── OverloadedError                 this server is at its concurrency limit               503 + Retry-After
        └── DeadlineExceededError           a request ran past its deadline                       504

`code` is a stable machine-readable name (a client switches on it; the message is for people). `http_status` is the
one mapping from our hierarchy to HTTP (searcher/serving.py turns any of these into a typed JSON error body).
Upstream errors are recognised by their *type* in s3core/upstream.py, never by matching message strings, and their
messages are redacted there (s3core/credentials.py) before they are stored, logged or relayed.
"""

from __future__ import annotations


class S3Error(Exception):
    """Base class of every error the toolkit raises on purpose (bad input, missing files, failed services)."""

    code: str = "error"
    http_status: int = 500


class ConfigError(S3Error):
    """A configuration value is unknown, malformed or inconsistent."""

    code = "config_error"


class DataFormatError(S3Error):
    """An input file does not have the expected shape (the message names the file and line)."""

    code = "data_format_error"


class IndexDirError(S3Error):
    """An index directory is missing, incomplete, or does not match its corpus / encoder."""

    code = "index_error"


class RetrievalError(S3Error):
    """A retriever could not answer (bad query, remote server down after retries, ...)."""

    code = "retrieval_failed"
    http_status = 502


class ServiceError(S3Error):
    """A remote service failed after the last retry."""

    code = "service_unavailable"
    http_status = 503

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UpstreamError(ServiceError):
    """A call to an upstream service (an LLM provider through litellm / the OpenAI SDK) failed.

    status_code: the upstream's HTTP status where there was one; retry_after_s: its Retry-After, where it sent one."""

    retryable: bool = False
    code = "upstream_error"
    http_status = 502

    def __init__(self, message: str, status_code: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.status_code = status_code


class RetryableError(UpstreamError):
    """A failure that may pass on its own: retried with backoff."""

    retryable = True


class RateLimitedError(RetryableError):
    """The provider rate-limited the call (HTTP 429)."""

    code = "upstream_rate_limited"
    http_status = 503


class CallTimeoutError(RetryableError):
    """The call did not finish within its timeout."""

    code = "upstream_timeout"
    http_status = 504


class ConnectionFailedError(RetryableError):
    """The provider could not be reached."""

    code = "upstream_unreachable"


class ServerError(RetryableError):
    """The provider failed on its side (HTTP 5xx)."""

    code = "upstream_server_error"


class PermanentError(UpstreamError):
    """A failure that retrying cannot fix."""

    code = "upstream_rejected"


class AuthError(PermanentError):
    """Missing or rejected credentials (HTTP 401/403): set the key in the env variable named by api_key_env."""

    code = "upstream_auth"


class ContextTooLongError(PermanentError):
    """The prompt does not fit the model's context window."""

    code = "upstream_context_too_long"


class BadRequestError(PermanentError):
    """The provider rejected the request (HTTP 400/422 or another 4xx)."""

    code = "upstream_bad_request"


class ModelNotFoundError(PermanentError):
    """The provider does not know the model (HTTP 404)."""

    code = "upstream_model_not_found"


class OverloadedError(ServiceError):
    """This server is at its limit of concurrent requests: retry after a moment."""

    code = "overloaded"
    http_status = 503


class DeadlineExceededError(ServiceError):
    """A request was still running when its deadline passed (its work is cancelled)."""

    code = "deadline_exceeded"
    http_status = 504
