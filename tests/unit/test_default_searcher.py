"""The searcher a user meets: with no searcher named, `s3 search` / `serve` / `mcp` / `demo` and `s3.build_searcher`
run the best measured searcher that ships inside the `searcher` package for the index at hand (a titled index: the
reading searcher; one without titles: the trained s3 policy), on the settings its searcher.json records and over the
user's own index, and say which ran and why; `--untrained` (searcher.default_policy = none) or naming a searcher runs
the one named."""

from __future__ import annotations

import argparse
import fnmatch
import json
import tomllib
from pathlib import Path

import pytest

from s3.build import names_searcher, searcher_config
from s3.config import load_config
from s3core.corpus import write_corpus
from s3core.errors import ConfigError
from s3core.types import Document
from searcher.policies import DEFAULT, HOME, best_for, catalog, names, resolve, shipped_policy
from searcher.retrieval import build_index

REPO = Path(__file__).resolve().parents[2]


def _index(tmp_path: Path, titled: bool) -> Path:
    docs = [Document(id=f"d{i}", title=f"Page {i}" if titled else "", text=f"Passage {i} about the Earthship.")
            for i in range(8)]
    write_corpus(tmp_path / "corpus.jsonl", docs)
    return Path(build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index"))


def test_the_shipped_searchers_are_package_data_of_the_searcher_package() -> None:
    assert names() == ["reading-hotpotqa", DEFAULT, "title-following"]
    folder = shipped_policy()
    assert folder == HOME / DEFAULT and folder.parent.parent.name == "searcher"
    assert {"adapter_config.json", "adapter_model.safetensors", "searcher.json", "README.md"} <= {
        p.name for p in folder.iterdir()}
    # setuptools ships these files with the package (the "*" rule covers only *.json / *.toml / ...)
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "searcher.policies"]
    for name in names():
        for p in (HOME / name).iterdir():
            assert any(fnmatch.fnmatch(f"{name}/{p.name}", pat) for pat in patterns), p.name
    assert not (REPO / "benchmarks" / "results" / "transfer" / "policy").exists()  # moved, no copy left behind
    # every card names its kind, where it applies and what it measured; best measured first
    cards = catalog()
    assert [c.name for c in cards] == ["reading-hotpotqa", "title-following", DEFAULT]
    assert [c.kind for c in cards] == ["reading", "title_following", "llm"]
    assert [c.applies for c in cards] == ["titled", "titled", "any"] and all(c.measured for c in cards)


def test_the_default_is_the_best_measured_for_the_index_and_says_why(tmp_path: Path) -> None:
    assert best_for(True)[0].name == "reading-hotpotqa" and best_for(False)[0].name == DEFAULT
    assert best_for(None)[0].name == DEFAULT  # titles unknown (a remote retriever): the one that needs none
    titled = _index(tmp_path / "titled", titled=True)
    got, index, why = searcher_config(load_config(None, [f"retriever.index={titled}"]))
    s = got.searcher
    assert (s.kind, s.policy_path, s.context_cap, s.reading.read_last, s.reading.ranker) == (
        "reading", None, 5, 16, "links-reader-hotpotqa")
    assert why.startswith("reading-hotpotqa: the default for a titled index") and "0.462 GenAcc" in why
    assert index is None and got.resolve(got.retriever.index) == titled  # the user's index
    untitled = _index(tmp_path / "untitled", titled=False)
    got, index, why = searcher_config(load_config(None, [f"retriever.index={untitled}"]))
    record = json.loads((shipped_policy() / "searcher.json").read_text())["searcher"]
    s = got.searcher
    assert s.kind == "llm" and s.policy == "transformers" and s.policy_path == str(shipped_policy())
    assert (s.k, s.max_turns, s.additive, s.context_cap, s.max_new_tokens) == (
        record["k"], record["max_turns"], record["additive"], record["context_cap"], record["max_new_tokens"])
    assert why.startswith(f"{DEFAULT}: the default for an index without titles")
    # the user's index, never the training corpus the record names
    assert index is None and got.resolve(got.retriever.index) == untitled


