"""Every searcher kind, registered in one place: what each builds, which config sections it reads, what it needs of
the index. Callers build through `build` (searcher/build.py `build_configured_searcher`) and take the
`Searcher` protocol (searcher/base.py); nothing outside this module branches on a kind.

    build(cfg, retriever, k0=3)        # the searcher cfg.kind names (cfg.kind = "reading": a ReadingSearcher)
    check_settings(cfg)                # a setting of another kind's section is refused, named

A new kind is one `Kind` entry here (its class implements `Searcher`), its name in searcher.kind's Literal
(searcher/config.py) and, where it has settings of its own, one config section on SearcherConfig named as the kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from s3core.errors import ConfigError
from searcher.agent import S3Searcher, SearchR1Agent
from searcher.base import Searcher, Start, TopK
from searcher.config import SearcherConfig
from searcher.policy.base import Policy

__all__ = ["KINDS", "AgentKind", "Kind", "build", "build_start", "check_settings", "foreign_settings"]

AgentKind = Literal["s3", "search_r1"]


@dataclass(frozen=True)
class Kind:
    """One searcher kind: `make(cfg, retriever, k0, agent, threads)` builds it; `sections`: the [searcher.<name>]
    sections it reads (a setting of any other kind's section is refused); `runs_policy`: it runs searcher.policy /
    searcher.model (a trained policy folder applies to it)."""

    make: Callable[[SearcherConfig, Any, int, AgentKind, int | None], Searcher]
    sections: tuple[str, ...]
    runs_policy: bool


def _llm(cfg: SearcherConfig, retriever: Any, k0: int, agent: AgentKind, threads: int | None) -> Searcher:
    from searcher.policy import load_policy

    return build_loop(cfg, retriever, load_policy(cfg, threads=threads), k0=k0, agent=agent)


def _script(cls_name: str) -> Callable[[SearcherConfig, Any, int, AgentKind, int | None], Searcher]:
    def make(cfg: SearcherConfig, retriever: Any, k0: int, agent: AgentKind, threads: int | None) -> Searcher:
        from searcher import title_following as tf

        if agent != "s3":
            raise ConfigError(f"searcher.kind = {cfg.kind!r} is an s3 searcher (documents for a generator), not a "
                              "Search-R1 agent")
        if cfg.policy_path:
            raise ConfigError(f"searcher.kind = {cfg.kind!r} runs no model: unset searcher.policy_path / --policy "
                              f"({cfg.policy_path!r}), or use searcher.kind = 'llm' for a trained searcher")
        titles = tf.corpus_titles(retriever)
        if cfg.kind != "reading" or cfg.reading.start == "title_following":  # the reading searcher starts from top-k
            tf.check_titled(titles, retriever, cfg.kind)                    # where the index has no titles
        cls = getattr(tf, cls_name)
        return cls(retriever, cfg, k0=k0, titles=titles)  # type: ignore[no-any-return]

    return make


KINDS: dict[str, Kind] = {
    # a policy LLM in the s3 loop (searches, selects, stops); trained by `s3 train`
    "llm": Kind(_llm, (), runs_policy=True),
    # a script, no model (titled indexes only): naive RAG's top-k plus the pages titled as a name it read
    "title_following": Kind(_script("TitleFollowingSearcher"), ("title_following",), runs_policy=False),
    # that script plus one page of the question's own list, picked by a trained ranker over a small trained reader
    "reading": Kind(_script("ReadingSearcher"), ("title_following", "reading"), runs_policy=False),
}


def foreign_settings(cfg: SearcherConfig) -> list[tuple[str, str]]:
    """The settings of `cfg` that its kind would ignore: (dotted key under searcher, the kind it belongs to), for each
    field of another kind's section (a section named as its kind) set away from its default. The title-following
    start reads that script's section too."""
    reads = set(KINDS[cfg.kind].sections)
    if cfg.start == "title_following":
        reads.add("title_following")
    out = []
    for owner in KINDS:
        if owner in reads or owner not in SearcherConfig.model_fields:
            continue
        value = getattr(cfg, owner)
        default = type(value)()
        out += [(f"{owner}.{f}", owner) for f in type(value).model_fields if getattr(value, f) != getattr(default, f)]
    return out


def check_settings(cfg: SearcherConfig) -> None:
    """A setting of another kind's section is refused, with the kind it belongs to (never accepted and ignored)."""
    if cfg.kind not in KINDS:
        raise ConfigError(f"searcher.kind = {cfg.kind!r}: no such kind (kinds: {', '.join(KINDS)})")
    wrong = foreign_settings(cfg)
    if wrong:
        key, owner = wrong[0]
        raise ConfigError(f"searcher.{key} is a setting of searcher.kind = {owner!r}, and the searcher here is "
                          f"{cfg.kind!r}: it would be ignored. Run the {owner!r} searcher (--set searcher.kind={owner}, "
                          f"or a named one: `s3 searchers`), or leave searcher.{key} unset")


def build_start(cfg: SearcherConfig, retriever: Any, k0: int) -> Start:
    """The start searcher.start names, over `retriever`: naive RAG's top-k0, or the title-following script."""
    if cfg.start == "title_following":
        from searcher.title_following import TitleFollowingStart, corpus_titles

        return TitleFollowingStart(retriever, k0, corpus_titles(retriever))
    return TopK(retriever, k0)


def build_loop(cfg: SearcherConfig, retriever: Any, policy: Policy, *, k0: int, agent: AgentKind = "s3") -> S3Searcher:
    """The s3 loop (or the Search-R1 agent) on `policy`, beginning from the start searcher.start names."""
    cls = SearchR1Agent if agent == "search_r1" else S3Searcher
    return cls(policy, retriever, cfg, k0=k0, start=build_start(cfg, retriever, k0))


def build(cfg: SearcherConfig, retriever: Any, *, k0: int, agent: AgentKind = "s3", threads: int | None = None) -> Searcher:
    """The searcher searcher.kind names over `retriever`, its settings checked first."""
    check_settings(cfg)
    return KINDS[cfg.kind].make(cfg, retriever, k0, agent, threads)
