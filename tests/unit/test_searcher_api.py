"""`searcher` exports its public names (`__all__`), lazily, and its documented usage works with `searcher/` alone."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import searcher
from s3core.corpus import write_corpus
from s3core.errors import ConfigError, S3Error
from s3core.types import Document

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    Document(id="earthship", title="Earthship", text="An Earthship is a passive solar house designed by Michael Reynolds."),
    Document(id="garbage", title="Garbage Warrior", text="Garbage Warrior is a 2007 film by Oliver Hodge about Reynolds."),
    Document(id="hamlet", title="Hamlet", text="Hamlet is a tragedy written by William Shakespeare."),
    Document(id="solar", title="Passive solar", text="Passive solar design uses the sun to heat a building."),
]


def test_every_public_name_imports_from_the_package_and_is_its_modules_own() -> None:
    from searcher import (  # noqa: F401  (the import itself is the test)
        AgentKind,
        Policy,
        Retriever,
        RetrieverConfig,
        S3Searcher,
        ScriptedPolicy,
        SearcherConfig,
        SearchR1Agent,
        ServiceConfig,
        TrainedSearcherRecord,
        apply_record,
        build_index,
        build_policy,
        build_retriever,
        build_searcher,
        build_trained_searcher,
        find_record,
        load_retriever,
        trained_settings,
    )

    assert sorted(searcher.__all__) == searcher.__all__ and len(set(searcher.__all__)) == len(searcher.__all__)
    for name in searcher.__all__:
        obj = getattr(searcher, name)
        home = importlib.import_module(searcher._HOME[name])
        assert getattr(home, name) is obj, name
    assert set(searcher._HOME) == set(searcher.__all__) and set(searcher.__all__) <= set(dir(searcher))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = searcher.nothing_here  # type: ignore[attr-defined]


def test_importing_the_package_and_its_names_loads_no_model_framework() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import searcher; first = time.perf_counter() - t\n"
        "from searcher import S3Searcher, SearcherConfig, build_searcher, build_trained_searcher, build_index\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'vllm', 'litellm', 'peft') if m in sys.modules)\n"
        "print(first, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    first, heavy = out.split(" ", 1)
    assert heavy.strip() == "[]"
    assert float(first) < 0.5  # `import searcher` alone imports nothing else (measured ~0.0001 s here)


def test_the_documented_part_by_part_usage(tmp_path: Path) -> None:
    from searcher import (
        RetrieverConfig,
        S3Searcher,
        ScriptedPolicy,
        SearcherConfig,
        build_index,
        build_policy,
        build_retriever,
        build_searcher,
    )

    write_corpus(tmp_path / "corpus.jsonl", DOCS)
    index = build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "indexes" / "wiki")
    scfg = SearcherConfig(max_turns=2)
    built = build_searcher(scfg, build_retriever(RetrieverConfig(), index), build_policy(scfg), k0=3)
    assert isinstance(built, S3Searcher)  # the default policy (offline litellm model) is built, not called here
    # the same loop with a scripted policy: keeps the first document of naive RAG's window and stops
    stop = "<important_info>[1]</important_info><search_complete>True</search_complete>"
    s = build_searcher(scfg, build_retriever(RetrieverConfig(), index), ScriptedPolicy(lambda _p, _i: stop), k0=3)
    result = s.search_one("Who designed the Earthship?")
    assert [d.id for d in result.documents] == ["earthship"] and result.error is None


def test_trained_settings_apply_the_record_and_load_the_policy_in_process(tmp_path: Path) -> None:
    from searcher import RetrieverConfig, SearcherConfig, trained_settings

    policy = ROOT / "searcher" / "policies" / "smollm2-135m-hotpotqa"
    mine = tmp_path / "mine"
    record = json.loads((policy / "searcher.json").read_text())
    scfg, rcfg, index = trained_settings(policy, SearcherConfig(max_turns=1), RetrieverConfig(), index=mine)
    # every searcher.json setting replaces the default (max_turns=1 here is a default, not a flag); the explicit
    # index wins over the recorded one
    rec = record["searcher"]
    assert rec["max_turns"] != 1
    for name in ("max_turns", "k", "max_select", "doc_token_budget", "max_new_tokens", "context_cap", "additive"):
        assert getattr(scfg, name) == rec[name], name
    assert (rcfg.backend, rcfg.k, index) == (record["retriever"]["backend"], record["retriever"]["k"], mine)
    assert (scfg.policy, scfg.policy_path) == ("transformers", str(policy.resolve()))
    keep, _, _ = trained_settings(policy, SearcherConfig(max_turns=1, policy="vllm"), RetrieverConfig(),
                                  explicit={"searcher.max_turns", "searcher.policy"}, index=mine)
    assert (keep.max_turns, keep.policy) == (1, "vllm")
    # no index given: the recorded one, which a clone has not built yet; the error says how to rebuild it
    if not (policy / record["retriever"]["index"]).is_dir():
        with pytest.raises(ConfigError, match=r"which is missing.*s3 index build"):
            trained_settings(policy, SearcherConfig(), RetrieverConfig())
    with pytest.raises(S3Error, match="no such checkpoint"):
        trained_settings(tmp_path / "nothing", SearcherConfig(), RetrieverConfig())


def test_an_api_policy_whose_provider_needs_a_key_that_is_not_configured_is_refused_at_load() -> None:
    """Issue 79, for the searcher as for the generator: `searcher.model = "openai/..."` with no searcher.api_key_env
    is refused when the policy loads, naming the setting and the provider's variable, before any call."""
    from s3core.errors import ConfigError
    from searcher.config import SearcherConfig
    from searcher.policy import load_policy

    with pytest.raises(ConfigError, match=r"searcher\.api_key_env.*OPENAI_API_KEY|OPENAI_API_KEY.*searcher\.api_key_env"):
        load_policy(SearcherConfig(policy="litellm", model="openai/gpt-4o-mini"))
    served = load_policy(SearcherConfig(policy="litellm", model="hosted_vllm/x", api_base="http://127.0.0.1:9"))
    assert served is not None  # a server of the user's own needs no key
