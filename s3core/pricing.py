"""What an LLM call costs, before and after it is made.

    price = resolve_price("openai/gpt-4o-mini", None, None, None)        # litellm's cost map
    price = resolve_price("openai/my-model", base, 0.15, 0.60)           # the endpoint section's own prices
    price.cost(prompt_tokens=812, completion_tokens=9)                    # dollars
    count_prompt_tokens("openai/gpt-4o-mini", messages)                   # measured before the call

Where a price comes from, in order: the endpoint's section (`input_cost_per_mtok` / `output_cost_per_mtok`, dollars
per million tokens: a negotiated price, a model litellm does not know, a self-hosted server at 0), a `local/` model
(this machine: 0), litellm's cost map. A remote model with none of these has an *unknown* price (`None`), never 0:
its spend is reported as unknown and a budgeted run refuses to start (generator_adapters/budget.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Price", "count_prompt_tokens", "is_local_model", "resolve_price"]

PriceSource = Literal["config", "local", "litellm"]


@dataclass(frozen=True)
class Price:
    """Dollars per million input (prompt) and output (completion) tokens, and where the numbers came from."""

    input_per_mtok: float
    output_per_mtok: float
    source: PriceSource

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Dollars for one call with these token counts.

        >>> Price(0.15, 0.60, "config").cost(1_000_000, 500_000)
        0.45
        """
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


def is_local_model(model: str) -> bool:
    """`local/<name>`: the in-process llama.cpp provider (s3runtime/llm_local.py) costs nothing."""
    return model.startswith("local/")


def _litellm_price(model: str) -> Price | None:
    from s3core.upstream import quiet_litellm

    quiet_litellm()
    import litellm

    cost_map: dict[str, Any] = getattr(litellm, "model_cost", {}) or {}
    names = [model]
    if "/" in model:
        names.append(model.split("/", 1)[1])  # "openai/gpt-4o-mini" is listed as "gpt-4o-mini"
    for name in names:
        info = cost_map.get(name)
        if not isinstance(info, dict):
            continue
        pin, pout = info.get("input_cost_per_token"), info.get("output_cost_per_token")
        if isinstance(pin, int | float) and isinstance(pout, int | float):
            return Price(float(pin) * 1e6, float(pout) * 1e6, "litellm")
    return None


def resolve_price(
    model: str, api_base: str | None, input_cost_per_mtok: float | None, output_cost_per_mtok: float | None
) -> Price | None:
    """The price of `model`: the section's own, 0 for a local model, else litellm's cost map; None = unknown.
    `api_base` does not change the price (a proxy in front of a priced model bills the same); it is accepted so
    callers pass an endpoint as a whole."""
    del api_base
    if input_cost_per_mtok is not None and output_cost_per_mtok is not None:
        return Price(float(input_cost_per_mtok), float(output_cost_per_mtok), "config")
    if is_local_model(model):
        return Price(0.0, 0.0, "local")
    return _litellm_price(model)


def count_prompt_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of a chat call, counted before it is made (litellm's counter: the model's own tokenizer where
    litellm knows it, tiktoken's otherwise, with the chat template's per-message tokens)."""
    from s3core.upstream import quiet_litellm

    quiet_litellm()
    import litellm

    return int(litellm.token_counter(model=model, messages=messages))
