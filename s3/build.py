"""Build what the one configuration describes: the public entry point for Python users and every `s3` command.

    from s3 import build_searcher, load_config

    cfg = load_config(["configs/cpu.toml"], ["retriever.index=indexes/wiki"])
    searcher, retriever, index = build_searcher(cfg)    # the shipped trained searcher; or build_searcher(cfg, policy=RUN_DIR)
    result = searcher.search_one("Who directed the film about the inventor of the Earthship?")

Each layer owns the builders of its own components, from its own typed config section: `searcher/build.py`
(retriever, policy, searcher), `generator_adapters/build.py` (generator, judge), `eval/accuracy.py`
(Acc(G(Q, D))). This module only composes them from `S3Config` and applies what a trained searcher recorded
(`searcher/trained.py`): its loop settings and its index, unless the user set them explicitly.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from s3.config import S3Config
from s3core.errors import S3Error
from searcher.agent import S3Searcher
from searcher.build import AgentKind, build_configured_searcher, build_retriever, trained_settings
from searcher.retrieval.base import Retriever
from searcher.title_following import TitleFollowingSearcher


class BuiltSearcher(NamedTuple):
    searcher: S3Searcher | TitleFollowingSearcher  # searcher.kind: the s3 loop on a policy, or the title-following script
    retriever: Retriever
    index_dir: Path | None


def trained_config(cfg: S3Config, policy: Path, index: Path | None = None) -> tuple[S3Config, Path | None]:
    """`cfg` pointed at a trained policy (a run directory, a checkpoint or an exported policy folder), with the searcher
    and retriever settings it was trained with (searcher/build.py `trained_settings`), except what the user set
    explicitly — a new config: `cfg` is left as it is — and the index to use (the explicit one, else the recorded one,
    else None = the config's)."""
    searcher, retriever, index = trained_settings(policy, cfg.searcher, cfg.retriever, explicit=cfg.explicit_keys,
                                                  index=index)
    return cfg.model_copy(update={"searcher": searcher, "retriever": retriever}), index


# keys that name an untrained LLM searcher: set on purpose, the shipped trained searcher steps aside
NAMING_KEYS = ("searcher.model", "searcher.api_base", "searcher.policy_path")


def default_policy(cfg: S3Config) -> Path | None:
    """The trained searcher to use when none is named: searcher.default_policy's shipped folder, unless the
    configuration names a searcher itself (policy_path, an explicit searcher.model or api_base, searcher.policy set to
    'litellm', searcher.kind = 'title_following': the script, no model) or default_policy is none. None = the searcher the configuration describes (the untrained LLM one)."""
    s = cfg.searcher
    named = s.policy_path is not None or any(k in cfg.explicit_keys for k in NAMING_KEYS)
    if named or s.kind != "llm" or s.default_policy is None or ("searcher.policy" in cfg.explicit_keys and s.policy == "litellm"):
        return None
    from searcher.policies import shipped_policy

    return shipped_policy(s.default_policy)


def searcher_config(cfg: S3Config, policy: Path | None = None, index: Path | None = None) -> tuple[S3Config, Path | None]:
    """`cfg` pointed at the searcher to build and the index to open: the trained `policy` (with the settings and index
    it recorded, `trained_config`), else the shipped default (`default_policy`: its recorded loop over the user's
    index, never the corpus it was trained on), else `cfg` as it is."""
    if policy is not None:
        return trained_config(cfg, policy, index)
    shipped = default_policy(cfg)
    if shipped is None:
        return cfg, index
    searcher, retriever, _ = trained_settings(shipped, cfg.searcher, cfg.retriever,
                                              explicit=cfg.explicit_keys | {"retriever.index"}, index=index)
    return cfg.model_copy(update={"searcher": searcher, "retriever": retriever}), index


def index_dir(cfg: S3Config, index: Path | None = None) -> Path | None:
    """The index to open: --index, else retriever.index; None where the backend needs none (remote, prebuilt)."""
    path = index if index is not None else cfg.resolve(cfg.retriever.index)
    if path is None and cfg.retriever.backend != "remote" and not cfg.retriever.lucene.prebuilt_index:
        raise S3Error("no index: pass --index DIR or set retriever.index (build one with `s3 index build`)")
    return path


def build_searcher(
    cfg: S3Config, index: Path | None = None, policy: Path | None = None, *, agent: AgentKind = "s3"
) -> BuiltSearcher:
    """The retriever, the policy and the searcher `cfg` describes (plus --index / --policy).

    With `policy` (a trained run, checkpoint or policy folder) the settings it was trained with are applied first;
    without one, the shipped trained searcher (searcher.default_policy) unless the configuration names another."""
    cfg, index = searcher_config(cfg, policy, index)
    where = index_dir(cfg, index)
    retriever = build_retriever(cfg.retriever, where)
    searcher = build_configured_searcher(cfg.searcher, retriever, k0=cfg.retriever.k, agent=agent)
    return BuiltSearcher(searcher, retriever, where)
