"""The searcher's typed build layer: one function per component, each from its own config section.

Every flow (the CLI, `s3 serve`, evaluation, training, Ray workers, benchmarks, tests) builds its retriever, policy and
searcher here, so a setting means the same thing everywhere. It needs nothing above `searcher/`:

    retriever = build_retriever(cfg.retriever, Path("indexes/wiki"))
    searcher = build_searcher(cfg.searcher, retriever, build_policy(cfg.searcher), k0=cfg.retriever.k)

A trained searcher (a run directory, a checkpoint or an exported policy folder, with its searcher.json) in one call,
served with the loop settings and the index it was trained with unless given:

    searcher = build_trained_searcher(index="indexes/wiki")   # the shipped one (searcher/policies/); or a run dir first
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal

from s3core.errors import ConfigError, S3Error
from searcher.agent import S3Searcher, SearchR1Agent
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.policy.base import Policy
from searcher.retrieval.base import Retriever
from searcher.title_following import TitleFollowingSearcher, build_title_following
from searcher.trained import apply_record, find_record

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


def build_configured_searcher(
    cfg: SearcherConfig, retriever: Retriever, *, k0: int, agent: AgentKind = "s3", threads: int | None = None
) -> S3Searcher | TitleFollowingSearcher:
    """The searcher `cfg.kind` names over `retriever`: the s3 loop (or the Search-R1 agent) on the policy `cfg`
    describes, or the title-following script (searcher/title_following.py; no policy is built)."""
    if cfg.kind == "title_following":
        if agent != "s3":
            raise ConfigError("searcher.kind = 'title_following' is an s3 searcher (documents for a generator), not a "
                              "Search-R1 agent")
        return build_title_following(cfg, retriever, k0=k0)
    return build_searcher(cfg, retriever, build_policy(cfg, threads=threads), k0=k0, agent=agent)


def trained_settings(
    policy: Path,
    searcher_cfg: SearcherConfig,
    retriever_cfg: RetrieverConfig,
    *,
    explicit: Collection[str] = (),
    index: Path | None = None,
) -> tuple[SearcherConfig, RetrieverConfig, Path | None]:
    """The settings to serve the trained policy at `policy` (a run directory, a checkpoint or an exported policy
    folder) with: the loop settings and the index its searcher.json recorded (`searcher/trained.py`), except the
    dotted keys in `explicit` ("searcher.max_turns", ...) and an explicit `index`; the policy loads in process
    (transformers, or vLLM when "searcher.policy" is explicit). Returns (searcher, retriever, index or None)."""
    if not policy.exists():
        raise S3Error(f"--policy {policy}: no such checkpoint or run directory")
    found = find_record(policy)
    if found is not None:
        record, folder = found
        searcher_cfg, retriever_cfg, index = apply_record(
            record, folder, searcher_cfg, retriever_cfg, explicit=explicit, index=index
        )
    backend = searcher_cfg.policy
    if "searcher.policy" not in explicit or backend == "litellm":
        backend = "transformers"  # a checkpoint loads in process (vLLM when set explicitly)
    return searcher_cfg.model_copy(update={"policy": backend, "policy_path": str(policy.resolve())}), retriever_cfg, index


def build_trained_searcher(
    policy: str | Path | None = None,
    index: str | Path | None = None,
    *,
    searcher_cfg: SearcherConfig | None = None,
    retriever_cfg: RetrieverConfig | None = None,
    explicit: Collection[str] = (),
    agent: AgentKind = "s3",
) -> S3Searcher:
    """A trained searcher, with `searcher/` and the layers below it alone: the policy at `policy` (default: the one
    shipped with s3, `searcher.policies.shipped_policy()`) on the loop settings it was trained with, over `index`
    (default: the index its searcher.json names, checked by fingerprint). The record's loop settings replace those
    of `searcher_cfg` except the dotted keys in `explicit` ("searcher.max_turns"); its sampling and device settings
    stay."""
    if policy is None:
        from searcher.policies import DEFAULT, shipped_policy

        policy = shipped_policy((searcher_cfg or SearcherConfig()).default_policy or DEFAULT)
    scfg, rcfg, where = trained_settings(
        Path(policy), searcher_cfg or SearcherConfig(), retriever_cfg or RetrieverConfig(),
        explicit=explicit, index=Path(index) if index is not None else None,
    )
    return build_searcher(scfg, build_retriever(rcfg, where), build_policy(scfg), k0=rcfg.k, agent=agent)
