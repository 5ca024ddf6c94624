"""A LoRA policy loaded for inference (s3 search / serve / mcp / eval: searcher.policy.load_policy) is merged into its
base (peft's merge_and_unload): a plain transformers model, the same greedy tokens and logits as the adapter on its
base; the trainer's loader (TransformersPolicy.load) keeps the adapter trainable. Real SmolLM2-135M, a LoRA adapter
with non-zero weights saved and loaded back."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def test_inference_load_merges_the_adapter_and_answers_the_same(tmp_path: Path) -> None:
    from searcher.config import SearcherConfig
    from searcher.policy import TokenPrompt, load_policy
    from searcher.policy.transformers_policy import TransformersPolicy

    pol = TransformersPolicy.load("smollm2-135m-instruct")
    pol.enable_lora(r=4)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero (the adapter a no-op): make it change the function
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    adapter = pol.save(tmp_path / "adapter")
    assert (adapter / "adapter_config.json").is_file()

    served = load_policy(SearcherConfig(policy="transformers", policy_path=str(adapter), runtime="torch"))
    trained = TransformersPolicy.load(str(adapter))  # what the trainer resumes from: the adapter stays
    assert isinstance(trained.model, peft.PeftModel)
    assert not isinstance(served.model, peft.PeftModel)  # type: ignore[attr-defined]
    assert not any("lora" in n for n, _ in served.model.named_parameters())  # type: ignore[attr-defined]

    ids = trained.encode_chat([{"role": "user", "content": "Who wrote Critique of Pure Reason?"}])
    x = torch.tensor([ids])
    with torch.no_grad():
        a = trained.model(input_ids=x).logits
        b = served.model(input_ids=x).logits  # type: ignore[attr-defined]
        with trained.model.disable_adapter():
            base = trained.model(input_ids=x).logits
    # merged weights sum in another order: fp32 rounding reached 2e-4 on logits of ~28 (a CI run); the adapter itself
    # moves the logits by orders of magnitude more, so the tolerance still tells a merged adapter from a lost one
    assert (a - base).abs().max() > 1e-2
    assert torch.allclose(a, b, atol=1e-3), (a - b).abs().max()
    (t1,) = trained.generate([TokenPrompt(ids)], max_new_tokens=8)
    (t2,) = served.generate([TokenPrompt(ids)], max_new_tokens=8)  # type: ignore[call-arg]
    assert t1.token_ids == t2.token_ids
