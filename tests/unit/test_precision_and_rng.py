"""Issue 29's defects 2 and 3: full fine-tuning never updates bf16 weights in place, and checkpoints carry every
device's random state."""

from __future__ import annotations

import random
from typing import Any

import pytest

from s3core.errors import ConfigError


def test_bf16_full_fine_tuning_is_refused_with_the_alternatives_named() -> None:
    from s3.config import load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["training.learner.dtype=bfloat16", "training.learner.lora=false"])
    msg = str(e.value)
    assert "training.learner.autocast = 'bf16'" in msg and "training.learner.lora = true" in msg and "float32" in msg
    # what stays allowed: bf16 base weights under LoRA, float32 master weights with bf16 compute
    assert load_config(None, ["training.learner.dtype=bfloat16", "training.learner.lora=true"]).training.learner.dtype == "bfloat16"
    assert load_config(None, ["training.learner.dtype=float32", "training.learner.autocast=bf16"]).training.learner.autocast == "bf16"


def test_every_preset_that_trains_loads() -> None:
    """The shipped GPU presets keep a valid precision (LoRA with bf16 weights, or float32 + autocast)."""
    from pathlib import Path

    from s3.config import load_config

    root = Path(__file__).resolve().parents[2] / "configs"
    for p in sorted(root.glob("*.toml")):
        tc = load_config([str(p)], []).training
        assert tc.learner.lora or tc.learner.dtype == "float32", p.name


def test_rng_round_trip_on_the_cpu() -> None:
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    from training.run.rng import capture_rng, restore_rng

    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    state = capture_rng()
    a = (torch.rand(3).tolist(), random.random(), float(np.random.rand()))
    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    assert restore_rng(state) is None
    assert (torch.rand(3).tolist(), random.random(), float(np.random.rand())) == a


class _FakeCuda:
    """torch.cuda's RNG surface with `n` devices (no GPU here): what capture/restore read and write."""

    def __init__(self, n: int, torch: Any) -> None:
        self.n, self.torch = n, torch
        self.states = [torch.tensor([i, 7], dtype=torch.uint8) for i in range(n)]
        self.set_calls: list[list[Any]] = []

    def is_available(self) -> bool:
        return self.n > 0

    def device_count(self) -> int:
        return self.n

    def get_rng_state_all(self) -> list[Any]:
        return [s.clone() for s in self.states]

    def set_rng_state_all(self, states: list[Any]) -> None:
        self.set_calls.append(list(states))


def test_checkpoint_rng_keeps_every_gpus_state_and_resumes_on_fewer_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from training.run import rng

    two = _FakeCuda(2, torch)
    monkeypatch.setattr(torch, "cuda", two)
    state = rng.capture_rng()
    assert [s.tolist() for s in state["cuda"]] == [[0, 7], [1, 7]]
    assert rng.restore_rng(state) is None
    assert [[s.tolist() for s in c] for c in two.set_calls] == [[[0, 7], [1, 7]]]
    # resumed on a machine with one GPU: that one is restored, the other is named
    one = _FakeCuda(1, torch)
    monkeypatch.setattr(torch, "cuda", one)
    note = rng.restore_rng(state)
    assert note is not None and "1 of the checkpoint's 2 CUDA" in note
    assert [[s.tolist() for s in c] for c in one.set_calls] == [[[0, 7]]]
    # and a CPU-only checkpoint (an older one, or written without a GPU) leaves the GPUs' generators alone
    cpu_state = {k: v for k, v in state.items() if k != "cuda"}
    one.set_calls.clear()
    assert rng.restore_rng(cpu_state) is None and one.set_calls == []
