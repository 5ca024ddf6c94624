"""A training step's memory, estimated before the run (training/learn/memory.py, issue 80): the estimate's shape
(linear in the token budget with checkpointing, the T^2 term of eager attention, LoRA's optimizer state), the
'auto' checkpointing rule, the longest trajectory the searcher allows, and the refusal: a configuration whose step
cannot fit is refused before the preparation and before any model or rollout, naming the setting that would fit."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from s3.config import load_config
from s3core.errors import ConfigError
from training.config import TrainingConfig
from training.learn.memory import (
    GB,
    MARGIN,
    ModelShape,
    auto_checkpointing,
    check_step_memory,
    estimate_step,
    longest_trajectory,
    step_estimate,
    worst_micro_batch,
)

SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
           "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "vocab_size": 49152, "tie_word_embeddings": True, "max_position_embeddings": 8192}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """SmolLM2-135M's config.json alone: the estimate reads the shape, never a weight."""
    d = tmp_path / "smollm2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(SMOLLM2))
    return d


def _tc(**learner: Any) -> TrainingConfig:
    return TrainingConfig(learner={"device": "cpu", **learner})


def test_the_shape_counts_smollm2s_parameters(model_dir: Path) -> None:
    shape = ModelShape.of_model(str(model_dir))
    assert shape.params == 134_515_008  # what transformers counts for SmolLM2-135M (tied embeddings)
    assert shape.lora_params(16) == 4_884_480  # peft's all-linear LoRA at r = 16


def test_with_checkpointing_and_sdpa_the_activations_grow_linearly_and_eager_adds_t_squared() -> None:
    shape = ModelShape.of_config(SMOLLM2)
    tc = _tc(gradient_checkpointing=True)
    act = [estimate_step(shape, tc, tokens=n, longest=n, policy_tokens=640).parts["activations"] for n in (2048, 4096, 8192)]
    assert act[2] - act[1] == pytest.approx(2 * (act[1] - act[0]))  # linear in the tokens
    eager = _tc(gradient_checkpointing=True, attn_implementation="eager")
    e = [estimate_step(shape, eager, tokens=n, longest=n, policy_tokens=640).parts["activations"] for n in (2048, 4096)]
    assert e[1] - act[1] > 3.5 * (e[0] - act[0])  # the (heads x T x T) probabilities: quadratic
    full = estimate_step(shape, tc, tokens=4096, longest=4096, policy_tokens=640)
    lora = estimate_step(shape, _tc(gradient_checkpointing=True, lora=True), tokens=4096, longest=4096, policy_tokens=640)
    assert lora.parts["optimizer"] < full.parts["optimizer"] / 20 and lora.parts["reference"] == 0  # adapters off = ref
    off = estimate_step(shape, _tc(gradient_checkpointing=False), tokens=4096, longest=4096, policy_tokens=640)
    assert off.total > full.total + 3 * GB  # every layer's activations kept


def test_auto_checkpoints_the_micro_batches_whose_activations_would_pass_the_budgets() -> None:
    shape = ModelShape.of_config(SMOLLM2)
    tc = _tc(max_tokens_per_micro_batch=4096)
    assert auto_checkpointing(shape, tc, rows=4, length=1024)
    assert not auto_checkpointing(shape, tc, rows=1, length=200)  # a short micro-batch runs at full speed
    assert not auto_checkpointing(shape, _tc(max_tokens_per_micro_batch=None), rows=4, length=4096)  # no budget
    # the worst micro-batch the learner may form
    assert worst_micro_batch(tc, 3000) == (4096, 3000)
    assert worst_micro_batch(tc, 9000) == (9000, 9000)  # a longer row alone
    assert worst_micro_batch(_tc(max_tokens_per_micro_batch=None), 3000) == (12000, 3000)


def test_the_longest_trajectory_follows_the_searchers_settings() -> None:
    cfg = load_config(None, ["searcher.doc_token_budget=96", "searcher.k=8", "searcher.max_turns=3",
                             "searcher.max_new_tokens=48", "retriever.k=3"])
    n, how = longest_trajectory(cfg)
    assert 3000 < n < 5000 and "searcher.max_turns = 3" in how  # the shipped loop: ~3,500-token rollouts were seen
    more = load_config(None, ["searcher.doc_token_budget=96", "searcher.k=8", "searcher.max_turns=4",
                              "searcher.max_new_tokens=48", "retriever.k=3"])
    assert longest_trajectory(more)[0] > n
    capped = load_config(None, ["training.rollout.engine=vllm", "searcher.vllm.max_model_len=2048"])
    assert longest_trajectory(capped)[0] == 2048


def _cfg(model_dir: Path, tmp_path: Path, *sets: str) -> Any:
    return load_config(None, [f"training.base_model={model_dir}", "training.learner.device=cpu",
                              f"training.output_dir={tmp_path / 'run'}", "searcher.doc_token_budget=32", *sets])


