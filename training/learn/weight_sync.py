"""The learner's weights as a rollout engine loads them: checkpoint-format (Hugging Face) names and tensors.

    named = learner_weights(model)          # full fine-tuning: the state dict; LoRA: the adapters merged in
    engine.load_weights(named)              # searcher.policy.vllm_policy.VLLMPolicy: in place, same engine

A peft LoRA model's adapters are merged out of place (W + scaling * B @ A for each LoRA-wrapped weight, under its plain
name): the engine never sees adapter tensors, and the learner's own weights are never merged and unmerged in place
(which would round them a little differently at every step). Other tensors are detached views of the live
parameters (no copy; the engine copies them into its own layout).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["hf_name", "learner_weights"]

_PEFT_PREFIX = "base_model.model."


def hf_name(name: str) -> str | None:
    """The checkpoint name of a peft-wrapped parameter (None for adapter tensors)."""
    if "lora_" in name or "modules_to_save" in name:
        return None
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return re.sub(r"\.base_layer\.", ".", name)


def _lora_deltas(model: Any) -> dict[str, Any]:
    """state_dict name of each LoRA-wrapped base weight -> the active adapters' delta (scaling * B @ A, computed by
    peft's own `get_delta_weight`, so fan-in/fan-out layouts and scalings are peft's)."""
    deltas: dict[str, Any] = {}
    for name, module in model.named_modules():
        get_delta = getattr(module, "get_delta_weight", None)
        lora_a = getattr(module, "lora_A", None)
        if not callable(get_delta) or lora_a is None or getattr(module, "merged", False) or not hasattr(module, "base_layer"):
            continue
        active = [a for a in getattr(module, "active_adapters", []) if a in lora_a]
        if active:
            delta = get_delta(active[0])
            for a in active[1:]:
                delta = delta + get_delta(a)
            deltas[f"{name}.base_layer.weight"] = delta
    return deltas


def learner_weights(model: Any) -> list[tuple[str, Any]]:
    """(name, tensor) for every weight of `model` under its checkpoint name; a LoRA model's adapters merged in
    (W + scaling * B @ A, out of place: the live weights are never touched, so no merge/unmerge rounding drift)."""
    import torch

    out: list[tuple[str, Any]] = []
    with torch.no_grad():
        deltas = _lora_deltas(model)
        for name, tensor in model.state_dict().items():
            plain = hf_name(name)
            if plain is None:
                continue
            t = tensor.detach()
            if name in deltas:
                t = t + deltas[name].to(t.dtype)
            out.append((plain, t))
    return out
