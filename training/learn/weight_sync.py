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
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["hf_name", "learner_weights", "lora_merged", "merge_budget", "merges_lora"]

_PEFT_PREFIX = "base_model.model."


def hf_name(name: str) -> str | None:
    """The checkpoint name of a peft-wrapped parameter (None for adapter tensors)."""
    if "lora_" in name or "modules_to_save" in name:
        return None
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return re.sub(r"\.base_layer\.", ".", name)


def _active_lora(module: Any) -> list[str]:
    """The active linear adapters of a LoRA-wrapped layer not merged in place ([] for any other module)."""
    lora_a = getattr(module, "lora_A", None)
    if (not callable(getattr(module, "get_delta_weight", None)) or lora_a is None or getattr(module, "merged", False)
            or not hasattr(module, "base_layer")):
        return []
    return [a for a in getattr(module, "active_adapters", []) if a in lora_a]


def _lora_delta(module: Any, active: list[str]) -> Any:
    """The `active` adapters' delta of a LoRA layer (scaling * B @ A, computed by peft's own `get_delta_weight`, so
    fan-in/fan-out layouts and scalings are peft's)."""
    delta = module.get_delta_weight(active[0])
    for a in active[1:]:
        delta = delta + module.get_delta_weight(a)
    return delta


def _uses_dora(module: Any) -> bool:
    """Does a LoRA layer's active adapter use DoRA (a magnitude vector that W + BA leaves out)?"""
    magnitude = getattr(module, "lora_magnitude_vector", None) or {}
    return any(a in magnitude for a in getattr(module, "active_adapters", []))


def _lora_deltas(model: Any) -> dict[str, Any]:
    """state_dict name of each LoRA-wrapped base weight -> its active adapters' delta (`_lora_delta`)."""
    deltas: dict[str, Any] = {}
    for name, module in model.named_modules():
        active = _active_lora(module)
        if active:
            deltas[f"{name}.base_layer.weight"] = _lora_delta(module, active)
    return deltas


def merges_lora(setting: str, device: str) -> bool:
    """training.rollout.merge_lora resolved for a learner on `device`: does it sample with its adapters merged?

    >>> merges_lora("auto", "cuda:0"), merges_lora("auto", "cpu"), merges_lora("on", "cpu"), merges_lora("off", "cuda")
    (True, False, True, False)
    """
    return setting == "on" or (setting == "auto" and device.startswith("cuda"))


def _mergeable_weight(module: Any, shared: set[int]) -> Any:
    """The plain floating-point base weight of a LoRA layer that `lora_merged` may replace; None for one it leaves to
    its live adapter (DoRA, a quantized or tied base weight)."""
    import torch

    weight = getattr(getattr(module, "base_layer", None), "weight", None)
    if (_uses_dora(module) or type(weight) is not torch.nn.Parameter or not weight.dtype.is_floating_point
            or weight.data_ptr() in shared):
        return None
    return weight


def merge_budget(model: Any) -> float | None:
    """What `lora_merged` may hold on `model`'s GPU: half its free memory (the rest for the rollout's KV cache);
    None (no limit) on the CPU."""
    import torch

    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return 0.5 * float(free)


@contextlib.contextmanager
def lora_merged(model: Any, budget_bytes: float | None = None) -> Iterator[int]:
    """Within it, a peft LoRA model computes with its linear adapters merged into the weights: each such layer's base
    weight is replaced by W + scaling * B @ A (a new tensor, one layer at a time) and that layer's adapter is switched
    off; on exit the original tensors are put back (bit-exact: no in-place merge / unmerge rounding) and the adapters
    switched on. A layer it cannot merge exactly keeps its live adapter (an embedding's LoRA, DoRA, a quantized base
    weight, one tied to another module's; modules_to_save are not touched). Yields how many weights were merged (0:
    nothing changes, e.g. not a LoRA model, or the merged copies would take more than `budget_bytes`).

    For sampling only (no_grad; the learner samples itself between updates, never beside one): one matmul a layer
    instead of three, which on a GPU is what a decoding step's time goes to (benchmarks/results/gpu_rollout_levers:
    the 3B shape's transformers rollouts 793 -> 1,680-2,002 policy tokens/s on an H200, measured with peft's in-place
    merge, the same arithmetic). It holds a merged copy of the targeted weights while it lasts (~5.5 GB for the 3B,
    ~13 GB for the 7B in bf16). Merged into bf16 weights, a delta much smaller than a weight's last bit is partly
    rounded away, so the sampling policy lags the learner's a little (rollout/logprob_gap_* reports it)."""
    import torch

    counts = Counter(p.data_ptr() for _, p in model.named_parameters(remove_duplicate=False))
    shared = {ptr for ptr, n in counts.items() if n > 1}
    layers = [(m, active, w) for m in model.modules()
              if (active := _active_lora(m)) and not getattr(m, "disable_adapters", False)
              and (w := _mergeable_weight(m, shared)) is not None]
    need = sum(w.numel() * w.element_size() for _, _, w in layers)
    if not layers or (budget_bytes is not None and need > budget_bytes):
        yield 0
        return
    swapped: list[tuple[Any, Any, Any]] = []
    try:
        with torch.no_grad():
            for module, active, weight in layers:
                original = weight.data
                weight.data = original + _lora_delta(module, active).to(original.dtype)
                swapped.append((module, weight, original))
                module.enable_adapters(False)
        yield len(swapped)
    finally:
        for module, weight, original in swapped:
            weight.data = original
            module.enable_adapters(True)


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
