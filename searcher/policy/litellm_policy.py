"""Any chat model reachable through litellm as a zero-shot searcher: an API model, a served model
(`api_base=`), or the offline llama.cpp model (`local/qwen2.5-coder-0.5b-instruct`, the default).

The conversation grows turn by turn (user prompt, assistant reply, user `<information>`, ...). llama.cpp keeps ONE
KV cache per model and reuses the longest common token prefix of consecutive calls, so for `local/...` models
`max_batch` is 1: the agent then runs each question through all its turns before the next question, and every call
extends the previous one's prefix instead of interleaving questions on the cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from s3core.errors import ConfigError, ServiceError
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
    concurrency: parallel requests within one batched call (API models; ignored for local models).
    completion_fn: injectable stand-in for `litellm.completion` (unit tests); same signature and response shape.
    """

    supports_token_ids = False

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
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
        self.is_local = model.startswith("local/")
        self.concurrency = 1 if self.is_local else max(1, concurrency)
        self.max_batch = max_batch if max_batch is not None else (1 if self.is_local else None)
        self.timeout_s = timeout_s
        self.num_retries = num_retries
        self._completion = completion_fn
        self._exc: tuple[type[BaseException], ...] = ()
        self._fatal: tuple[type[BaseException], ...] = ()

    def _client(self) -> Callable[..., Any]:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        if not self._exc:  # litellm's typed exceptions -> a missing reply (transient) or ServiceError (fatal)
            ex = litellm.exceptions
            self._fatal = (ex.AuthenticationError, ex.NotFoundError, ex.PermissionDeniedError)
            self._exc = (ex.APIError, ex.APIConnectionError, ex.Timeout, ex.RateLimitError, ex.BadRequestError)
        if self._completion is not None:
            return self._completion
        if self.is_local:
            try:
                from s3core.llm_local import register_local_provider
            except ImportError as e:  # pragma: no cover - depends on the local extra
                raise ConfigError(
                    f"model {self.model} needs the offline provider (s3core.llm_local): install the 'local' extra ({e})"
                ) from None
            register_local_provider()
        self._completion = litellm.completion
        return self._completion

    def generate(
        self,
        prompts: Sequence[PolicyPrompt],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 160,
        temperature: float = 0.0,
    ) -> list[PolicyOutput]:
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
            try:
                resp = client(**kwargs)
            except self._fatal as e:
                raise ServiceError(f"searcher model {self.model}: {type(e).__name__}: {e}") from None
            except self._exc as e:
                return PolicyOutput(text="", error=f"{type(e).__name__}: {str(e)[:300]}")
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

        if self.concurrency == 1 or len(convs) == 1:
            return [one(m) for m in convs]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(convs))) as pool:
            return list(pool.map(one, convs))
