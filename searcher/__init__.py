"""The searcher: an agent that queries a retriever, selects documents and decides when to stop.

It knows nothing of generators, rewards or training; a trained searcher is usable with this package and the layers
below it (`s3runtime`, `s3core`) alone:

    from searcher import build_trained_searcher

    searcher = build_trained_searcher(index="indexes/wiki")   # the best shipped one for the index; or a name / run dir
    result = searcher.search_one("Who directed the film about the inventor of the Earthship?")
    [d.title for d in result.documents]

or part by part, each from its own config section:

    from searcher import RetrieverConfig, SearcherConfig, build_index, build_policy, build_retriever, build_searcher

    index = build_index("corpus.jsonl", "bm25", "indexes/wiki")
    scfg = SearcherConfig(max_turns=2)
    searcher = build_searcher(scfg, build_retriever(RetrieverConfig(), index), build_policy(scfg), k0=3)

The names are imported on first use, so `import searcher` (and every `import searcher.<module>`) stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from searcher.agent import S3Searcher, SearchR1Agent
    from searcher.base import Searcher
    from searcher.build import (
        AgentKind,
        build_configured_searcher,
        build_policy,
        build_retriever,
        build_searcher,
        build_trained_searcher,
        trained_settings,
    )
    from searcher.config import RetrieverConfig, SearcherConfig, ServiceConfig
    from searcher.policy import Policy, ScriptedPolicy
    from searcher.retrieval import Retriever, build_index, load_retriever
    from searcher.title_following import ReadingSearcher, TitleFollowingSearcher
    from searcher.trained import TrainedSearcherRecord, apply_record, find_record

# public name -> the module that defines it
_HOME = {
    "S3Searcher": "searcher.agent",
    "SearchR1Agent": "searcher.agent",
    "Searcher": "searcher.base",
    "AgentKind": "searcher.build",
    "build_configured_searcher": "searcher.build",
    "build_policy": "searcher.build",
    "build_retriever": "searcher.build",
    "build_searcher": "searcher.build",
    "build_trained_searcher": "searcher.build",
    "trained_settings": "searcher.build",
    "RetrieverConfig": "searcher.config",
    "SearcherConfig": "searcher.config",
    "ServiceConfig": "searcher.config",
    "Policy": "searcher.policy",
    "ScriptedPolicy": "searcher.policy",
    "Retriever": "searcher.retrieval",
    "build_index": "searcher.retrieval",
    "load_retriever": "searcher.retrieval",
    "TitleFollowingSearcher": "searcher.title_following",
    "ReadingSearcher": "searcher.title_following",
    "TrainedSearcherRecord": "searcher.trained",
    "apply_record": "searcher.trained",
    "find_record": "searcher.trained",
}

__all__ = [
    "AgentKind",
    "Policy",
    "ReadingSearcher",
    "Retriever",
    "RetrieverConfig",
    "S3Searcher",
    "ScriptedPolicy",
    "SearchR1Agent",
    "Searcher",
    "SearcherConfig",
    "ServiceConfig",
    "TitleFollowingSearcher",
    "TrainedSearcherRecord",
    "apply_record",
    "build_configured_searcher",
    "build_index",
    "build_policy",
    "build_retriever",
    "build_searcher",
    "build_trained_searcher",
    "find_record",
    "load_retriever",
    "trained_settings",
]


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'searcher' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
