"""Config sections owned by the generator layer: [generator], [judge], [generator_server]."""

from __future__ import annotations

from pydantic import Field, model_validator

from s3core.configbase import Section
from searcher.config import VLLMConfig


class LLMCallConfig(Section):
    model: str = Field(
        "local/qwen2.5-coder-0.5b-instruct",
        description="litellm model string: 'local/<name>' (offline llama.cpp), 'openai/gpt-4o-mini', "
        "'anthropic/claude-3-haiku-20240307', 'hosted_vllm/<name>' with api_base, ...",
    )
    api_base: str | None = Field(None, description="Base URL for served models (vLLM, llama.cpp server, proxies).")
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding this endpoint's key (never the key). Keys are never "
        "picked up implicitly: without it the endpoint gets a placeholder key, never OPENAI_API_KEY or another "
        "provider variable.",
    )
    temperature: float = Field(0.0, ge=0, description="Decoding temperature.")
    max_tokens: int = Field(64, ge=1, description="Maximum answer tokens.")
    seed: int | None = Field(None, description="Sampling seed passed to the provider (None = provider default).")
    concurrency: int = Field(8, ge=1, description="Calls in flight at once (in total, over all client processes).")
    processes: int = Field(
        1,
        ge=1,
        description="Client processes. >1 splits each batch of calls over that many worker processes, each with its "
        "own event loop (concurrency is shared out among them): for high concurrency against fast servers, where "
        "litellm's few ms of CPU per call saturate one Python process. Served and API models only, not local/.",
    )
    timeout_s: float = Field(120.0, gt=0, description="Per-call timeout.")
    max_retries: int = Field(3, ge=0, description="Retries on rate limits, timeouts, connection errors and 5xx.")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles each try.")
    cache_path: str | None = Field(".s3cache/llm_cache.sqlite", description="sqlite response cache (None = off).")
    input_cost_per_mtok: float | None = Field(
        None, ge=0,
        description="Dollars per million prompt tokens, for a model litellm's cost map does not know (or a negotiated "
        "price; 0 for a self-hosted server). None = litellm's price; a remote model with neither has an unknown cost "
        "(never 0) and a budgeted run refuses it. Set both prices or neither.",
    )
    output_cost_per_mtok: float | None = Field(
        None, ge=0, description="Dollars per million completion tokens (see input_cost_per_mtok)."
    )

    @model_validator(mode="after")
    def _both_prices(self) -> LLMCallConfig:
        if (self.input_cost_per_mtok is None) != (self.output_cost_per_mtok is None):
            raise ValueError("set both input_cost_per_mtok and output_cost_per_mtok (dollars per million tokens), "
                             "or neither")
        return self


class GeneratorConfig(LLMCallConfig):
    prompt: str = Field("s3_answer", description="'s3_answer' (the s3 paper's Figure 12) or a template with {context} and {question}.")
    prompt_no_context: str = Field(
        "s3_no_context",
        description="Prompt used without retrieval (contexts=None): 's3_no_context' or a template with {question}.",
    )


class JudgeConfig(LLMCallConfig):
    max_tokens: int = Field(4, ge=1, description="The judge answers 'yes' or 'no'.")
    prompt: str = Field("s3_judge", description="'s3_judge' (Figure 13) or a template with {response} and {golden_answers}.")


class GeneratorServerConfig(Section):
    """`s3 serve-generator`: a frozen generator behind vLLM's OpenAI-compatible server, reached through litellm as
    generator.model = "hosted_vllm/<served_name>" with generator.api_base = "http://<host>:<port>/v1"."""

    model: str = Field(
        "smollm2-135m-instruct",
        description="What to serve: an offline model name (converted from its GGUF once), a HF model dir, or a hub name.",
    )
    served_name: str | None = Field(None, description="The model name clients send (None = `model`).")
    host: str = Field("127.0.0.1", description="Bind address (loopback by default; the engine's own sockets stay on it too).")
    port: int = Field(8010, ge=1, le=65535, description="Port of the OpenAI-compatible server.")
    vllm: VLLMConfig = Field(
        default_factory=lambda: VLLMConfig(in_process=False),
        description="The serving engine (vllm serve runs its engine core in its own process).",
    )
