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

from collections.abc import Callable, Collection
from pathlib import Path

from searcher import kinds
from searcher.agent import S3Searcher
from searcher.base import Searcher
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.kinds import AgentKind
from searcher.policy.base import Policy
from searcher.retrieval.base import Retriever
from searcher.trained import apply_record, find_record


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
    """The s3 loop (or the Search-R1 agent) over `retriever` and `policy`, beginning from the start searcher.start
    names; `k0` = the naive-RAG k of begin-with-search. Training and the benchmarks that drive the loop build here."""
    return kinds.build_loop(cfg, retriever, policy, k0=k0, agent=agent)


def build_configured_searcher(
    cfg: SearcherConfig, retriever: Retriever, *, k0: int, agent: AgentKind = "s3", threads: int | None = None
) -> Searcher:
    """The searcher `cfg.kind` names over `retriever` (searcher/kinds.py, the one registry), its settings checked:
    the s3 loop (or the Search-R1 agent) on the policy `cfg` describes, the title-following script, or the reading
    searcher."""
    return kinds.build(cfg, retriever, k0=k0, agent=agent, threads=threads)


def trained_settings(
    policy: str | Path,
    searcher_cfg: SearcherConfig,
    retriever_cfg: RetrieverConfig,
    *,
    explicit: Collection[str] = (),
    index: Path | None = None,
) -> tuple[SearcherConfig, RetrieverConfig, Path | None]:
    """The settings to run the named searcher `policy` with (a shipped name, searcher/policies/<name>; a run
    directory, a checkpoint or an exported policy folder): its kind, its settings and, for a trained policy, the loop
    settings and the index its searcher.json recorded (`searcher/trained.py`), except the dotted keys in `explicit`
    ("searcher.max_turns", ...) and an explicit `index`; a policy loads in process (transformers, or vLLM when
    "searcher.policy" is explicit). Returns (searcher, retriever, index or None)."""
    from searcher.policies import resolve

    path = resolve(policy)
    found = find_record(path)
    if found is not None:
        record, folder = found
        searcher_cfg, retriever_cfg, index = apply_record(
            record, folder, searcher_cfg, retriever_cfg, explicit=explicit, index=index
        )
    if not kinds.KINDS[searcher_cfg.kind].runs_policy:  # a script or the reading searcher: no policy to load
        return searcher_cfg, retriever_cfg, index
    backend = searcher_cfg.policy
    if "searcher.policy" not in explicit or backend == "litellm":
        backend = "transformers"  # a checkpoint loads in process (vLLM when set explicitly)
    return searcher_cfg.model_copy(update={"policy": backend, "policy_path": str(path.resolve())}), retriever_cfg, index


def default_searcher(open_index: Callable[[], Retriever], default_policy: str | None) -> tuple[str | None, str]:
    """The shipped searcher to run when none is named, and why (in words): searcher.default_policy's name, or for
    'auto' the best measured one for the index `open_index` opens (titled or not: `searcher.policies.best_for`; it is
    opened only then); None = the configured searcher (default_policy none)."""
    from searcher.policies import AUTO, best_for
    from searcher.title_following import has_titles

    if default_policy is None:
        return None, "searcher.default_policy is none / --untrained"
    if default_policy != AUTO:
        return default_policy, f"searcher.default_policy = {default_policy!r}"
    card, why = best_for(has_titles(open_index()))
    return card.name, why


def build_trained_searcher(
    policy: str | Path | None = None,
    index: str | Path | None = None,
    *,
    searcher_cfg: SearcherConfig | None = None,
    retriever_cfg: RetrieverConfig | None = None,
    explicit: Collection[str] = (),
    agent: AgentKind = "s3",
) -> Searcher:
    """A named searcher, with `searcher/` and the layers below it alone: `policy` (a shipped name or a trained run's
    folder; default: the best shipped one for the index, searcher.default_policy) on the settings it records, over
    `index` (default: the index a trained policy's searcher.json names, checked by fingerprint). The record's settings
    replace those of `searcher_cfg` except the dotted keys in `explicit` ("searcher.max_turns"); its sampling and
    device settings stay."""
    scfg, rcfg = searcher_cfg or SearcherConfig(), retriever_cfg or RetrieverConfig()
    where = Path(index) if index is not None else None
    opened: list[tuple[RetrieverConfig, Retriever]] = []  # the index opened to choose a default, kept for the search

    def open_index(cfg: RetrieverConfig) -> Retriever:
        if not opened or opened[0][0] != cfg:
            opened[:] = [(cfg, build_retriever(cfg, where))]
        return opened[0][1]

    if policy is None:
        from searcher.policies import DEFAULT

        if where is None:  # nothing to choose by: the shipped policy brings its own index
            policy = scfg.default_policy if scfg.default_policy not in (None, "auto") else DEFAULT
        else:
            policy = default_searcher(lambda: open_index(rcfg), scfg.default_policy or "auto")[0] or DEFAULT
    scfg, rcfg, found = trained_settings(policy, scfg, rcfg, explicit=explicit, index=where)
    retriever = open_index(rcfg) if found == where else build_retriever(rcfg, found)
    return build_configured_searcher(scfg, retriever, k0=rcfg.k, agent=agent)
