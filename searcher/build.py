"""The searcher's typed build layer: one function per component, each from its own config section.

Every flow (the CLI, `s3 serve`, evaluation, training, Ray workers, benchmarks, tests) builds its retriever, policy and
searcher here, so a setting means the same thing everywhere. It needs nothing above `searcher/`:

    retriever = build_retriever(cfg.retriever, Path("indexes/wiki"))
    searcher = build_searcher(cfg.searcher, retriever, build_policy(cfg.searcher), k0=cfg.retriever.k)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from searcher.agent import S3Searcher, SearchR1Agent
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.policy.base import Policy
from searcher.retrieval.base import Retriever

AgentKind = Literal["s3", "search_r1"]


def build_retriever(
    cfg: RetrieverConfig, index: str | Path | None = None, *, expect_corpus: str | Path | None = None
) -> Retriever:
    """The retriever `cfg` describes over `index` (default: `cfg.index`; none for `remote` / a Lucene prebuilt index).

    `expect_corpus`: the index must have been built from a file with this file's sha256."""
    from searcher.retrieval import load_retriever

    return load_retriever(cfg, index, expect_corpus=expect_corpus)  # type: ignore[no-any-return]


def build_policy(cfg: SearcherConfig, *, threads: int | None = None) -> Policy:
    """The searcher policy `cfg` describes (litellm / transformers / vllm; `cfg.policy_path` = a trained checkpoint)."""
    from searcher.policy import load_policy

    return load_policy(cfg, threads=threads)


def build_searcher(
    cfg: SearcherConfig, retriever: Retriever, policy: Policy, *, k0: int, agent: AgentKind = "s3"
) -> S3Searcher:
    """The s3 loop (or the Search-R1 agent) over `retriever` and `policy`; `k0` = the naive-RAG k of begin-with-search."""
    cls = SearchR1Agent if agent == "search_r1" else S3Searcher
    return cls(policy, retriever, cfg, k0=k0)
