"""A scripted policy: replies come from a function of the prompt. For unit tests, benchmarks and demos of the loop
mechanics; it is never a stand-in for a real model in integration tests.

    ScriptedPolicy(lambda prompt, i: '<search_complete>True</search_complete>')

With `tokenizer=` (any object with `encode(text) -> ids`, `decode(ids) -> text`, `encode_chat(messages) -> ids`)
it is a `TokenPolicy` and returns token ids, so trajectory masks can be tested with hand-written ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from searcher.policy.base import Message, PolicyOutput, PolicyPrompt, TokenPrompt
from searcher.policy.stopping import truncate_text

__all__ = ["ScriptedPolicy", "prompt_text"]


def prompt_text(prompt: PolicyPrompt, decode: Callable[[Sequence[int]], str] | None = None) -> str:
    """The whole text of a prompt (conversation contents joined; token prompts decoded)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, TokenPrompt):
        if decode is None:
            raise TypeError("a TokenPrompt needs a tokenizer to be read")
        return decode(prompt.ids)
    return "".join(m.get("content", "") for m in prompt)


class ScriptedPolicy:
    """Replies = `script(prompt_text, call_index_within_batch)`; the shared stop rule is applied to them.

    delay_s: every batched call lasts this long, the script's own work included (a stand-in for a model's latency
        in benchmarks: a "20 ms policy" answers a batch in 20 ms, not 20 ms plus the time it took to script it);
        longer only when the script itself takes longer.
    calls: every batch received, for assertions (`len(policy.calls)` = number of batched calls).
    """

    def __init__(
        self,
        script: Callable[[str, int], str],
        *,
        name: str = "scripted",
        delay_s: float = 0.0,
        max_batch: int | None = None,
        tokenizer: Any = None,
    ) -> None:
        self.script = script
        self.name = name
        self.delay_s = delay_s
        self.max_batch = max_batch
        self.tokenizer = tokenizer
        self.calls: list[list[PolicyPrompt]] = []

    @property
    def supports_token_ids(self) -> bool:
        """True with a tokenizer: the agent then builds token trajectories through this policy."""
        return self.tokenizer is not None

    # TokenPolicy methods (only meaningful with a tokenizer)
    def encode_chat(self, messages: list[Message]) -> list[int]:
        return list(self.tokenizer.encode_chat(messages))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(ids))

    def generate(self, prompts: Sequence[PolicyPrompt], *, stop: Sequence[str] = (), max_new_tokens: int = 160,
                 temperature: float = 0.0) -> list[PolicyOutput]:
        t0 = time.perf_counter()
        self.calls.append(list(prompts))
        decode = self.decode if self.tokenizer is not None else None
        outs = []
        for i, p in enumerate(prompts):
            text = prompt_text(p, decode)
            reply, hit = truncate_text(self.script(text, i), stop)
            ids = self.encode(reply) if self.tokenizer is not None else None
            outs.append(
                PolicyOutput(
                    text=reply,
                    token_ids=ids,
                    logprobs=[0.0] * len(ids) if ids is not None else None,
                    prompt_tokens=len(text.split()),
                    completion_tokens=len(ids) if ids is not None else len(reply.split()),
                    stop=hit,
                    finish_reason="stop" if hit else "eos",
                )
            )
        if self.delay_s:
            left = self.delay_s - (time.perf_counter() - t0)
            if left > 0:
                time.sleep(left)
        return outs

