"""The searcher a user meets: with no searcher named, `s3 search` / `serve` / `mcp` / `demo` and `s3.build_searcher`
run the trained searcher that ships inside the `searcher` package, on the loop its searcher.json records and over
the user's own index; `--untrained` (searcher.default_policy = none) or naming a model runs the untrained one."""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

import pytest

from s3.build import default_policy, searcher_config
from s3.config import load_config
from s3core.errors import ConfigError
from searcher.policies import DEFAULT, HOME, names, shipped_policy

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_policy_is_package_data_of_the_searcher_package() -> None:
    folder = shipped_policy()
    assert folder == HOME / DEFAULT and folder.parent.parent.name == "searcher"
    assert {"adapter_config.json", "adapter_model.safetensors", "searcher.json", "README.md"} <= {
        p.name for p in folder.iterdir()}
    assert names() == [DEFAULT]
    # setuptools ships these files with the package (the "*" rule covers only *.json / *.toml / ...)
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data["searcher.policies"]
    import fnmatch

    for p in folder.iterdir():
        assert any(fnmatch.fnmatch(f"{folder.name}/{p.name}", pat) for pat in patterns), p.name
    assert not (REPO / "benchmarks" / "results" / "transfer" / "policy").exists()  # moved, no copy left behind


def test_no_searcher_named_is_the_shipped_trained_one_on_its_loop_over_your_index(tmp_path: Path) -> None:
    cfg = load_config(None, [f"retriever.index={tmp_path / 'mine'}"])
    assert default_policy(cfg) == shipped_policy()
    got, index = searcher_config(cfg)
    record = json.loads((shipped_policy() / "searcher.json").read_text())["searcher"]
    s = got.searcher
    assert s.policy == "transformers" and s.policy_path == str(shipped_policy())
    assert (s.k, s.max_turns, s.additive, s.context_cap, s.max_new_tokens) == (
        record["k"], record["max_turns"], record["additive"], record["context_cap"], record["max_new_tokens"])
    # the user's index, never the training corpus the record names
    assert index is None and got.resolve(got.retriever.index) == tmp_path / "mine"


@pytest.mark.parametrize("sets", [
    ["searcher.default_policy=none"],
    ["searcher.model=openai/gpt-4o-mini"],
    ["searcher.api_base=http://127.0.0.1:9/v1"],
    ["searcher.policy=litellm"],
])
def test_naming_a_searcher_or_untrained_runs_the_untrained_llm_searcher(sets: list[str]) -> None:
    cfg = load_config(None, sets)
    assert default_policy(cfg) is None
    got, _ = searcher_config(cfg)
    assert got.searcher.policy_path is None and got.searcher.policy == "litellm"


def test_the_title_following_script_is_not_overridden_by_the_shipped_policy(tmp_path: Path) -> None:
    cfg = load_config(None, ["searcher.kind=title_following", f"retriever.index={tmp_path / 'mine'}"])
    assert default_policy(cfg) is None
    got, _ = searcher_config(cfg)
    assert got.searcher.kind == "title_following" and got.searcher.policy_path is None


def test_the_untrained_flag_is_the_setting() -> None:
    from s3.commands.serve import untrained

    cfg = load_config(None, [])
    assert default_policy(untrained(argparse.Namespace(untrained=True), cfg)) is None
    assert default_policy(untrained(argparse.Namespace(untrained=False), cfg)) == shipped_policy()


def test_an_unknown_shipped_policy_is_a_clear_error() -> None:
    cfg = load_config(None, ["searcher.default_policy=nope"])
    with pytest.raises(ConfigError, match=r"no such shipped policy .*smollm2-135m-hotpotqa.*none = the untrained"):
        default_policy(cfg)
