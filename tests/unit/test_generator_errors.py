"""Retry / no-retry mapping with litellm's REAL exception classes, driven through the real LLMClient loop.

The only fake here is the completion function (the narrow seam of generator_adapters.client): it raises the
exceptions litellm raises, in a scripted order, so every count below is derived by hand.
"""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

from generator_adapters.client import LLMClient  # noqa: E402
from generator_adapters.config import GeneratorConfig  # noqa: E402
from s3core import errors as E  # noqa: E402
from s3core.upstream import map_exception  # noqa: E402

KW = {"message": "boom", "llm_provider": "openai", "model": "fake"}


def _resp(status: int):
    import httpx

    return httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))


RETRYABLE = [
    (lambda: litellm.RateLimitError(**KW), E.RateLimitedError),
    (lambda: litellm.Timeout(**KW), E.CallTimeoutError),
    (lambda: litellm.APIConnectionError(**KW), E.ConnectionFailedError),
    (lambda: litellm.InternalServerError(**KW), E.ServerError),
    (lambda: litellm.ServiceUnavailableError(**KW), E.ServerError),
    (lambda: litellm.BadGatewayError(**KW), E.ServerError),
    (lambda: litellm.APIError(status_code=500, **KW), E.ServerError),
    (lambda: TimeoutError(), E.CallTimeoutError),
]
PERMANENT = [
    (lambda: litellm.AuthenticationError(**KW), E.AuthError),
    (lambda: litellm.PermissionDeniedError(response=_resp(403), **KW), E.AuthError),
    (lambda: litellm.BadRequestError(**KW), E.BadRequestError),
    (lambda: litellm.ContextWindowExceededError(**KW), E.ContextTooLongError),
    (lambda: litellm.ContentPolicyViolationError(**KW), E.BadRequestError),
    (lambda: litellm.NotFoundError(**KW), E.ModelNotFoundError),
    (lambda: litellm.UnprocessableEntityError(response=_resp(422), **KW), E.BadRequestError),
    (lambda: litellm.APIError(status_code=418, **KW), E.BadRequestError),
]


@pytest.mark.parametrize(("make", "ours"), RETRYABLE + PERMANENT)
def test_map_exception_by_type(make, ours) -> None:
    err = map_exception(make())
    assert type(err) is ours
    assert err.retryable == issubclass(ours, E.RetryableError)
    assert isinstance(err, E.UpstreamError)


def test_unknown_exceptions_are_not_mapped() -> None:
    assert map_exception(KeyError("x")) is None
    assert map_exception(ValueError("Rate limit exceeded, retry")) is None  # strings never decide


class Script:
    """A completion function that fails with the scripted exceptions, then answers."""

    def __init__(self, failures: list) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.kwargs: list[dict] = []

    async def __call__(self, **kwargs):
        self.calls += 1
        self.kwargs.append(kwargs)
        if self.failures:
            raise self.failures.pop(0)()
        return litellm.ModelResponse(
            choices=[{"message": {"role": "assistant", "content": " Paris "}, "finish_reason": "stop"}],
            usage={"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
            model="fake",
        )


def _client(fn: Script, retries: int = 3) -> LLMClient:
    cfg = GeneratorConfig(model="openai/fake", max_retries=retries, backoff_s=0.001, cache_path=None, timeout_s=5)
    return LLMClient(cfg, completion_fn=fn)


MSG = [{"role": "user", "content": "q"}]


@pytest.mark.parametrize(("make", "ours"), RETRYABLE)
def test_retryable_errors_are_retried_and_recover(make, ours) -> None:
    fn = Script([make, make])
    client = _client(fn)
    a = asyncio.run(client.complete(MSG))
    assert a.ok and a.text == "Paris" and a.attempts == 3 and fn.calls == 3
    assert (a.prompt_tokens, a.completion_tokens) == (7, 1)
    s = client.stats()
    assert s["retries"] == 2 and s["succeeded"] == 1 and s["failed"] == 0
    assert s["errors"] == {ours.__name__: 2}


@pytest.mark.parametrize(("make", "ours"), PERMANENT)
def test_permanent_errors_are_not_retried(make, ours) -> None:
    fn = Script([make])
    client = _client(fn)
    a = asyncio.run(client.complete(MSG))
    assert not a.ok and a.text is None and a.error_type == ours.__name__
    assert fn.calls == 1 and a.attempts == 1
    assert client.stats()["retries"] == 0 and client.stats()["failed"] == 1


def test_retries_exhausted_gives_missing_answer_not_empty_string() -> None:
    fn = Script([lambda: litellm.InternalServerError(**KW)] * 10)
    client = _client(fn, retries=2)
    a = asyncio.run(client.complete(MSG))
    assert a.text is None and a.error and a.error_type == "ServerError" and not a.ok
    assert fn.calls == 3 and a.attempts == 3


def test_bug_in_provider_code_propagates() -> None:
    fn = Script([lambda: KeyError("bug")])
    with pytest.raises(KeyError):
        asyncio.run(_client(fn).complete(MSG))


def test_no_sdk_retries_underneath_and_params_passed() -> None:
    fn = Script([])
    client = _client(fn)
    asyncio.run(client.complete(MSG))
    kw = fn.kwargs[0]
    assert kw["num_retries"] == 0 and kw["max_retries"] == 0
    assert kw["model"] == "openai/fake" and kw["temperature"] == 0.0 and kw["max_tokens"] == 64


def test_our_own_deadline_is_a_timeout() -> None:
    class Slow(Script):
        async def __call__(self, **kwargs):
            self.calls += 1
            await asyncio.sleep(5)

    fn = Slow([])
    cfg = GeneratorConfig(model="openai/fake", max_retries=1, backoff_s=0.001, cache_path=None, timeout_s=0.02)
    client = LLMClient(cfg, completion_fn=fn)
    client.deadline_grace_s = 0.03  # outer deadline 0.05 s: a provider that ignores litellm's timeout
    a = asyncio.run(client.complete(MSG))
    assert a.error_type == "CallTimeoutError" and fn.calls == 2


def test_key_comes_from_env_only(monkeypatch) -> None:
    from s3core.errors import ConfigError

    cfg = GeneratorConfig(model="openai/fake", api_key_env="S3_TEST_KEY_XYZ", cache_path=None)
    monkeypatch.delenv("S3_TEST_KEY_XYZ", raising=False)
    with pytest.raises(ConfigError, match="S3_TEST_KEY_XYZ"):
        LLMClient(cfg, completion_fn=Script([]))
    monkeypatch.setenv("S3_TEST_KEY_XYZ", "sk-secret-value")
    fn = Script([])
    client = LLMClient(cfg, completion_fn=fn)
    a = asyncio.run(client.complete(MSG))
    assert fn.kwargs[0]["api_key"] == "sk-secret-value"
    assert "sk-secret-value" not in a.model_dump_json() and "sk-secret-value" not in repr(client.stats())


def test_concurrency_is_bounded() -> None:
    active = 0
    peak = 0

    async def fn(**kwargs):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": "x"}}])

    cfg = GeneratorConfig(model="openai/fake", concurrency=3, cache_path=None)
    batch = [[{"role": "user", "content": f"question {i}"}] for i in range(12)]  # distinct: no call is deduplicated
    answers = asyncio.run(LLMClient(cfg, completion_fn=fn).complete_many(batch))
    assert len(answers) == 12 and all(a.ok for a in answers)
    assert peak == 3
