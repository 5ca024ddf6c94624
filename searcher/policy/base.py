"""The one `Policy` interface every searcher backend implements, and its input / output records.

A policy turns a batch of prompts into a batch of replies. A prompt is one of:

- `str`: a single user message (chat backends apply their chat template);
- `list[dict]`: a chat conversation `[{"role": "user", "content": ...}, {"role": "assistant", ...}, ...]`;
- `TokenPrompt(ids)`: raw token ids to continue from (token backends only: transformers, vLLM). The agent keeps
  every question's token ids itself and appends policy tokens (mask 1) and environment tokens (mask 0) as they come,
  so the trajectory mask is exact by construction; `encode_chat` / `encode` give it the ids to start from.

Every backend applies the same stop-string rule (`searcher.policy.stopping`): the reply ends right after the first
stop string, which is kept in `text` (and its tokens in `token_ids`), so what the agent records is what was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ChatTokenizerMixin", "Message", "Policy", "PolicyOutput", "PolicyPrompt", "TokenPolicy", "TokenPrompt",
    "uses_token_ids",
]

Message = dict[str, str]


@dataclass(frozen=True)
class TokenPrompt:
    """Token ids to continue from (the full context so far: chat-templated prompt + response tokens)."""

    ids: list[int]


PolicyPrompt = str | list[Message] | TokenPrompt


@dataclass
class PolicyOutput:
    """One reply.

    text: what the policy wrote, up to and including the first stop string (if one was hit).
    token_ids / logprobs: the sampled tokens and their sampling log-probabilities (token backends); None otherwise.
    stop: the stop string that ended the reply, or None (end-of-sequence or the token limit).
    error: set when the call failed after retries (text is then ""); the agent records it, never scores it.
    error_code / retry_after_s: the failure's stable code (s3core.errors, e.g. 'upstream_rate_limited') and the
        upstream's Retry-After where it sent one.
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop: str | None = None
    finish_reason: str | None = None
    error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)
    error_code: str | None = None
    retry_after_s: float | None = None


@runtime_checkable
class Policy(Protocol):
    """A batched text policy. `max_batch` is how many questions the agent should advance in lockstep through this
    policy (None = no limit; 1 for a single llama.cpp KV cache, so each question's prefix is reused turn after turn)."""

    name: str
    max_batch: int | None

    def generate(self, prompts: Sequence[PolicyPrompt], *, stop: Sequence[str] = (), max_new_tokens: int = 160,
                 temperature: float = 0.0) -> list[PolicyOutput]: ...


@runtime_checkable
class TokenPolicy(Policy, Protocol):
    """A policy that works on token ids (trainable backends). The agent builds exact token trajectories with it
    when `supports_token_ids` is True (see `uses_token_ids`)."""

    supports_token_ids: bool

    def encode_chat(self, messages: list[Message]) -> list[int]:
        """Chat-template `messages` and add the assistant generation prompt; returns token ids."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` without special tokens (for environment insertions)."""
        ...

    def decode(self, ids: Sequence[int]) -> str: ...


def uses_token_ids(policy: object) -> bool:
    """Whether the agent should drive `policy` with token ids and build a token trajectory."""
    return bool(getattr(policy, "supports_token_ids", False))


class ChatTokenizerMixin:
    """Token ids of prompts for policies that hold a Hugging Face tokenizer (`self.tokenizer`, `self.name`):
    chat prompts through the model's chat template, token prompts as they are."""

    tokenizer: Any
    name: str

    def encode_chat(self, messages: list[Message]) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None) is None:
            from s3core.errors import S3Error

            raise S3Error(f"{self.name}: the tokenizer has no chat template; cannot build a chat prompt")
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(x) for x in ids]

    def encode(self, text: str) -> list[int]:
        return [int(x) for x in self.tokenizer.encode(text, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def _ids(self, prompt: PolicyPrompt) -> list[int]:
        if isinstance(prompt, TokenPrompt):
            return list(prompt.ids)
        if isinstance(prompt, str):
            return self.encode_chat([{"role": "user", "content": prompt}])
        return self.encode_chat(list(prompt))
