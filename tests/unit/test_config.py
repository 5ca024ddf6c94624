from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from s3.config import S3Config, load_config
from s3.configdoc import render_markdown, render_toml
from s3core.configbase import parse_override
from s3core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_config_toml_equals_model_defaults() -> None:
    assert load_config(ROOT / "config.toml").model_dump() == S3Config().model_dump()


def test_generated_files_are_fresh() -> None:
    assert (ROOT / "config.toml").read_text() == render_toml(), "run: python -m s3.configdoc toml > config.toml"
    assert (ROOT / "docs/configuration.md").read_text() == render_markdown(), (
        "run: python -m s3.configdoc markdown > docs/configuration.md"
    )


def test_override_types_and_nesting() -> None:
    cfg = load_config(ROOT / "config.toml", ["searcher.max_turns=2", "retriever.bm25.k1=1.2", "searcher.policy=transformers"])
    assert cfg.searcher.max_turns == 2
    assert cfg.retriever.bm25.k1 == 1.2
    assert cfg.searcher.policy == "transformers"
    assert parse_override("generator.model=openai/gpt-4o-mini") == (["generator", "model"], "openai/gpt-4o-mini")
    assert parse_override("eval.use_judge=false") == (["eval", "use_judge"], False)


def test_unknown_key_names_it_and_the_valid_keys() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(ROOT / "config.toml", ["searcher.max_turn=2"])
    msg = str(e.value)
    assert "searcher.max_turn" in msg and "max_turns" in msg


def test_unknown_section_and_bad_value() -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown key 'retrieverr'")):
        load_config(None, ["retrieverr.k=3"])
    with pytest.raises(ConfigError, match=re.escape("searcher.max_select")):
        load_config(None, ["searcher.max_select=0"])
    with pytest.raises(ConfigError, match="--set expects"):
        load_config(None, ["searcher"])


def test_cross_field_check_message_says_how_to_fix() -> None:
    with pytest.raises(ConfigError, match="lower max_select or raise k"):
        load_config(None, ["searcher.max_select=9", "searcher.k=8"])


def test_confidence_gated_vllm_rollouts_cannot_run_ahead() -> None:
    """The confidence-gated reward on vLLM rollouts reads the learner's log-probs at the rollouts' own weights before
    scoring: asynchronous RL is refused at load time, the synchronous loop and the transformers engine are not."""
    sets = ["training.mode=search_r1", "training.reward=confidence_gated", "training.rollout.engine=vllm"]
    with pytest.raises(ConfigError, match="max_staleness = 0"):
        load_config(None, [*sets, "training.rollout.max_staleness=1"])
    load_config(None, sets)
    load_config(None, [*sets[:2], "training.rollout.max_staleness=1"])


def test_relative_paths_resolve_against_config_file(tmp_path: Path) -> None:
    cfgfile = tmp_path / "sub" / "my.toml"
    cfgfile.parent.mkdir()
    cfgfile.write_text('[retriever]\nindex = "idx"\n')
    cfg = load_config(cfgfile)
    assert cfg.resolve(cfg.retriever.index) == cfgfile.parent / "idx"


def test_llm_cache_paths_resolve_against_config_file(tmp_path: Path) -> None:
    cfgfile = tmp_path / "sub" / "my.toml"
    cfgfile.parent.mkdir()
    cfgfile.write_text('[generator]\ncache_path = "../c.sqlite"\n[judge]\ncache_path = "/abs/j.sqlite"\n')
    cfg = load_config(cfgfile)
    assert cfg.generator_resolved.cache_path == str(cfgfile.parent / "../c.sqlite")
    assert cfg.judge_resolved.cache_path == "/abs/j.sqlite"
    assert cfg.generator.cache_path == "../c.sqlite"  # the loaded config itself is unchanged


def test_missing_config_file_is_clear() -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config("/nonexistent/config.toml")


def test_cli_reports_config_errors_in_one_line() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "s3.cli", "config", "show", "--set", "searcher.nope=1"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert r.returncode == 2
    assert "unknown key 'searcher.nope'" in r.stderr
    assert "Traceback" not in r.stderr


def test_none_words_mean_none_for_settings_that_may_be_none() -> None:
    """TOML has no null: "none" / "null" turn an optional setting off, in --set and in files alike (issue 18 defect 7:
    `--set generator.cache_path=none` created a sqlite file named `none`)."""
    from s3.config import load_config

    cfg = load_config(None, ["generator.cache_path=none", "judge.cache_path=NULL", "retriever.bm25.stemmer=None",
                             "generator.model=none"])
    assert cfg.generator.cache_path is None and cfg.generator_resolved.cache_path is None
    assert cfg.judge.cache_path is None and cfg.retriever.bm25.stemmer is None
    assert cfg.generator.model == "none"  # a setting that cannot be None keeps the word