def test_a_step_that_fits_is_logged(model_dir: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    est = check_step_memory(_cfg(model_dir, tmp_path, "training.learner.memory_gb=100"), "cpu", lines.append)
    assert len(lines) == 1 and "step memory" in lines[0] and f"{est.total / GB:.2f} GB" in lines[0]


def test_a_step_that_cannot_fit_is_refused_naming_a_budget_that_fits(model_dir: Path, tmp_path: Path) -> None:
    shape = ModelShape.of_model(str(model_dir))
    base = _cfg(model_dir, tmp_path, "training.learner.max_tokens_per_micro_batch=16384",
                "training.learner.micro_batch_size=8", "training.learner.gradient_checkpointing=true")
    longest = longest_trajectory(base)[0]
    # room for a micro-batch of twice the longest trajectory, not for the 16k budget's
    room = _cfg(model_dir, tmp_path, f"training.learner.max_tokens_per_micro_batch={2 * longest}",
                "training.learner.micro_batch_size=8", "training.learner.gradient_checkpointing=true")
    limit = step_estimate(room, shape, "cpu").total * (1 + MARGIN) / GB + 0.01
    cfg = _cfg(model_dir, tmp_path, "training.learner.max_tokens_per_micro_batch=16384",
               "training.learner.micro_batch_size=8", "training.learner.gradient_checkpointing=true",
               f"training.learner.memory_gb={limit}")
    with pytest.raises(ConfigError, match=r"training\.learner\.max_tokens_per_micro_batch <= \d+") as e:
        check_step_memory(cfg, "cpu")
    budget = int(re.search(r"max_tokens_per_micro_batch <= (\d+)", str(e.value)).group(1))  # type: ignore[union-attr]
    assert 2 * longest <= budget < 16384
    fixed = _cfg(model_dir, tmp_path, f"training.learner.max_tokens_per_micro_batch={budget}",
                 "training.learner.micro_batch_size=8", "training.learner.gradient_checkpointing=true",
                 f"training.learner.memory_gb={limit}")
    check_step_memory(fixed, "cpu", lambda s: None)  # the named budget fits


def test_without_checkpointing_the_refusal_names_it(model_dir: Path, tmp_path: Path) -> None:
    shape = ModelShape.of_model(str(model_dir))
    on = _cfg(model_dir, tmp_path, "training.learner.gradient_checkpointing=true")
    limit = step_estimate(on, shape, "cpu").total * (1 + MARGIN) / GB + 0.01
    off = _cfg(model_dir, tmp_path, "training.learner.gradient_checkpointing=false", f"training.learner.memory_gb={limit}")
    with pytest.raises(ConfigError, match=r"training\.learner\.gradient_checkpointing = true"):
        check_step_memory(off, "cpu")


def test_a_run_that_cannot_fit_is_refused_before_its_preparation_and_before_any_model(
        model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`s3 train` (make_trainer -> prepare_run) refuses before the preparation (data, baseline calls) and so before
    any rollout; `s3 train --dry-run` (build_training on the prepared set) before any model or retriever is built."""
    from training.prep import data as prep_data
    from training.run import build

    def never(*a: Any, **k: Any) -> Any:
        raise AssertionError("reached past the memory check")

    monkeypatch.setattr(prep_data, "Preparation", never)
    monkeypatch.setattr(build, "new_learner", never)
    monkeypatch.setattr(build, "build_retriever", never)
    monkeypatch.setattr(build, "build_executor", never)
    cfg = _cfg(model_dir, tmp_path, "training.learner.memory_gb=1.5")  # the weights and AdamW alone take more
    with pytest.raises(ConfigError, match=r"training\.learner\.lora = true") as e:
        build.prepare_run(cfg, log=lambda s: None)
    assert "training.learner.memory_gb" in str(e.value)
    with pytest.raises(ConfigError, match=r"training\.learner\.lora = true"):
        build.build_training(cfg, build.Prepared(data=None), log=lambda s: None)  # type: ignore[arg-type]


def test_the_dry_run_says_the_steps_memory() -> None:
    from training.report.dryrun import dry_run_message

    d = {"steps": 3, "reward_calls": 0, "projected_usd": 0.0, "spent_usd": 0.0, "basis": "-", "per_step_usd": 0.0,
         "no_generator": "the reward calls no generator", "budget_usd": None, "step_memory_gb": 3.2,
         "step_memory": "3.20 GB (base 0.45, weights 0.54)"}
    assert "a step's learner memory ~3.20 GB (base 0.45" in dry_run_message(d)


def test_under_auto_the_checks_bound_covers_a_smaller_micro_batch_left_uncheckpointed() -> None:
    """'auto' lets a micro-batch run uncheckpointed while its activations stay under the budget's allowance, so the
    check's estimate is never below that, even where its largest micro-batch is checkpointed; the benchmark's rows
    (any_micro_batch=False) price their own micro-batch."""
    from training.learn.memory import activation_bytes, estimate_step

    shape = ModelShape.of_config(SMOLLM2)
    tc = _tc(max_tokens_per_micro_batch=4096)
    short = activation_bytes(shape, tc, tokens=480, longest=480, checkpointed=False)
    assert not auto_checkpointing(shape, tc, rows=1, length=480)  # it runs uncheckpointed
    # rows of up to 500 tokens: the largest micro-batch (4 x 500) is checkpointed, and prices below the short one
    bound = estimate_step(shape, tc, tokens=2000, longest=500, policy_tokens=640)
    exact = estimate_step(shape, tc, tokens=2000, longest=500, policy_tokens=640, any_micro_batch=False)
    assert exact.checkpointed and exact.parts["activations"] < short <= bound.parts["activations"]
