"""The searchers that ship with s3, as package data: one folder per named searcher, each with a searcher.json that
records its kind, its settings and a card (where it applies, what it measured); a trained policy's folder holds its
LoRA adapter and a README beside it.

    from searcher.policies import catalog, resolve, best_for

    resolve("reading-hotpotqa")        # the folder of a shipped searcher (or a path: a run directory, a policy folder)
    best_for(titled=True)              # the default for a titled index: the best measured searcher that applies
    [c.name for c in catalog()]        # what `s3 searchers` lists

Shipped: `reading-hotpotqa` (kind reading: the title-following script plus one page read by a 135M reader and picked
by a ranker; 0.462 GenAcc on hotpotqa_dev500 with the 1.5B generator, the best measured on a titled corpus),
`title-following` (the script alone, no model; 0.432), `smollm2-135m-hotpotqa` (the RL-trained s3 policy, a 9.8 MB LoRA
adapter on the offline SmolLM2-135M; 0.390, and the only one that needs no titles).

Beside them, the reading searcher's rankers (`links-hotpotqa.json`, no model; `links-reader-hotpotqa.json`, which reads
with the pointwise reader in `reader-smollm2-135m-hotpotqa/`: a LoRA adapter without a searcher.json, a reader, not a
searcher; searcher/title_following/).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError

__all__ = ["AUTO", "DEFAULT", "HOME", "Card", "best_for", "catalog", "names", "resolve", "shipped_policy"]

HOME = Path(__file__).resolve().parent
DEFAULT = "smollm2-135m-hotpotqa"  # the trained policy build_trained_searcher loads when none is named
AUTO = "auto"  # searcher.default_policy: the best measured searcher for the index at hand (`best_for`)


@dataclass(frozen=True)
class Card:
    """What a shipped searcher says of itself (searcher.json's "card"): its kind, where it applies ('titled': an index
    whose documents have titles; 'any'), what it is, and what it measured (rows of dataset, generator, genacc,
    naive_rag_top3, documents, seconds_per_question, source)."""

    name: str
    kind: str
    applies: str
    about: str
    measured: list[dict[str, Any]]

    @property
    def score(self) -> float:
        """The GenAcc it is ranked by: its first measured row's (the primary benchmark: hotpotqa_dev500, 1.5B)."""
        return float(self.measured[0]["genacc"]) if self.measured else float("-inf")

    def fits(self, titled: bool | None) -> bool:
        """Whether it applies to an index with (True), without (False) or with unknown (None) titles."""
        return self.applies == "any" or (self.applies == "titled" and titled is True)


def names() -> list[str]:
    """The shipped searchers (folders with a searcher.json)."""
    return sorted(p.name for p in HOME.iterdir() if p.is_dir() and (p / "searcher.json").is_file())


def shipped_policy(name: str = DEFAULT) -> Path:
    """The folder of the shipped searcher `name`, or a clear error listing those that ship."""
    if name in names():
        return HOME / name
    raise ConfigError(f"{name!r}: no such shipped searcher (shipped: {', '.join(names()) or 'none'}; `s3 searchers` "
                      "lists them; none = the untrained searcher)")


def resolve(name_or_path: str | Path) -> Path:
    """A named searcher: a path that exists (a run directory, a checkpoint, a policy folder), else a shipped name
    (searcher/policies/<name>). Neither is a clear error."""
    path = Path(name_or_path)
    if path.exists():
        return path
    if isinstance(name_or_path, str) and "/" not in name_or_path and name_or_path in names():
        return HOME / name_or_path
    raise ConfigError(f"{name_or_path}: no such checkpoint or run directory, policy folder or shipped searcher (shipped: "
                      f"{', '.join(names())}; `s3 searchers` lists them)")


def catalog() -> list[Card]:
    """Every shipped searcher's card, best measured first."""
    from searcher.trained import find_record

    cards = []
    for name in names():
        found = find_record(HOME / name)
        assert found is not None  # names() lists the folders with a searcher.json
        record = found[0]
        card = record.card or {}
        cards.append(Card(name, record.kind, str(card.get("applies", "any")), str(card.get("about", "")),
                          list(card.get("measured", []))))
    return sorted(cards, key=lambda c: (-c.score, c.name))


def best_for(titled: bool | None) -> tuple[Card, str]:
    """The default searcher for an index with (True), without (False) or with unknown (None) titles: the best
    measured shipped searcher that applies there, and why, in words."""
    fits = [c for c in catalog() if c.fits(titled)]
    if not fits:
        raise ConfigError("no shipped searcher applies to this index: name one with --searcher / --policy")
    best = fits[0]
    row = best.measured[0] if best.measured else {}
    where = {True: "a titled index", False: "an index without titles",
             None: "an index whose titles could not be read (a remote retriever)"}[titled]
    measured = (f"{row['genacc']:.3f} GenAcc on {row['dataset']} with {row['generator']}" if row else "unmeasured")
    return best, f"the default for {where}: the best measured shipped searcher that applies there ({measured})"
