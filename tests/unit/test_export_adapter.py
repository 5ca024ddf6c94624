"""training/learn/export.py `export_adapter`: a policy made by merging two LoRA adapters one after another (phase 1d's
policy: the warm-up's adapter merged, then a fresh one) ships as one rank-2r adapter that gives the same logits; what
is not an adapter's merge is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3core.errors import S3Error

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _tiny(path: Path) -> Path:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(path))
    return path


def _merge_adapter(src: Path, out: Path, seed: int) -> Path:
    """src + a random rank-4 LoRA on every linear layer, merged (what `export_policy` writes)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(src))
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = torch.randn_like(p) * 0.05
    model.merge_and_unload().save_pretrained(str(out))
    return out


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_two_merged_adapters_ship_as_one_rank_8_adapter_with_the_same_logits(tmp_path: Path) -> None:
    from training.learn.export import export_adapter

    base = _tiny(tmp_path / "base")
    twice = _merge_adapter(_merge_adapter(base, tmp_path / "once", 1), tmp_path / "twice", 2)
    info = export_adapter(twice, str(base), tmp_path / "adapter", rank=8, dtype="float32")
    assert info["layers"] == 2 * 7 and info["max_remainder"] < 1e-5
    assert set(info["targets"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
    want = _logits(transformers.AutoModelForCausalLM.from_pretrained(str(twice)), ids)
    loaded = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(str(base)),
                                            str(tmp_path / "adapter"))
    got = _logits(loaded, ids)
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    plain = _logits(transformers.AutoModelForCausalLM.from_pretrained(str(base)), ids)
    assert (plain - want).abs().max() > 1e-2  # the adapters changed the model: the check above can fail


def test_too_small_a_rank_and_a_changed_non_linear_tensor_are_refused_by_name(tmp_path: Path) -> None:
    from training.learn.export import export_adapter

    base = _tiny(tmp_path / "base")
    twice = _merge_adapter(_merge_adapter(base, tmp_path / "once", 1), tmp_path / "twice", 2)
    with pytest.raises(S3Error, match=r"rank-4 float16 adapter leaves .* raise the rank"):
        export_adapter(twice, str(base), tmp_path / "a4", rank=4)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(base))
    model.model.norm.weight.data += 0.1
    model.save_pretrained(str(tmp_path / "norm"))
    with pytest.raises(S3Error, match=r"model\.norm\.weight differs .* not a LoRA target"):
        export_adapter(tmp_path / "norm", str(base), tmp_path / "a8", rank=8)
    with pytest.raises(S3Error, match="nothing to export"):
        export_adapter(base, str(base), tmp_path / "same", rank=8)


def test_the_default_float16_adapter_is_half_the_bytes_and_its_rounding_is_measured(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from training.learn.export import export_adapter

    base = _tiny(tmp_path / "base")
    twice = _merge_adapter(_merge_adapter(base, tmp_path / "once", 1), tmp_path / "twice", 2)
    f32 = export_adapter(twice, str(base), tmp_path / "a32", rank=8, dtype="float32")
    f16 = export_adapter(twice, str(base), tmp_path / "a16", rank=8)
    assert {t.dtype for t in load_file(str(tmp_path / "a16" / "adapter_model.safetensors")).values()} == {torch.float16}
    assert f16["bytes"] < 0.6 * f32["bytes"]
    # the remainder now counts the rounding: above the exact rank-8 truncation, below the tolerance
    assert f32["max_remainder"] < 1e-5 < f16["max_remainder"] < 1e-3
    ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
    want = _logits(transformers.AutoModelForCausalLM.from_pretrained(str(twice)), ids)
    loaded = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(str(base)),
                                            str(tmp_path / "a16"))
    assert torch.allclose(_logits(loaded, ids), want, atol=1e-3)
    # the float32 adapter itself re-exported: merged on the base, the same rank-8 factors, rounded the same way
    again = export_adapter(tmp_path / "a32", str(base), tmp_path / "again", rank=8)
    assert again["bytes"] == f16["bytes"] and abs(again["max_remainder"] - f16["max_remainder"]) < 1e-4
    with pytest.raises(S3Error, match=r"rank-8 bfloat16 adapter leaves .* store float32"):
        export_adapter(twice, str(base), tmp_path / "abf", rank=8, tol=1e-4, dtype="bfloat16")
    with pytest.raises(S3Error, match="dtype 'int8'"):
        export_adapter(twice, str(base), tmp_path / "a8", rank=8, dtype="int8")
