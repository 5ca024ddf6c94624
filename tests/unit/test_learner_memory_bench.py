"""experiments/learner_memory.py (benchmarks/learner_memory.py, issue 80): a flag not given leaves the project's own
configuration default in force, the rows are every combination of the flags, and the table renders what was
measured; the committed measurements pin the memory estimate's error (training/learn/memory.py ESTIMATE_ERROR)."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from experiments import learner_memory as L
from s3.config import load_config

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "learner_memory" / "results.json"


def test_doctests() -> None:
    assert doctest.testmod(L).failed == 0


def test_no_flag_runs_the_configurations_defaults() -> None:
    lc = load_config(None, []).training.learner
    plan = L.planned(L.RowSpec(1024), ROOT)
    assert plan["mode"] == ("lora" if lc.lora else "full") and plan["micro_batch_size"] == lc.micro_batch_size
    assert plan["grad_ckpt"] == lc.gradient_checkpointing and plan["attn"] == lc.attn_implementation
    assert plan["max_tokens_per_micro_batch"] == lc.max_tokens_per_micro_batch
    sets = L.child_sets(L.RowSpec(1024), "smollm2-135m-instruct", L._knows(ROOT))
    assert sets == ["training.base_model=smollm2-135m-instruct", "training.learner.device=cpu"]  # nothing else set
    given = L.planned(L.RowSpec(1024, "lora", 1, "off", "eager", "none"), ROOT)
    assert (given["mode"], given["micro_batch_size"], given["grad_ckpt"], given["attn"],
            given["max_tokens_per_micro_batch"]) == ("lora", 1, False, "eager", None)


def test_the_table_renders_measured_skipped_and_killed_rows() -> None:
    ran = {"mode": "full", "micro_batch_size": 1, "grad_ckpt": "auto", "attn": "auto", "attn_used": "sdpa",
           "max_tokens_per_micro_batch": 4096, "share_prefix": True, "kl_coef": 0.001, "dtype": "float32",
           "autocast": "off", "logprob_chunk": 1024, "lora_r": 16}
    rows = [{"label": "after", "tokens": 4096, "given": {}, "rows": 1, **ran, "peak_gb": 3.9, "update_s": 80.0,
             "micro_batches": [[1, 4096]], "ran_with": ran},
            {"label": "before", "tokens": 4096, "given": {"grad_ckpt": "off"}, "rows": 4, "skipped": "estimated 30 GB"},
            {"label": "before", "tokens": 2048, "given": {}, "rows": 4, "error": "killed: RSS above the cap"}]
    from training.learn.memory import ModelShape

    L.add_estimates(rows, ModelShape.of_config({"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
                                                "num_hidden_layers": 30, "intermediate_size": 1536,
                                                "vocab_size": 49152, "tie_word_embeddings": True}))
    assert rows[0]["estimate_gb"] > 2.5
    text = L.readme({"model": "m", "commands": ["x"], "machine": "2 CPUs", "rows": rows, "estimate_fit": L.fit_report(rows)})
    assert "| after | full | 1 | auto | sdpa | 4096 | - | 4096 | 1 x 1x4096 | 3.90 |" in text
    assert "estimated 30 GB" in text and "killed: RSS above the cap" in text


@pytest.mark.skipif(not RESULTS.is_file(), reason="no committed measurements")
def test_the_estimate_stays_within_its_stated_error_of_the_measured_rows() -> None:
    from training.learn.memory import ESTIMATE_ERROR, ModelShape

    result = json.loads(RESULTS.read_text())
    rows = [r for r in result["rows"] if "peak_gb" in r and r["label"] == "after"]  # the code the formula describes
    assert len(rows) >= 12
    shape = ModelShape.of_config({"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
                                  "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152,
                                  "tie_word_embeddings": True})  # SmolLM2-135M's config.json
    L.add_estimates(rows, shape)  # the formula as it is now, on the settings each row ran with
    fit = L.fit_report(rows)
    assert fit["max_abs_rel_error"] <= ESTIMATE_ERROR, fit
