"""Presets are config files layered in order; the profile era's keys are unknown keys now."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from s3.config import PRESET_DIR, S3Config, load_config
from s3core.errors import ConfigError
from searcher.config import SearcherConfig

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_cpu_preset_is_a_file_and_layers_under_the_users_config(tmp_path: Path) -> None:
    mine = _write(tmp_path / "mine.toml", "[searcher]\nmax_turns = 1\n[retriever]\nindex = 'idx'\n")
    cfg = load_config(["cpu", str(mine)], ["searcher.k=5"])
    # the preset's values, then mine.toml over them, then --set
    assert (cfg.searcher.k, cfg.searcher.max_turns, cfg.searcher.doc_token_budget) == (5, 1, 64)
    assert cfg.base_dir == tmp_path and cfg.resolve(cfg.retriever.index) == tmp_path / "idx"
    assert cfg.explicit_keys == {"searcher.k", "searcher.max_turns", "searcher.doc_token_budget", "retriever.index",
                                 "service.request_timeout_s"}
    # by path, the same file
    assert load_config([PRESET_DIR / "cpu.toml"]).searcher == load_config(["cpu"]).searcher
    # the paper profile stays the defaults
    assert load_config([]).searcher == SearcherConfig()


def test_each_layers_relative_paths_resolve_against_its_own_folder(tmp_path: Path) -> None:
    base = _write(tmp_path / "a" / "base.toml", "[retriever]\nindex = 'indexes/x'\n[training]\noutput_dir = 'runs/t'\n"
                  "[training.data]\nsources = ['hotpotqa:data/h.json']\n")
    over = _write(tmp_path / "b" / "over.toml", "[training]\noutput_dir = 'mine'\n")
    cfg = load_config([base, over])
    assert cfg.resolve(cfg.retriever.index) == (tmp_path / "a" / "indexes" / "x").resolve()
    assert cfg.resolve(cfg.training.output_dir) == tmp_path / "b" / "mine"
    assert cfg.training.data.sources == [f"hotpotqa:{(tmp_path / 'a' / 'data' / 'h.json').resolve()}"]


def test_implicit_config_toml_keys_are_not_explicit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "config.toml", "[searcher]\nmax_turns = 2\n")
    cfg = load_config(None, ["retriever.k=4"])
    assert cfg.searcher.max_turns == 2 and cfg.explicit_keys == {"retriever.k"}


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(ConfigError, match=r"no preset 'gpu-monster'.*cpu"):
        load_config(["gpu-monster"])


def test_profile_era_keys_are_unknown_keys(tmp_path: Path) -> None:
    """`searcher.profile` + `cpu_*` (before presets became files) are rejected like any unknown key, naming each one
    and the keys that exist (no silent migration: the cpu preset is `--config cpu`, configs/cpu.toml)."""
    old = _write(tmp_path / "old.toml", "[searcher]\nprofile = 'cpu'\ncpu_k = 3\ncpu_max_turns = 1\nmax_select = 2\n")
    with pytest.raises(ConfigError) as err:
        load_config([old])
    msg = str(err.value)
    for key in ("searcher.profile", "searcher.cpu_k", "searcher.cpu_max_turns"):
        assert f"unknown key '{key}'" in msg
    assert "unknown key 'searcher.max_select'" not in msg and "valid keys here: " in msg and " max_turns," in msg
    with pytest.raises(ConfigError, match=r"unknown key 'searcher\.profile'"):
        load_config([_write(tmp_path / "p.toml", "[searcher]\nprofile = 'paper'\n")])


def test_a_profile_era_run_config_json_is_rejected() -> None:
    # what a run directory's config.json looked like before presets became files
    import pydantic

    old = json.loads(S3Config().model_dump_json())
    old["searcher"].update({"profile": "cpu", "cpu_k": 3, "cpu_max_turns": 1, "cpu_doc_token_budget": 40})
    with pytest.raises(pydantic.ValidationError) as err:
        S3Config.model_validate(old)
    assert sorted(".".join(map(str, e["loc"])) for e in err.value.errors() if e["type"] == "extra_forbidden") == [
        "searcher.cpu_doc_token_budget", "searcher.cpu_k", "searcher.cpu_max_turns", "searcher.profile"]


def test_project_configs_load_and_use_no_profile_keys() -> None:
    for path in sorted((ROOT / "configs").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(profile|cpu_k|cpu_max_turns|cpu_doc_token_budget)\s*=", text, re.M), path
        load_config([path])


def test_gpu_single_config_validates_and_states_what_ran() -> None:
    """configs/gpu_single.toml (a 3B searcher on one 80 GB GPU) loads and selects the GPU paths; its comments carry the
    memory budget and say plainly that it ran here only on CPU with a 135M model."""
    path = ROOT / "configs" / "gpu_single.toml"
    cfg = load_config([path])
    tc, s = cfg.training, cfg.searcher
    assert (tc.rollout.engine, tc.learner.lora, tc.learner.gradient_checkpointing, tc.learner.dtype, tc.learner.device) == ("vllm", True, True, "bfloat16", "auto")
    assert s.policy == "vllm" and s.vllm.in_process and s.vllm.dtype == "bfloat16" and s.vllm.kv_cache_gb is None
    assert 0 < s.vllm.memory_utilization <= 0.5  # the learner needs the rest of the GPU
    assert cfg.generator.model.startswith("hosted_vllm/") and cfg.generator.api_base == "http://127.0.0.1:8010/v1"
    assert cfg.generator_server.port == 8010 and cfg.generator_server.host == "127.0.0.1"
    text = path.read_text(encoding="utf-8")
    # what ran on the H200 (the transformers engine, a random 3B shape) and what has not (vLLM, real weights)
    for phrase in ("Memory budget", "KV cache", "activations", "gradient checkpointing", "On ONE NVIDIA H200",
                   "have not run on a GPU", "SmolLM2-135M"):
        assert phrase in text, phrase


def test_gpu_cluster_configs_validate_and_state_what_ran() -> None:
    """configs/gpu_cluster.toml (8 GPUs: 4 learners, 3 vLLM rollout engines, 1 vLLM generator) and its two-node layer
    load and select the GPU Ray paths; their comments carry the memory budget and say plainly what ran here."""
    one_path, two_path = ROOT / "configs" / "gpu_cluster.toml", ROOT / "configs" / "gpu_cluster_2node.toml"
    one = load_config([one_path])
    tc, rc = one.training, one.ray
    assert (tc.backend, tc.learner.device, tc.rollout.engine, tc.learner.lora, tc.learner.dtype) == ("ray", "cuda", "vllm", True, "bfloat16")
    assert (rc.address, rc.learners, rc.learner_gpus, rc.rollout_workers, rc.rollout_worker_gpus) == (None, 4, 1, 3, 1)
    assert rc.learners * rc.learner_gpus + rc.rollout_workers * rc.rollout_worker_gpus == 7  # + the generator's GPU = 8
    assert one.searcher.vllm.memory_utilization > 0.5  # a rollout engine has its GPU to itself
    assert one.generator.api_base == "http://127.0.0.1:8010/v1" and one.generator_server.host == "127.0.0.1"
    # rows of a step per learner: the micro-batches of every rank are full
    assert tc.rollout.batch_size * tc.rollout.group_size % (rc.learners * tc.learner.micro_batch_size) == 0

    two = load_config([one_path, two_path])
    rc2 = two.ray
    assert rc2.address == "auto" and (rc2.learners, rc2.rollout_workers) == (8, 7)
    assert rc2.learner_resources == {"learner_node": 1} and rc2.rollout_worker_resources == {"rollout_node": 1}
    assert rc2.reward_worker_resources == rc2.eval_worker_resources == {"generator_node": 1}
    assert two.training.learner.lora and two.training.rollout.engine == "vllm"  # the rest comes from gpu_cluster.toml
    assert two.training.rollout.batch_size * two.training.rollout.group_size // rc2.learners == 80
    for path in (one_path, two_path):
        text = path.read_text(encoding="utf-8")
        for phrase in ("Memory budget", "What ran and what did not"):
            assert phrase in text, (path.name, phrase)
    assert "have not run anywhere" in one_path.read_text() and "NOTHING here has run on GPUs" in two_path.read_text()
    assert "KV cache" in one_path.read_text() and "--resources" in two_path.read_text()
