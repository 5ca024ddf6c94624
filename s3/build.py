"""Build what the one configuration describes: the public entry point for Python users and every `s3` command.

    from s3 import build_searcher, load_config

    cfg = load_config(["configs/cpu.toml"], ["retriever.index=indexes/wiki"])
    built = build_searcher(cfg)          # the best shipped searcher for the index; or build_searcher(cfg, policy=NAME)
    print(built.why)                     # which searcher runs, and why
    result = built.searcher.search_one("Who directed the film about the inventor of the Earthship?")

Each layer owns the builders of its own components, from its own typed config section: `searcher/build.py`
(retriever, policy, searcher), `generator_adapters/build.py` (generator, judge), `eval/accuracy.py`
(Acc(G(Q, D))). This module only composes them from `S3Config` and applies what a trained searcher recorded
(`searcher/trained.py`): its loop settings and its index, unless the user set them explicitly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

from s3.config import S3Config
from s3core.errors import S3Error
from searcher.base import Searcher
from searcher.build import (
    AgentKind,
    build_configured_searcher,
    build_retriever,
    default_searcher,
    trained_settings,
)
from searcher.retrieval.base import Retriever

log = logging.getLogger("s3.build")


class BuiltSearcher(NamedTuple):
    searcher: Searcher  # any kind (searcher/kinds.py): the s3 loop on a policy, a script, the reading searcher
    retriever: Retriever
    index_dir: Path | None
    cfg: S3Config  # the configuration it was built from (a named searcher's settings applied)
    why: str  # which searcher runs and why, in words (the CLI and /health say it)


def trained_config(cfg: S3Config, policy: str | Path, index: Path | None = None) -> tuple[S3Config, Path | None]:
    """`cfg` pointed at a named searcher (a shipped name, a run directory, a checkpoint or an exported policy folder),
    with the settings it records (searcher/build.py `trained_settings`), except what the user set explicitly — a new
    config: `cfg` is left as it is — and the index to use (the explicit one, else the recorded one, else None = the
    config's)."""
    searcher, retriever, index = trained_settings(policy, cfg.searcher, cfg.retriever, explicit=cfg.explicit_keys,
                                                  index=index)
    return cfg.model_copy(update={"searcher": searcher, "retriever": retriever}), index


# keys that name a searcher: set on purpose, the default searcher steps aside
NAMING_KEYS = ("searcher.kind", "searcher.model", "searcher.api_base", "searcher.policy_path")


def names_searcher(cfg: S3Config) -> str | None:
    """Why the configuration names its own searcher (so no default is chosen), in words; None when it does not."""
    s = cfg.searcher
    if s.policy_path is not None:
        return f"searcher.policy_path = {s.policy_path}"
    for key in NAMING_KEYS:
        if key in cfg.explicit_keys:
            return f"{key} is set"
    if "searcher.policy" in cfg.explicit_keys and s.policy == "litellm":
        return "searcher.policy = 'litellm' is set"
    return None


def searcher_config(cfg: S3Config, policy: str | Path | None = None, index: Path | None = None,
                    opened: dict[str, Retriever] | None = None) -> tuple[S3Config, Path | None, str]:
    """`cfg` pointed at the searcher to build, the index to open and why, in words: the named `policy` (with the
    settings and index it recorded, `trained_config`), else the configuration's own searcher where it names one, else
    the default (searcher.default_policy; 'auto' = the best measured shipped searcher for this index, which is opened
    to see whether its documents have titles), run over the user's index, never the corpus it was trained on.
    `opened`: where a retriever opened to choose is kept for the caller (`_open`)."""
    if policy is not None:
        cfg, index = trained_config(cfg, policy, index)
        return cfg, index, f"named: {policy}"
    named = names_searcher(cfg)
    if named is not None:
        return cfg, index, f"the configured searcher ({named})"
    choice, why = default_searcher(lambda: _open(cfg, index, opened), cfg.searcher.default_policy)
    if choice is None:
        return cfg, index, f"the configured searcher ({why})"
    searcher, retriever, _ = trained_settings(choice, cfg.searcher, cfg.retriever,
                                              explicit=cfg.explicit_keys | {"retriever.index"}, index=index)
    return cfg.model_copy(update={"searcher": searcher, "retriever": retriever}), index, f"{choice}: {why}"


def _open(cfg: S3Config, index: Path | None, opened: dict[str, Retriever] | None) -> Retriever:
    """The retriever of `cfg` over `index`, opened once for a build (kept in `opened` by its settings and place)."""
    where = index_dir(cfg, index)
    key = f"{cfg.retriever.model_dump_json()}|{where}"
    if opened is None:
        return build_retriever(cfg.retriever, where)
    if key not in opened:
        opened[key] = build_retriever(cfg.retriever, where)
    return opened[key]


def index_dir(cfg: S3Config, index: Path | None = None) -> Path | None:
    """The index to open: --index, else retriever.index; None where the backend needs none (remote, prebuilt)."""
    path = index if index is not None else cfg.resolve(cfg.retriever.index)
    if path is None and cfg.retriever.backend != "remote" and not cfg.retriever.lucene.prebuilt_index:
        raise S3Error("no index: pass --index DIR or set retriever.index (build one with `s3 index build`)")
    return path


def build_searcher(
    cfg: S3Config, index: Path | None = None, policy: str | Path | None = None, *, agent: AgentKind = "s3"
) -> BuiltSearcher:
    """The retriever and the searcher `cfg` describes (plus --index / --policy), and why that searcher.

    With `policy` (a shipped searcher's name, or a trained run, checkpoint or policy folder) the settings it records
    are applied first; without one, the configuration's own searcher where it names one, else the best shipped
    searcher for the index (searcher.default_policy)."""
    opened: dict[str, Retriever] = {}
    cfg, index, why = searcher_config(cfg, policy, index, opened)
    where = index_dir(cfg, index)
    retriever = _open(cfg, index, opened)
    searcher = build_configured_searcher(cfg.searcher, retriever, k0=cfg.retriever.k, agent=agent)
    log.info("searcher: %s (kind %s)", why, searcher.kind)
    return BuiltSearcher(searcher, retriever, where, cfg, why)
