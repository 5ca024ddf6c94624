"""One more page after the title-following script, chosen by a trained ranker: the script follows the names it reads
in the question and naive RAG's top-k0; the pages those documents name in turn (a second hop), and pages the question
names that the span search missed, are often still in the question's own retrieval list, a little further down.

    from searcher.title_following.links import LinkRanker
    ranker = LinkRanker.load("links-reader-hotpotqa")  # shipped (searcher/policies/<name>.json) or a path
    i = ranker.best(question, found, candidates, ranks)   # the candidate to add

The ranker is a logistic regression over `RANKER_FEATURES` of each candidate (a page of the question's own bm25 list
at ranks k0+1..read_last that the script lacks), fitted on training questions' gold labels by
`benchmarks/transfer_checks.py read` (experiments/transfer_checks.py `fit_ranker`). Its score is a log-odds, a plain
weighted sum a person can read. Two ship (docs/transfer.md, "Reading with what the script found" and "The reader
ships"): `links-reader-hotpotqa` weighs a trained pointwise reader's score ("reader"; searcher/title_following/reader.py) as well, and
loads that reader from beside it (searcher/policies/reader-smollm2-135m-hotpotqa, a 9.8 MB LoRA adapter on the offline
SmolLM2-135M; ~0.1 s a page read); `links-hotpotqa` uses no model: bm25 rank and which names link the page to what was
found. A ranker fitted over another reader's score runs beside that reader (searcher.reading.reader): `LinkRanker.load` says
so where it is missing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from s3core.errors import ConfigError
from s3core.types import Document
from searcher.policies import HOME
from searcher.titles import contains_phrase, norm, title_variants

__all__ = ["NO_READING", "RANKER_FEATURES", "LinkRanker", "ranker_rows", "ranker_score"]

RANKER_FEATURES = ("reader", "log_rank", "named_in_found", "named_in_question", "names_found")
NO_READING = RANKER_FEATURES[1:]  # the same ranker without the reader's score: no model at all
SHIPPED = HOME  # searcher/policies/: the shipped rankers and the readers beside them


def ranker_rows(question: str, found: Sequence[Document], candidates: Sequence[Document], ranks: Sequence[int],
                reader: Sequence[float] | None = None) -> list[dict[str, float]]:
    """What the ranker sees of each candidate where the script ends (`RANKER_FEATURES`), all of it a searcher has at
    test time: the pointwise reader's score (`reader`; 0 without one); the log of its rank in the question's own
    retrieval list; whether its title (a `title_variants` form) is named in the text of a document already `found`
    (the script's: a bridge page one more hop would follow) and in the question; how many found documents' titles its
    own text names (at most 2).

    >>> d = lambda t, x="": Document(id=t, title=t, text=x)
    >>> found = [d("Ann Lee", "Ann Lee was born in Oslo (city)."), d("Bob")]
    >>> rows = ranker_rows("Where was Ann Lee born?", found, [d("Oslo (city)", "Bob and Ann Lee"), d("Rome")],
    ...                    [4, 9], [0.5, -1.0])
    >>> [rows[0][k] for k in RANKER_FEATURES], rows[1]["named_in_found"], round(rows[1]["log_rank"], 3)
    ([0.5, 1.386, 1.0, 0.0, 2.0], 0.0, 2.197)
    """
    seen = norm(" ".join(f"{x.title} {x.text}" for x in found))
    asked = norm(question)
    titles = [title_variants(x.title) for x in found]
    scores = [0.0] * len(candidates) if reader is None else reader
    out = []
    for c, rank, score in zip(candidates, ranks, scores, strict=True):
        forms, text = title_variants(c.title), norm(c.text)
        out.append({"reader": float(score), "log_rank": round(math.log(rank), 3),
                    "named_in_found": float(any(contains_phrase(seen, f) for f in forms)),
                    "named_in_question": float(any(contains_phrase(asked, f) for f in forms)),
                    "names_found": float(min(2, sum(any(contains_phrase(text, f) for f in t) for t in titles)))})
    return out


def ranker_score(weights: Mapping[str, float], row: Mapping[str, float]) -> float:
    """The ranker's log-odds that a candidate is gold: `weights`' bias plus each weighted feature of `row`.

    >>> ranker_score({"a": 2.0, "bias": -1.0}, {"a": 1.0, "b": 5.0})
    1.0
    """
    return weights["bias"] + sum(w * row[f] for f, w in weights.items() if f != "bias")


@dataclass(frozen=True)
class LinkRanker:
    """A trained ranker of the pages the script leaves: `weights` (one a feature of `RANKER_FEATURES`, and "bias"; with
    "reader" it `reads`: it needs a pointwise reader's score of each candidate, searcher.reading.reader)."""

    name: str
    weights: dict[str, float]
    ranks: tuple[int, int] | None = None  # the ranks of the question's list it was fitted on, where its file says
    reader: str | None = None  # the reader whose scores it was fitted on, where its file says (its tag)

    @property
    def reads(self) -> bool:
        """Whether it weighs a pointwise reader's score (and so needs searcher.reading.reader)."""
        return "reader" in self.weights

    @property
    def shipped_reader(self) -> str | None:
        """The reader it was fitted with, where that ships beside it (searcher/policies/<reader>/: a LoRA adapter or a
        checkpoint): what it reads with when searcher.reading.reader is unset."""
        where = SHIPPED / self.reader if self.reader else None
        if where is None or not any((where / f).is_file() for f in ("adapter_config.json", "config.json")):
            return None
        return str(where)

    def reader_for(self, configured: str | None) -> str | None:
        """The reader it reads with: `configured` (searcher.reading.reader), else its `shipped_reader`; None for a ranker that
        does not read (or a reader nowhere to be had, which `load` refuses)."""
        return (configured or self.shipped_reader) if self.reads else None

    @classmethod
    def load(cls, name_or_path: str, *, reader: str | None = None) -> LinkRanker:
        """A shipped ranker by name (searcher/policies/<name>.json) or a ranker file's path: {"weights": {...}}, as
        `benchmarks/transfer_checks.py read` writes it. A feature it does not know, a missing bias, the reader's score
        without a `reader` (searcher.reading.reader, else the `shipped_reader` it names) to give it, or a `reader` the ranker
        would not read, is a ConfigError that says so."""
        path = Path(name_or_path)
        if not path.suffix and "/" not in name_or_path:
            path = SHIPPED / f"{name_or_path}.json"
        if not path.is_file():
            shipped = sorted(p.stem for p in SHIPPED.glob("*.json"))
            raise ConfigError(f"searcher.reading.ranker = {name_or_path!r}: no such file or shipped ranker (shipped: "
                              f"{', '.join(shipped) or 'none'})")
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            weights = {str(k): float(v) for k, v in body["weights"].items()}
            ranks = tuple(int(r) for r in body["ranks"]) if "ranks" in body else None
            fitted_with = str(body["reader"]) if body.get("reader") else None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"{path.name}: not a ranker file ({{\"weights\": {{feature: number, \"bias\": number}}}}"
                              f"): {e}") from None
        unknown = sorted(set(weights) - {*RANKER_FEATURES, "bias"})
        if unknown or "bias" not in weights:
            raise ConfigError(f"{path.name}: features must be among {', '.join(RANKER_FEATURES)} plus a bias; got "
                              f"{', '.join(unknown) or 'no bias'}")
        if ranks is not None and len(ranks) != 2:
            raise ConfigError(f"{path.name}: ranks must be [first, last], got {list(ranks)}")
        made = cls(path.stem, weights, (ranks[0], ranks[1]) if ranks else None, fitted_with)
        if made.reads and made.reader_for(reader) is None:
            raise ConfigError(f"{path.name} weighs a trained pointwise reader's score"
                              f"{f' ({fitted_with})' if fitted_with else ''}, and the reader does not ship with s3: "
                              "set searcher.reading.reader to that reader's directory, or use a ranker fitted without it "
                              "(links-hotpotqa)")
        if reader and not made.reads:
            raise ConfigError(f"searcher.reading.reader is set but {path.name} does not weigh a reader's score: unset "
                              "searcher.reading.reader (it would be loaded and never read), or use a ranker fitted with it")
        return made

    def best(self, question: str, found: Sequence[Document], candidates: Sequence[Document],
             ranks: Sequence[int], reader: Sequence[float] | None = None) -> int | None:
        """The index of the candidate it scores highest (ties: the better-ranked), None when there is none. `reader`:
        the pointwise reader's score of each candidate, which a ranker that `reads` needs."""
        if not candidates:
            return None
        if self.reads and reader is None:
            raise ConfigError(f"searcher.reading.ranker {self.name} weighs the reader's score: pass the reader's scores")
        scores = self.scores(question, found, candidates, ranks, reader)
        return min(range(len(scores)), key=lambda i: (-scores[i], i))

    def scores(self, question: str, found: Sequence[Document], candidates: Sequence[Document],
               ranks: Sequence[int], reader: Sequence[float] | None = None) -> list[float]:
        """Each candidate's score (the ranker's log-odds), in order."""
        if self.reads and reader is None:
            raise ConfigError(f"searcher.reading.ranker {self.name} weighs the reader's score: pass the reader's scores")
        return [ranker_score(self.weights, r) for r in ranker_rows(question, found, candidates, ranks, reader)]

    def pick(self, question: str, found: Sequence[Document], candidates: Sequence[Document], ranks: Sequence[int],
             reader: Sequence[float] | None = None, *, pages: int = 1, min_score: float | None = None) -> list[int]:
        """The indices of the candidates to add, best first: at most `pages`, each scoring at least `min_score`."""
        if not candidates or pages < 1:
            return []
        scores = self.scores(question, found, candidates, ranks, reader)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:pages]
        return [i for i in order if min_score is None or scores[i] >= min_score]
