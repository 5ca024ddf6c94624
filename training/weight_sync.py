"""The learner's weights as a rollout engine loads them: checkpoint-format (Hugging Face) names and tensors.

    named = learner_weights(model)          # full fine-tuning: the state dict; LoRA: the adapters merged in
    engine.load_weights(named)              # searcher.policy.vllm_policy.VLLMPolicy: in place, same engine

A peft LoRA model is merged for the duration of the read (`merge_adapter`, read the base layers under their plain
names, `unmerge_adapter`), as verl does before its sync: the engine never sees adapter tensors, only W + BA.
Tensors are detached views of the live parameters (no copy; the engine copies them into its own layout).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
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


@contextlib.contextmanager
def _merged(model: Any) -> Iterator[None]:
    merge = getattr(model, "merge_adapter", None)
    if not callable(merge):
        yield
        return
    import torch

    with torch.no_grad():
        merge()
    try:
        yield
    finally:
        with torch.no_grad():
            model.unmerge_adapter()


def learner_weights(model: Any) -> list[tuple[str, Any]]:
    """(name, tensor) for every weight of `model` under its checkpoint name; a LoRA model's adapters merged in."""
    out: list[tuple[str, Any]] = []
    with _merged(model):
        for name, tensor in model.state_dict().items():
            plain = hf_name(name)
            if plain is None:
                continue
            # the merged values must outlive the unmerge: copy only what merging changed (LoRA targets)
            t = tensor.detach()
            out.append((plain, t.clone() if ".base_layer." in name else t))
    return out
