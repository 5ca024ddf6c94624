"""A fresh run is seeded (training/run/build.py `build_training` -> `new_learner`: torch.manual_seed(training.seed) before the
policy, its LoRA adapters and the critic are made): two fresh builds of one config start from the same adapter weights
whatever torch's global generator held before, and another training.seed starts from other ones.

The real builder and the real Learner (a tiny random Llama with LoRA, GRPO); only the retriever and the rollout
executor, which hold no random weights, are stand-ins (no index, no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


class _NoExecutor:
    """The rollout executor's place: a build makes none here (close() is all the parts ask of it)."""

    def close(self) -> None:
        pass


def _adapters(tiny_policy_dir: Path, run_dir: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The trainable (LoRA) weights of a fresh build_training of the tiny policy with training.seed = `seed`."""
    from s3.config import load_config
    from s3core.types import QAExample
    from training.prep.data import TrainingSet
    from training.run import build

    monkeypatch.setattr(build, "build_retriever", lambda cfg, index_dir: object())
    monkeypatch.setattr(build, "build_executor", lambda cfg, **kw: _NoExecutor())
    cfg = load_config(None, [f"training.base_model={tiny_policy_dir}", f"training.output_dir={run_dir}",
                             f"training.seed={seed}", "training.learner.lora=true", "training.learner.lora_r=2",
                             "training.algorithm=grpo", "training.reward=r1_searcher_stage1",
                             "training.heldout.questions=0", "training.learner.device=cpu",
                             "training.learner.torch_threads=1"])
    examples = [QAExample(id=f"q{i}", question="?", golden_answers=["a"]) for i in range(2)]
    data = TrainingSet(directory=run_dir, examples=examples, baseline={}, index_dir=run_dir / "index", manifest={})
    torch.rand(7)  # the global generator moves on between builds: only the build's own seed can make them equal
    parts = build.build_training(cfg, build.Prepared(data), log=lambda s: None)
    try:
        assert parts.resume_dir is None  # a fresh run
        model = parts.learner.model  # type: ignore[attr-defined]
        out = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    finally:
        parts.close()
    assert out and all("lora_" in n for n in out)
    return out


def test_two_fresh_builds_of_one_config_start_from_the_same_adapters_and_another_seed_does_not(
        tiny_policy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = torch.get_num_threads()
    try:
        a = _adapters(tiny_policy_dir, tmp_path / "a", 3, monkeypatch)
        b = _adapters(tiny_policy_dir, tmp_path / "b", 3, monkeypatch)
        c = _adapters(tiny_policy_dir, tmp_path / "c", 4, monkeypatch)
    finally:
        torch.set_num_threads(n)  # build_training sets training.learner.torch_threads on the CPU
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    random_init = [k for k in a if "lora_A" in k]  # lora_B starts at zero whatever the seed
    assert random_init and all(not torch.equal(a[k], c[k]) for k in random_init)
