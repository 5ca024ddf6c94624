"""training.base_model may be a trained LoRA searcher (an adapter folder such as searcher/policies/smollm2-135m-hotpotqa,
issue 60 build step 5: RL from the shipped policy). Loaded as it was, the learner got a PeftModel whose frozen adapter
took the place of the LoRA to train (`enable_lora` is idempotent): an update would have trained nothing. Now the adapter
is merged into its own base first and a fresh LoRA trains on top; the reference policy, the checkpoint's adapter/
(naming that base) and `TransformersPolicy.load` of it all give the same policy. On a tiny random Llama."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from searcher.policy.transformers_policy import TransformersPolicy  # noqa: E402
from training.config import TrainingConfig  # noqa: E402
from training.learn.learner import Learner  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IDS = torch.tensor([[1, 6, 7, 2, 8, 9]])


def _logits(model: object) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits.float()  # type: ignore[operator]


@pytest.fixture
def trained_adapter(tiny_lm_dir: Path, tmp_path: Path) -> Path:
    """A LoRA adapter over the tiny model whose weights are not the identity (as a trained searcher's are not)."""
    pol = TransformersPolicy.load(str(tiny_lm_dir))
    pol.enable_lora(r=4, alpha=8)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return pol.save(tmp_path / "shipped")


@pytest.mark.parametrize("lora", [True, False])
def test_rl_starts_from_the_adapter_policy_and_trains(trained_adapter: Path, tiny_lm_dir: Path, tmp_path: Path,
                                                       lora: bool) -> None:
    shipped = _logits(TransformersPolicy.load(str(trained_adapter), merge_adapter=True).model)
    assert not torch.allclose(shipped, _logits(TransformersPolicy.load(str(tiny_lm_dir)).model), atol=1e-3)
    tc = TrainingConfig(base_model=str(trained_adapter), learner={"lora": lora, "lora_r": 4, "lora_alpha": 8},
                        update={"kl_coef": 0.001})
    learner = Learner(tc, "cpu", tmp_path / "run", None)
    assert torch.allclose(_logits(learner.model), shipped, atol=1e-5)  # the shipped policy, before any update
    trainable = [n for n, p in learner.model.named_parameters() if p.requires_grad]
    if lora:
        assert trainable and all("lora_" in n for n in trainable)  # a fresh LoRA to train, not the frozen one
        with learner.model.disable_adapter():
            assert torch.allclose(_logits(learner.model), shipped, atol=1e-5)  # the reference = the shipped policy
        with torch.no_grad():
            for n, p in learner.model.named_parameters():
                if "lora_B" in n:
                    p.add_(0.05)  # as an update would move it
        learner.save_adapter(tmp_path / "adapter")
        again = TransformersPolicy.load(str(tmp_path / "adapter"))
        assert torch.allclose(_logits(again.model), _logits(learner.model), atol=1e-4)  # adapter/ alone is the policy
    else:
        assert len(trainable) == len(list(learner.model.parameters()))
        assert torch.allclose(_logits(learner.ref_model), shipped, atol=1e-5)


def test_the_vllm_rollout_engine_is_given_the_adapter_merged(trained_adapter: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """training.rollout.engine = 'vllm' with a LoRA base_model: vLLM loads full weights, so the engine gets the adapter
    merged into its base (cached), whose outputs are the adapter policy's (the engine itself is recorded, not started:
    tests/integration/test_vllm_engine.py runs the real one)."""
    from s3.config import load_config
    from searcher.policy import vllm_policy
    from training.rollouts.executors import rollout_policy

    given: list[str] = []
    monkeypatch.setattr(vllm_policy, "VLLMPolicy", lambda path, engine: given.append(path) or "engine")
    monkeypatch.setenv("S3_HF_CACHE", str(tmp_path / "cache"))
    cfg = load_config(None, [f"training.base_model={trained_adapter}", "training.rollout.engine=vllm"])
    assert rollout_policy(cfg, "cpu") == "engine"
    merged = Path(given[0])
    assert merged.is_relative_to(tmp_path / "cache") and (merged / "config.json").is_file()
    assert torch.allclose(_logits(TransformersPolicy.load(str(merged)).model),
                          _logits(TransformersPolicy.load(str(trained_adapter)).model), atol=1e-4)
