"""Keys and error texts (s3core/credentials.py, s3core/upstream.py): where a key may come from and go, the one
redaction step, and the one mapping of upstream failures. The wire-level matrix is tests/integration/test_secrets.py."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3core.credentials import (
    NO_KEY,
    REDACTED,
    ScopedBearer,
    is_loopback_url,
    llm_api_key,
    read_secret_env,
    redact,
    register_secret,
    same_origin,
)
from s3core.errors import (
    AuthError,
    BadRequestError,
    CallTimeoutError,
    ConfigError,
    ConnectionFailedError,
    ModelNotFoundError,
    PermanentError,
    RateLimitedError,
    ServerError,
    UpstreamError,
)

# ----------------------------------------------------------------------------------------------- redaction


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("proxy says: your header was Bearer sk-live-abcdefgh123456", "sk-live-abcdefgh123456"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("error calling with api_key=zz_top_secret_99 and more", "zz_top_secret_99"),
        ('{"x-api-key": "k3y-v4lue-xyz", "ok": 1}', "k3y-v4lue-xyz"),
        ("OPENAI_API_KEY=abc123def456ghi", "abc123def456ghi"),
        ("GET https://api.example.com/v1?key=AIzaSyA-1234567890abcdefghijkl&q=1", "AIzaSyA-1234567890abcdefghijkl"),
        ("token hf_abcdefghijklmnopqrstuv leaked", "hf_abcdefghijklmnopqrstuv"),
        ("https://user:hunter2pass@proxy.example:8080/x", "hunter2pass"),
        ("sk-ant-api03-abcdefghijklmnop in a message", "sk-ant-api03-abcdefghijklmnop"),
    ],
)
def test_redact_removes_key_shaped_values(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and REDACTED in out
    assert redact(out) == out  # idempotent


def test_redact_removes_registered_and_secret_named_environment_values(monkeypatch: pytest.MonkeyPatch) -> None:
    register_secret("plainlookingvalue42")  # no key shape at all: only known as a value
    monkeypatch.setenv("MY_SERVICE_TOKEN", "another-plain-value-77")
    monkeypatch.setenv("S3_PLAIN_SETTING", "visible-value-1234")
    out = redact("a plainlookingvalue42 b another-plain-value-77 c visible-value-1234")
    assert "plainlookingvalue42" not in out and "another-plain-value-77" not in out
    assert "visible-value-1234" in out  # not a secret-named variable: left alone
    assert redact("keep api_key_env='OPENAI_API_KEY' readable") == "keep api_key_env='OPENAI_API_KEY' readable"


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", min_size=8,
                   max_size=40).filter(lambda s: any(c.isdigit() for c in s)),
    before=st.text(max_size=60),
    after=st.text(max_size=60),
)
def test_redact_never_lets_a_registered_key_through(secret: str, before: str, after: str) -> None:
    register_secret(secret)
    assert secret not in redact(f"{before}{secret}{after}")
    assert secret not in redact(f"{before}Bearer {secret}{after}")


# ----------------------------------------------------------------------------------------------- hosts


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000/v1", True), ("HTTP://127.0.0.1:8000/v1", True), ("http://LocalHost:1/v1", True),
        ("http://[::1]:9/v1", True), ("http://127.1.2.3", True), ("https://localhost", True),
        ("http://127.0.0.1.evil.example/v1", False), ("http://evil.example/?next=http://127.0.0.1", False),
        ("http://10.0.0.1:8000", False), ("https://api.openai.com/v1", False), ("not a url", False), (None, False),
        ("http://user@127.0.0.1.nip.io", False),
    ],
)
def test_loopback_is_decided_by_parsing_not_by_prefix(url: str | None, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


def test_same_origin_compares_parsed_scheme_host_and_port() -> None:
    assert same_origin("HTTP://LocalHost:8000/retrieve", "http://localhost:8000")
    assert same_origin("https://a.example/x", "https://A.EXAMPLE:443/y")
    assert not same_origin("http://a.example:8000", "http://a.example:8001")
    assert not same_origin("http://a.example", "https://a.example")
    assert not same_origin("http://a.example.evil", "http://a.example")


def test_scoped_bearer_sends_the_token_to_its_own_origin_only() -> None:
    auth = ScopedBearer("tok-123456789", "http://127.0.0.1:9000")
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={})

    with httpx.Client(transport=httpx.MockTransport(handler), auth=auth) as c:
        c.get("http://127.0.0.1:9000/health")
        c.get("HTTP://127.0.0.1:9000/x")
        c.get("http://127.0.0.1:9001/other-port")
        c.get("http://elsewhere.example:9000/x")
    assert seen == ["Bearer tok-123456789", "Bearer tok-123456789", None, None]
    assert "tok-123456789" not in repr(auth)


# ----------------------------------------------------------------------------------------------- keys


def test_an_endpoint_gets_its_key_only_from_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-implicit-should-never-travel-1")
    monkeypatch.setenv("MY_GEN_KEY", "sk-configured-for-generator-1")
    remote, local, mixed = "https://llm.example/v1", "http://127.0.0.1:8000/v1", "HTTP://LocalHost:8000/v1"
    for base in (remote, local, mixed, None):
        # no variable named: a placeholder, so litellm cannot fall back to OPENAI_API_KEY
        assert llm_api_key("openai/gpt-4o-mini", None, base, setting="generator.api_key_env") == NO_KEY
        assert llm_api_key("openai/gpt-4o-mini", "MY_GEN_KEY", base, setting="generator.api_key_env") == (
            "sk-configured-for-generator-1")
    assert llm_api_key("local/qwen2.5-coder-0.5b-instruct", None, None, setting="x") is None
    assert llm_api_key("bedrock/anthropic.claude-3", None, None, setting="x") is None  # AWS credential chain


def test_a_named_but_missing_variable_or_a_key_given_as_the_name_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("S3_NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match=r"searcher\.api_key_env names 'S3_NOT_SET_ANYWHERE'"):
        read_secret_env("S3_NOT_SET_ANYWHERE", setting="searcher.api_key_env")
    with pytest.raises(ConfigError, match="names the variable") as e:
        read_secret_env("sk-proj-abcdefghijklmnop", setting="generator.api_key_env")
    assert "abcdefghijklmnop" not in str(e.value)  # the mistaken key itself is not echoed


def test_a_real_key_over_plain_http_to_a_remote_host_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("S3_WARN_KEY", "sk-warn-me-123456789")
    with caplog.at_level("WARNING", logger="s3.credentials"):
        llm_api_key("openai/x", "S3_WARN_KEY", "http://llm.internal.example:8000/v1", setting="judge.api_key_env")
        llm_api_key("openai/x", "S3_WARN_KEY", "http://127.0.0.1:8000/v1", setting="judge.api_key_env")
    text = caplog.text
    assert "plain http to llm.internal.example" in text and "127.0.0.1" not in text
    assert "sk-warn-me" not in text


# ----------------------------------------------------------------------------------------------- upstream errors


def _litellm_error(cls_name: str, status: int, headers: dict[str, str] | None = None) -> BaseException:
    import litellm

    cls = getattr(litellm, cls_name)
    response = httpx.Response(status, headers=headers or {}, request=httpx.Request("POST", "http://127.0.0.1/v1"))
    message = "proxy says: your header was Bearer sk-echoed-back-12345678"
    if cls_name in ("APIConnectionError", "Timeout"):
        return cls(message=message, llm_provider="openai", model="fake")  # type: ignore[no-any-return]
    return cls(message=message, llm_provider="openai", model="fake", response=response)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("name", "status", "expected", "code", "http"),
    [
        ("InternalServerError", 500, ServerError, "upstream_server_error", 502),  # issue 18 defect 2: was uncaught
        ("ServiceUnavailableError", 503, ServerError, "upstream_server_error", 502),
        ("BadGatewayError", 502, ServerError, "upstream_server_error", 502),
        ("RateLimitError", 429, RateLimitedError, "upstream_rate_limited", 503),
        ("AuthenticationError", 401, AuthError, "upstream_auth", 502),
        ("PermissionDeniedError", 403, AuthError, "upstream_auth", 502),
        ("NotFoundError", 404, ModelNotFoundError, "upstream_model_not_found", 502),
        ("BadRequestError", 400, BadRequestError, "upstream_bad_request", 502),
        ("APIConnectionError", 500, ConnectionFailedError, "upstream_unreachable", 502),
        ("Timeout", 408, CallTimeoutError, "upstream_timeout", 504),
    ],
)
def test_every_upstream_failure_maps_to_one_typed_redacted_error(
    name: str, status: int, expected: type[UpstreamError], code: str, http: int
) -> None:
    from s3core.upstream import map_exception

    err = map_exception(_litellm_error(name, status))
    assert type(err) is expected and err.code == code and err.http_status == http
    assert "sk-echoed-back" not in str(err) and REDACTED in str(err)


def test_the_sdk_error_raised_before_any_request_and_retry_after_are_mapped() -> None:
    import openai

    from s3core.upstream import map_exception

    err = map_exception(openai.OpenAIError("The api_key client option must be set"))
    assert type(err) is PermanentError and err.code == "upstream_rejected"
    limited = map_exception(_litellm_error("RateLimitError", 429, {"retry-after": "7"}))
    assert isinstance(limited, RateLimitedError) and limited.retry_after_s == 7.0
    assert map_exception(ValueError("a bug")) is None  # not an upstream failure: the caller re-raises it
