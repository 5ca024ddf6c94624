"""A checkpoint as a model others load: `export_policy` (`s3 train export`: a plain Hugging Face dir, a LoRA checkpoint
merged into its base) and `export_adapter` (a merged policy folded back into one small LoRA adapter)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from s3core.errors import S3Error
from training.rundir import policy_checkpoint

__all__ = ["export_adapter", "export_policy"]


def export_policy(checkpoint: str | Path, out: str | Path, base_model: str | None = None) -> Path:
    """Export a checkpoint (or a run directory's chosen one: checkpoints/best, else latest) as a plain Hugging Face dir.
    A LoRA checkpoint (adapter/) is merged into its base."""
    ckpt = policy_checkpoint(Path(checkpoint)) or Path(checkpoint)
    out = Path(out)
    if (ckpt / "adapter").is_dir() and base_model:
        from peft import PeftModel

        from searcher.policy.transformers_policy import TransformersPolicy
        from training.learn.learner import export_model

        pol = TransformersPolicy.load(base_model)
        merged = PeftModel.from_pretrained(pol.model, str(ckpt / "adapter"))
        export_model(merged, pol.tokenizer, out, lora=True)
        return out
    if not (ckpt / "policy").is_dir():
        raise S3Error(f"{ckpt} is not a training checkpoint (no policy/ directory)")
    if out.exists():
        raise S3Error(f"{out} exists; choose a new directory")
    shutil.copytree(ckpt / "policy", out)
    return out


def export_adapter(model: str | Path, base_model: str, out: str | Path, rank: int, tol: float = 1e-3,
                   dtype: str = "float16") -> dict[str, Any]:
    """A merged policy as one small LoRA adapter on `base_model`: what ships when a run started from an earlier merged
    run (phase 1d: the warm-up's adapter merged, then a fresh one trained), whose plain model dir is 0.5 GB. Every
    tensor of `model` must equal the base's except 2-D linear weights; each changed one becomes the rank-`rank`
    truncated SVD of its difference (B = U·sqrt(S), A = sqrt(S)·Vh; lora_alpha = rank, so the scale is 1). Two merged
    rank-8 adapters are exactly rank 16. The factors are stored as `dtype` (float16 by default: half float32's bytes,
    and its 10-bit mantissa keeps the rounding near 2e-4 of the difference, where bfloat16's 7 bits would cost ~2e-3).
    Raises S3Error when anything else changed or when a layer's remainder (the norm of what the stored factors miss,
    truncation and rounding together, over the difference's) exceeds `tol`. `model` may itself be an adapter on
    `base_model` (re-exported at another rank or dtype). Returns the layer count, the largest remainder and the
    adapter's size."""
    import torch
    from peft import LoraConfig
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from searcher.policy.transformers_policy import resolve_checkpoint

    out = Path(out)
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in dtypes:
        raise S3Error(f"dtype {dtype!r}: choose one of {', '.join(dtypes)}")
    if out.exists():
        raise S3Error(f"{out} exists; choose a new directory")
    where = resolve_checkpoint(str(model))
    base_dir = resolve_checkpoint(base_model)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    if isinstance(where, Path) and (where / "adapter_config.json").is_file():
        # an adapter already (re-exported at another rank or dtype): merged on a copy of the base (merging changes
        # the model it wraps)
        import copy

        from peft import PeftModel

        tuned = PeftModel.from_pretrained(copy.deepcopy(base), str(where)).merge_and_unload()
    else:
        tuned = AutoModelForCausalLM.from_pretrained(str(where), dtype=torch.float32)
    linear = {name for name, mod in base.named_modules() if isinstance(mod, torch.nn.Linear)}
    base_sd = base.state_dict()
    tensors: dict[str, Any] = {}
    targets: set[str] = set()
    worst = 0.0
    for name, w in tuned.state_dict().items():
        if name not in base_sd or base_sd[name].shape != w.shape:
            raise S3Error(f"{where} and {base_model} are different architectures ({name})")
        diff = (w - base_sd[name]).double()
        if not diff.abs().max().item():
            continue
        module = name.removesuffix(".weight")
        if module not in linear or not name.endswith(".weight") or module.endswith("lm_head"):
            raise S3Error(f"{name} differs from {base_model} and is not a LoRA target (a linear layer's weight): "
                          "not an adapter's merge")
        u, s, vh = torch.linalg.svd(diff, full_matrices=False)
        root = s[:rank].sqrt()
        lora_b = (u[:, :rank] * root).to(dtypes[dtype]).contiguous()
        lora_a = (root[:, None] * vh[:rank]).to(dtypes[dtype]).contiguous()
        rest = float((diff - lora_b.double() @ lora_a.double()).norm() / diff.norm())
        worst = max(worst, rest)
        if rest > tol:
            raise S3Error(f"{name}: a rank-{rank} {dtype} adapter leaves {rest:.2e} of the difference (> {tol:g}); "
                          f"raise the rank (the difference has {int((s > s[0] * 1e-6).sum())} singular values)"
                          + ("" if dtype == "float32" else " or store float32"))
        tensors[f"base_model.model.{module}.lora_B.weight"] = lora_b
        tensors[f"base_model.model.{module}.lora_A.weight"] = lora_a
        targets.add(module.rsplit(".", 1)[-1])
    if not targets:
        raise S3Error(f"{where} equals {base_model}: nothing to export")
    out.mkdir(parents=True)
    LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=sorted(targets), bias="none",
               task_type="CAUSAL_LM", base_model_name_or_path=base_model).save_pretrained(str(out))
    save_file(tensors, str(out / "adapter_model.safetensors"))
    return {"layers": len(tensors) // 2, "targets": sorted(targets), "max_remainder": worst,
            "bytes": (out / "adapter_model.safetensors").stat().st_size}