def test_a_searcher_by_name_and_its_explicit_settings(tmp_path: Path) -> None:
    cfg = load_config(None, ["searcher.reading.read_last=20"])
    got, _, why = searcher_config(cfg, "reading-hotpotqa")
    assert got.searcher.kind == "reading" and got.searcher.reading.read_last == 20 and why == "named: reading-hotpotqa"
    got, _, _ = searcher_config(load_config(None, []), "title-following")
    assert got.searcher.kind == "title_following" and got.searcher.context_cap == 5
    assert resolve("reading-hotpotqa") == HOME / "reading-hotpotqa" and resolve(tmp_path) == tmp_path
    with pytest.raises(ConfigError, match=r"nope: no such checkpoint or run directory, policy folder or shipped searcher"):
        resolve("nope")


@pytest.mark.parametrize("sets", [
    ["searcher.default_policy=none"],
    ["searcher.model=openai/gpt-4o-mini"],
    ["searcher.api_base=http://127.0.0.1:9/v1"],
    ["searcher.policy=litellm"],
])
def test_naming_a_searcher_or_untrained_runs_the_configured_llm_searcher(sets: list[str]) -> None:
    got, _, why = searcher_config(load_config(None, sets))
    assert got.searcher.policy_path is None and got.searcher.policy == "litellm" and got.searcher.kind == "llm"
    assert why.startswith("the configured searcher")


def test_a_kind_set_explicitly_is_not_overridden_by_a_default(tmp_path: Path) -> None:
    cfg = load_config(None, ["searcher.kind=title_following", f"retriever.index={tmp_path / 'mine'}"])
    assert names_searcher(cfg) == "searcher.kind is set"
    got, _, _ = searcher_config(cfg)
    assert got.searcher.kind == "title_following" and got.searcher.policy_path is None


def test_the_untrained_flag_is_the_setting() -> None:
    from s3.commands.serve import untrained

    cfg = load_config(None, [])
    assert untrained(argparse.Namespace(untrained=True), cfg).searcher.default_policy is None
    assert untrained(argparse.Namespace(untrained=False), cfg).searcher.default_policy == "auto"


def test_an_unknown_shipped_searcher_is_a_clear_error() -> None:
    cfg = load_config(None, ["searcher.default_policy=nope"])
    with pytest.raises(ConfigError, match=r"nope: no such checkpoint or run directory, policy folder or shipped searcher \(shipped: "
                                          r"reading-hotpotqa"):
        searcher_config(cfg)


def test_s3_searchers_lists_them_with_scores_and_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import main

    assert main(["searchers"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split()[:4] == ["reading-hotpotqa", "reading", "titled", "0.462"]
    assert "default (searcher.default_policy = auto): reading-hotpotqa on a titled index, smollm2-135m-hotpotqa" in out
    assert main(["searchers", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["default"] == {"titled": "reading-hotpotqa", "untitled": DEFAULT}
    assert [s["name"] for s in body["searchers"]] == ["reading-hotpotqa", "title-following", DEFAULT]


def test_a_setting_of_another_kind_is_refused_before_any_model_loads(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the RL policy a reading setting would be ignored: `s3 search` refuses it in one line, naming the kind it
    belongs to, before the policy loads; the flat key that moved says where it went."""
    from s3.cli import main
    from searcher import policy

    monkeypatch.setattr(policy, "load_policy", lambda *a, **k: pytest.fail("the policy loaded before the check"))
    index = _index(tmp_path, titled=True)
    q = "Who made the Earthship?"
    assert main(["search", q, "--index", str(index), "--searcher", DEFAULT,
                 "--set", "searcher.reading.read_last=20"]) == 2
    err = capsys.readouterr().err
    assert "searcher.reading.read_last is a setting of searcher.kind = 'reading', and the searcher here is 'llm'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["search", q, "--index", str(index), "--set", "searcher.read_last=16"]) == 2
    err = capsys.readouterr().err
    assert "searcher.read_last is a setting of the reading searcher: it is now searcher.reading.read_last" in err
