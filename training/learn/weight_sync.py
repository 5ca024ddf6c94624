"""The learner's weights as a rollout engine loads them: checkpoint-format (Hugging Face) names and tensors.

    named = learner_weights(model)          # full fine-tuning: the state dict; LoRA: the adapters merged in
    engine.load_weights(named)              # searcher.policy.vllm_policy.VLLMPolicy: in place, same engine
    with lora_merged(model):                # the learner sampling itself (training.rollout.merge_lora): its LoRA
        policy.generate(...)                #   weights merged for the rollout, the originals back after it

A peft LoRA model's adapters are merged out of place (W + scaling * B @ A for each LoRA-wrapped weight, under its plain
name): the engine never sees adapter tensors, and the learner's own weights are never merged and unmerged in place
(which would round them a little differently at every step). Other tensors are detached views of the live
parameters (no copy; the engine copies them into its own layout).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["hf_name", "learner_weights", "lora_merged", "merges_lora"]

_PEFT_PREFIX = "base_model.model."


def hf_name(name: str) -> str | None:
    """The checkpoint name of a peft-wrapped parameter (None for adapter tensors)."""
    if "lora_" in name or "modules_to_save" in name:
        return None
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return re.sub(r"\.base_layer\.", ".", name)


def _lora_delta(module: Any) -> Any:
    """A LoRA-wrapped layer's active adapters' delta (scaling * B @ A, computed by peft's own `get_delta_weight`, so
    fan-in/fan-out layouts and scalings are peft's); None for any other module, or one merged already."""
    get_delta = getattr(module, "get_delta_weight", None)
    lora_a = getattr(module, "lora_A", None)
    if not callable(get_delta) or lora_a is None or getattr(module, "merged", False) or not hasattr(module, "base_layer"):
        return None
    active = [a for a in getattr(module, "active_adapters", []) if a in lora_a]
    if not active:
        return None
    delta = get_delta(active[0])
    for a in active[1:]:
        delta = delta + get_delta(a)
    return delta


def _lora_deltas(model: Any) -> dict[str, Any]:
    """state_dict name of each LoRA-wrapped base weight -> its delta (`_lora_delta`)."""
    deltas: dict[str, Any] = {}
    for name, module in model.named_modules():
        delta = _lora_delta(module)
        if delta is not None:
            deltas[f"{name}.base_layer.weight"] = delta
    return deltas


def merges_lora(setting: str, device: str) -> bool:
    """training.rollout.merge_lora resolved for a learner on `device`: does it sample with its adapters merged?

    >>> merges_lora("auto", "cuda:0"), merges_lora("auto", "cpu"), merges_lora("on", "cpu"), merges_lora("off", "cuda")
    (True, False, True, False)
    """
    return setting == "on" or (setting == "auto" and device.startswith("cuda"))


@contextlib.contextmanager
def lora_merged(model: Any) -> Iterator[int]:
    """Within it, a peft LoRA model computes with its adapters merged into the weights: each LoRA-wrapped layer's base
    weight is replaced by W + scaling * B @ A (a new tensor, one layer at a time) and the adapters are disabled; on
    exit the original tensors are put back (bit-exact: no in-place merge / unmerge rounding). Yields how many weights
    were merged (0: not a LoRA model, nothing changes). For sampling only (no_grad): one matmul a layer instead of
    three, which on a GPU is what a decoding step's time goes to (benchmarks/results/gpu_rollout_levers: the 3B
    shape's transformers rollouts 793 -> 1,680 policy tokens/s on an H200); it holds a merged copy of the targeted
    weights while it lasts."""
    import torch

    swapped: list[tuple[Any, Any]] = []
    try:
        with torch.no_grad():
            for module in model.modules():
                delta = _lora_delta(module)
                if delta is None:
                    continue
                weight = module.base_layer.weight
                original = weight.data
                weight.data = original + delta.to(original.dtype)
                swapped.append((weight, original))
        if not swapped:
            yield 0
            return
        with model.disable_adapter():
            yield len(swapped)
    finally:
        for weight, original in swapped:
            weight.data = original


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
