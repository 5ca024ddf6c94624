"""`s3 doctor --shape`: the Qwen2.5 shapes from their configs (meta device: no memory), the refusal of a 3B shape on
the CPU, the memory estimate that skips a 7B where it does not fit, the goal check and the summary's shape table.
The step itself (a real small Qwen2 model through the recipe's learner, rollout and update) runs in
tests/integration/test_doctor.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from s3 import doctor
from s3core.errors import ConfigError


def test_the_shapes_are_qwen25s_configs_and_count_their_published_parameters() -> None:
    # Qwen2.5-3B-Instruct: 3.09B (tied embeddings: counted once); Qwen2.5-7B-Instruct: 7.62B (untied head)
    assert doctor.shape_params(doctor.SHAPES["3b"]) == 3_085_938_688
    assert doctor.shape_params(doctor.SHAPES["7b"]) == 7_615_616_512
    cfg = doctor.qwen2_config(doctor.SHAPES["3b"])
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.intermediate_size, cfg.vocab_size, cfg.tie_word_embeddings) == ("qwen2", 2048, 36, 16, 2, 11008, 151936, True)
    assert cfg.rope_parameters["rope_theta"] == 1_000_000.0 and cfg.rms_norm_eps == 1e-6
    cfg7 = doctor.qwen2_config(doctor.SHAPES["7b"])
    assert (cfg7.hidden_size, cfg7.num_hidden_layers, cfg7.num_attention_heads, cfg7.num_key_value_heads,
            cfg7.intermediate_size, cfg7.vocab_size, cfg7.tie_word_embeddings) == (3584, 28, 28, 4, 18944, 152064, False)
    # the CPU form: the 3B's architecture and vocabulary, 2 layers of 128 (embedding 151,936 x 128 + 2 layers)
    small = doctor.SHAPES["small"]
    assert (small.vocab, small.tied, small.hidden // small.heads, small.heads // small.kv_heads) == (151936, True, 32, 2)
    assert doctor.shape_params(small) == 20_075_648


def test_shape_names_default_to_3b_on_a_gpu_and_small_on_the_cpu() -> None:
    assert doctor.parse_shapes(None, "cuda") == ["3b"]
    assert doctor.parse_shapes(None, "cpu") == ["small"]
    assert doctor.parse_shapes("3b, 7B,3b", "cuda") == ["3b", "7b"]
    assert doctor.parse_shapes("none", "cuda") == []
    with pytest.raises(ConfigError, match="small, 3b, 7b"):
        doctor.parse_shapes("13b", "cuda")


def test_a_3b_shape_on_the_cpu_is_refused_in_one_line_unless_forced() -> None:
    why = doctor.shape_refusal(["small", "3b"], "cpu", force=False)
    assert why is not None and "\n" not in why
    assert why.startswith("--shape 3b needs a GPU (a 3.09B-parameter model") and "--shape small" in why
    assert "--force-shape" in why
    assert doctor.shape_refusal(["3b"], "cpu", force=True) is None
    assert doctor.shape_refusal(["3b", "7b"], "cuda", force=False) is None
    assert doctor.shape_refusal(["small"], "cpu", force=False) is None


def test_s3_doctor_refuses_the_3b_shape_on_the_cpu_before_doing_anything(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import main

    out = tmp_path / "check"
    assert main(["doctor", "--device", "cpu", "--shape", "3b", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --shape 3b needs a GPU") and len(err.splitlines()) == 1, err
    assert not out.exists()  # nothing was built


def test_the_memory_estimate_keeps_a_7b_off_a_gpu_it_does_not_fit() -> None:
    gb = 1e9
    est3 = doctor.estimate_bytes(doctor.SHAPES["3b"], rows=64, prompt_tokens=1400, new_tokens=128, micro_batch=4,
                                 logprob_chunk=1024)
    assert est3["weights"] == 2 * 3_085_938_688  # bf16, one copy: the transformers engine samples from the learner
    # the 3b shape's KV cache by hand: 64 rows x 1528 tokens x 36 layers x 2 (K, V) x 2 KV heads x 128 x 2 B
    assert est3["rollout"] >= 64 * 1528 * 36 * 2 * 2 * 128 * 2
    assert 10 * gb < est3["total"] < 20 * gb  # fits an 80 GB card with room
    est7 = doctor.estimate_bytes(doctor.SHAPES["7b"], rows=64, prompt_tokens=1400, new_tokens=128, micro_batch=4,
                                 logprob_chunk=1024)
    assert 20 * gb < est7["total"] < 40 * gb  # an 80 GB H100: fits; a 24 GB card: skipped
    # next to a vLLM engine holding 0.40 of an 80 GB card (configs/gpu_single.toml), the 7b still fits
    with_engine = doctor.estimate_bytes(doctor.SHAPES["7b"], rows=64, prompt_tokens=1400, new_tokens=128, micro_batch=4,
                                        logprob_chunk=1024, engine_bytes=0.4 * 80 * gb)
    assert with_engine["total"] == pytest.approx(est7["total"] + 32 * gb)
    assert with_engine["total"] < 78 * gb


def test_the_goal_is_checked_on_the_3b_shape_on_a_gpu_only() -> None:
    assert doctor.GOAL_TOKENS_PER_S == 1110
    ok, line = doctor.goal_line({"shape": "3b", "device": "cuda", "tokens_per_s": 2345.6})
    assert ok is True and line.startswith("goal PASS: 2,345.6 policy tokens/s >= 1,110")
    ok, line = doctor.goal_line({"shape": "3b", "device": "cuda", "tokens_per_s": 480.0})
    assert ok is False and line.startswith("goal FAIL: 480.0 policy tokens/s < 1,110")
    assert doctor.goal_line({"shape": "small", "device": "cpu", "tokens_per_s": 9.0})[0] is None
    assert doctor.goal_line({"shape": "7b", "device": "cuda", "tokens_per_s": 900.0})[0] is None


def test_shape_steps_run_after_rollout_speed_and_land_in_the_summary(tmp_path: Path) -> None:
    names = [n for n, _ in doctor.all_steps(["3b", "7b"])]
    at = names.index("rollout_speed")
    assert names[at + 1 : at + 3] == ["shape_3b", "shape_7b"] and len(names) == len(doctor.STEPS) + 2
    info = {"shape": "3b", "params": 3_085_938_688, "engine": "transformers", "rows": 64, "new_tokens": 128,
            "tokens_per_s": 2345.6, "first_tokens_per_s": 601.5, "update_seconds": 12.34, "update_peak_allocated_gb": 14.2,
            "goal": "goal PASS: 2,345.6 policy tokens/s >= 1,110"}
    results = [doctor.StepResult(name="shape_3b", status="PASS", info=info),
               doctor.StepResult(name="shape_7b", status="SKIP", why="needs ~90 GB, 70 GB free on cuda")]
    doctor.write_summary(tmp_path, results, device="cuda", quick=False)
    md = (tmp_path / "summary.md").read_text()
    assert "| 3b | 3.09B | transformers | 64 x 128 | 2,345.6 | 601.5 | 12.3 | 14.2 | goal PASS" in md
    assert "| shape_7b | SKIP |" in md and "| 7b |" not in md
