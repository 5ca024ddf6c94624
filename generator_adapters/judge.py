"""`Judge`: the s3 paper's judge_check (Figure 13) through the same litellm machinery as the generator.

    judge = Judge(JudgeConfig(model="local/qwen2.5-coder-0.5b-instruct"))
    judge.check(["The answer is twenty-five."], [["25"]])   # -> [True] / [False] / [None]

`None` means "could not be judged" (the call failed, the reply was neither yes nor no, or there was no response to
judge): a metric must treat it as missing, never as a wrong answer. The judge model is configured on its own
([judge] section), separately from the generator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from generator_adapters.cache import ResponseCache
from generator_adapters.client import Answer, ClientOwner, CompletionFn, LLMClient, run_sync
from generator_adapters.config import JudgeConfig
from generator_adapters.prompts import JUDGE_PROMPTS, prompt_hash, resolve_template
from s3core.errors import S3Error

__all__ = ["Judge", "parse_yes_no"]

_WORD = re.compile(r"[a-z]+")


def parse_yes_no(text: str | None) -> bool | None:
    """Read a judge's reply: True for yes, False for no, None when it says neither (or both, ambiguously).

    >>> [parse_yes_no(t) for t in ["Yes", "no.", "**YES**", "'no'", "Yes, it is.", "No - the answer is yes"]]
    [True, False, True, False, True, False]
    >>> [parse_yes_no(t) for t in ["", "maybe", "yes or no", None, "The answer: yes", "It says yes, not no"]]
    [None, None, None, None, True, None]
    """
    if not text:
        return None
    words = _WORD.findall(text.lower())
    if not words:
        return None
    if words[0] in ("yes", "no"):
        other = "no" if words[0] == "yes" else "yes"
        if other in words[1:3]:  # "yes or no", "yes/no": an echo of the instruction, not a verdict
            return None
        return words[0] == "yes"
    kinds = {w for w in words if w in ("yes", "no")}
    if len(kinds) == 1:
        return kinds.pop() == "yes"
    return None


class Judge(ClientOwner):
    """judge_check: is any golden answer contained in the response? (yes / no / could not tell)"""

    def __init__(
        self,
        cfg: JudgeConfig | None = None,
        cache: ResponseCache | None = None,
        completion_fn: CompletionFn | None = None,
    ) -> None:
        self.cfg = cfg or JudgeConfig.model_validate({})
        self.template = resolve_template(self.cfg.prompt, JUDGE_PROMPTS, {"response", "golden_answers"}, "judge")
        self.client = LLMClient(self.cfg, cache=cache, completion_fn=completion_fn)

    def prompt(self, response: str, golden_answers: Sequence[str]) -> str:
        return self.template.format(response=response, golden_answers=str(list(golden_answers)))

    def prompt_hash(self) -> str:
        return prompt_hash(self.template)

    def _validate(self, responses: Sequence[str | None], golden_answers: Sequence[Sequence[str]]) -> None:
        if isinstance(responses, str):
            raise S3Error("Judge.check expects a list of responses, got one string")
        if len(responses) != len(golden_answers):
            raise S3Error(f"Judge.check got {len(responses)} responses but {len(golden_answers)} golden-answer lists")
        for i, g in enumerate(golden_answers):
            if isinstance(g, str):
                raise S3Error(f"Judge.check: golden_answers[{i}] must be a list of strings, got the string {g!r}")

    async def acheck_answers(
        self, responses: Sequence[str | None], golden_answers: Sequence[Sequence[str]]
    ) -> list[Answer | None]:
        """The judge's raw Answers (None where there was no response to judge)."""
        self._validate(responses, golden_answers)
        todo = [i for i, r in enumerate(responses) if r is not None and len(golden_answers[i]) > 0]
        answers = await self.client.complete_many(
            [[{"role": "user", "content": self.prompt(str(responses[i]), golden_answers[i])}] for i in todo]
        )
        out: list[Answer | None] = [None] * len(responses)
        for i, a in zip(todo, answers, strict=True):
            out[i] = a
        return out

    async def acheck(self, responses: Sequence[str | None], golden_answers: Sequence[Sequence[str]]) -> list[bool | None]:
        """Async judge_check per (response, golden answers) pair: True / False / None (missing)."""
        answers = await self.acheck_answers(responses, golden_answers)
        return [parse_yes_no(a.text) if a is not None and a.ok else None for a in answers]

    def check(self, responses: Sequence[str | None], golden_answers: Sequence[Sequence[str]]) -> list[bool | None]:
        """Blocking judge_check (what eval/metrics.genacc calls)."""
        return run_sync(self.acheck(responses, golden_answers))

    check_sync = check

    def fingerprint(self) -> dict[str, Any]:
        from s3runtime.llm_local import model_fingerprint

        return {
            **model_fingerprint(self.cfg.model, self.cfg.api_base),
            "prompt": self.cfg.prompt if self.cfg.prompt in JUDGE_PROMPTS else "custom",
            "prompt_hash": self.prompt_hash(),
            "decoding": self.client.decoding_params(),
        }

