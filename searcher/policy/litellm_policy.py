"""Any chat model reachable through litellm as a zero-shot searcher: an API model, a served model
(`api_base=`), or the offline llama.cpp model (`local/qwen2.5-coder-0.5b-instruct`, the default).

The conversation grows turn by turn (user prompt, assistant reply, user `<information>`, ...). llama.cpp keeps ONE
KV cache per model and reuses the longest common token prefix of consecutive calls, so for `local/...` models
`max_batch` is 1: the agent then runs each question through all its turns before the next question, and every call
extends the previous one's prefix instead of interleaving questions on the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from s3core.errors import AuthError, ConfigError, ModelNotFoundError, PermanentError, UpstreamError
from s3core.upstream import map_exception
from searcher.policy.base import Message, PolicyOutput, PolicyPrompt, TokenPrompt
from searcher.policy.stopping import restore_stop

__all__ = ["LiteLLMPolicy"]

# OpenAI-compatible APIs accept at most 4 stop strings.
_MAX_API_STOPS = 4


def _messages(prompt: PolicyPrompt) -> list[Message]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, TokenPrompt):
        raise TypeError("LiteLLMPolicy works on text; it cannot continue from token ids")
    return [dict(m) for m in prompt]


class LiteLLMPolicy:
    """A `Policy` over `litellm.completion`.

    model: litellm model string ("openai/gpt-4o-mini", "hosted_vllm/<name>" with api_base, "local/<name>").
    api_key: the key for `api_base` (s3core.credentials.llm_api_key: the value of searcher.api_key_env, else the
        placeholder, so litellm never picks up a provider variable by itself); None passes no key (local models).
    concurrency: parallel requests within one batched call (API models; ignored for local models).
    timeout_s / num_retries: per call (searcher.timeout_s / searcher.max_retries): a hung upstream is cut here.
    completion_fn: injectable stand-in for `litellm.completion` (unit tests); same signature and response shape.

    Failures (s3core/upstream.py maps them): credentials refused or an unknown model fail every question alike, so
    they raise (AuthError / ModelNotFoundError / PermanentError, typed, redacted); anything else (rate limit, 5xx,
    timeout, a rejected prompt) makes that question's reply an error, which ends its search `degraded`.
    """

    supports_token_ids = False

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        concurrency: int = 4,
        max_batch: int | None = None,
        timeout_s: float = 600.0,
        num_retries: int = 2,
        completion_fn: Callable[..., Any] | None = None,
    ) -> None:
        if not model or "/" not in model:
            raise ConfigError(
                f"searcher.model {model!r} is not a litellm model string: use provider/name, e.g. "
                "'local/qwen2.5-coder-0.5b-instruct' or 'openai/gpt-4o-mini'"
            )
        self.model = model
        self.name = f"litellm:{model}"
        self.api_base = api_base
        self._api_key = api_key
        self.is_local = model.startswith("local/")
        self.concurrency = 1 if self.is_local else max(1, concurrency)
        self.max_batch = max_batch if max_batch is not None else (1 if self.is_local else None)
        # batches the /search service may run at once through this policy: one llama.cpp context for local models
        self.max_concurrent_batches: int | None = 1 if self.is_local else None
        self.timeout_s = timeout_s
        self.num_retries = num_retries
        self._completion = completion_fn

    def _client(self) -> Callable[..., Any]:
        from s3core.upstream import quiet_litellm

        quiet_litellm()
        import litellm

        if self._completion is not None:
            return self._completion
        if self.is_local:
            try:
                from s3runtime.llm_local import register_local_provider
            except ImportError as e:  # pragma: no cover - depends on the local extra
                raise ConfigError(
                    f"model {self.model} needs the offline provider (s3runtime.llm_local): install the 'local' extra ({e})"
                ) from None
            register_local_provider()
        self._completion = litellm.completion
        return self._completion

    def generate(self, prompts: Sequence[PolicyPrompt], *, stop: Sequence[str] = (), max_new_tokens: int = 160,
                 temperature: float = 0.0) -> list[PolicyOutput]:
        client = self._client()
        convs = [_messages(p) for p in prompts]
        stops = list(stop)

        def one(messages: list[Message]) -> PolicyOutput:
            kwargs: dict[str, Any] = {
                "model": self.model,
                "messages": messages,
                "max_tokens": max_new_tokens,
                "temperature": temperature,
                "timeout": self.timeout_s,
                "num_retries": self.num_retries,
            }
            if stops:
                kwargs["stop"] = stops[:_MAX_API_STOPS]
            if self.api_base:
                kwargs["api_base"] = self.api_base
            if self._api_key is not None:
                kwargs["api_key"] = self._api_key
            try:
                resp = client(**kwargs)
            except Exception as e:
                err = map_exception(e)
                if err is None:
                    raise  # not an upstream failure: a bug, let it surface
                if isinstance(err, AuthError | ModelNotFoundError) or type(err) is PermanentError:
                    fatal: UpstreamError = type(err)(f"searcher model {self.model}: {err}", err.status_code)
                    raise fatal from None
                return PolicyOutput(text="", error=str(err), error_code=err.code, retry_after_s=err.retry_after_s)
            choice = resp.choices[0]
            raw = choice.message.content or ""
            finish = getattr(choice, "finish_reason", None)
            text, hit = restore_stop(raw, stops, finish)
            usage = getattr(resp, "usage", None)
            return PolicyOutput(
                text=text,
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                stop=hit,
                finish_reason=finish,
            )

        # always from worker threads of our own, also for one call: litellm's sync path asks the calling thread for an
        # event loop (asyncio.get_event_loop) and, in a main thread without one, creates one it never closes
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(convs))),
                                thread_name_prefix="s3-policy") as pool:
            return list(pool.map(one, convs))
