"""`Generator`: the frozen generator G(Q, D) through litellm, batched and async.

    gen = Generator(GeneratorConfig(model="local/qwen2.5-coder-0.5b-instruct"))
    answers = gen.answer_sync(["Who wrote Hamlet?"], [[Document(id="1", title="Hamlet", text="...")]])
    answers[0].text, answers[0].ok, gen.stats()

`contexts=None` asks without retrieval (the no-context prompt). Any litellm model works by configuration alone:
`openai/gpt-4o-mini` (api_key_env="OPENAI_API_KEY"), `anthropic/claude-3-haiku-20240307`, `hosted_vllm/<name>`
with api_base, or `openai/<name>` with api_base pointing at `s3`'s own llama.cpp server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generator_adapters.cache import ResponseCache
from generator_adapters.client import Answer, ClientOwner, CompletionFn, LLMClient, run_sync
from generator_adapters.config import GeneratorConfig
from generator_adapters.prompts import (
    ANSWER_PROMPTS,
    NO_CONTEXT_PROMPTS,
    prompt_hash,
    render_context,
    resolve_template,
)
from s3core.errors import S3Error
from s3core.types import Document

__all__ = ["Generator"]


class Generator(ClientOwner):
    """Answers questions (optionally with retrieved documents) with one configured frozen LLM."""

    def __init__(
        self,
        cfg: GeneratorConfig | None = None,
        cache: ResponseCache | None = None,
        completion_fn: CompletionFn | None = None,
    ) -> None:
        self.cfg = cfg or GeneratorConfig.model_validate({})
        # resolve both templates now, so a bad prompt setting fails before any call
        self.template = resolve_template(self.cfg.prompt, ANSWER_PROMPTS, {"context", "question"}, "answer")
        self.template_no_context = resolve_template(
            self.cfg.prompt_no_context, NO_CONTEXT_PROMPTS, {"question"}, "no-context"
        )
        self.client = LLMClient(self.cfg, cache=cache, completion_fn=completion_fn)

    def prompt(self, question: str, documents: Sequence[Document] | None) -> str:
        """The exact user message sent for one question."""
        if documents is None:
            return self.template_no_context.format(question=question)
        return self.template.format(context=render_context(documents), question=question)

    def messages(self, question: str, documents: Sequence[Document] | None) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt(question, documents)}]

    def prompt_hash(self) -> str:
        """Hash of both templates (with and without context): runs with equal hashes used equal prompts."""
        return prompt_hash(self.template, self.template_no_context)

    async def answer(
        self, questions: Sequence[str], contexts: Sequence[Sequence[Document]] | None = None
    ) -> list[Answer]:
        """One Answer per question, in order. `contexts[i]` are question i's documents; None = no retrieval."""
        if isinstance(questions, str):
            raise S3Error("Generator.answer expects a list of questions, got one string")
        if contexts is not None and len(contexts) != len(questions):
            raise S3Error(f"Generator.answer got {len(questions)} questions but {len(contexts)} context lists")
        batch = [
            self.messages(q, None if contexts is None else list(contexts[i])) for i, q in enumerate(questions)
        ]
        return await self.client.complete_many(batch)

    def answer_sync(
        self, questions: Sequence[str], contexts: Sequence[Sequence[Document]] | None = None
    ) -> list[Answer]:
        """Blocking `answer` (also usable when the calling thread already runs an event loop)."""
        return run_sync(self.answer(questions, contexts))

    def fingerprint(self) -> dict[str, Any]:
        """What a run records: litellm model string, api_base, GGUF sha256 for local models, prompt hash, decoding."""
        from s3runtime.llm_local import model_fingerprint

        return {
            **model_fingerprint(self.cfg.model, self.cfg.api_base),
            "prompt": self.cfg.prompt,
            "prompt_no_context": self.cfg.prompt_no_context,
            "prompt_hash": self.prompt_hash(),
            "decoding": self.client.decoding_params(),
        }

