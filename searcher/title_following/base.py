"""What the reading searcher reads with: a `Reader` scores each candidate page for the question, a `Ranker` picks
the one page to add. links.py's LinkRanker and reader.py's PointwiseReader are the shipped implementations; a new
ranker or reader is a class with these methods, named in [searcher.reading]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from s3core.types import Document

__all__ = ["Ranker", "Reader"]


class Reader(Protocol):
    """Scores (question, page) pairs: higher = more likely to help answer the question."""

    @property
    def name(self) -> str: ...

    def scores(self, question: str, docs: Sequence[Document]) -> list[float]: ...


class Ranker(Protocol):
    """Picks the page to add among a question's candidates (the index into `candidates`, None for none)."""

    @property
    def name(self) -> str: ...

    @property
    def weights(self) -> dict[str, float]: ...

    def best(self, question: str, found: Sequence[Document], candidates: Sequence[Document],
             ranks: Sequence[int], reader: Sequence[float] | None = None) -> int | None: ...

    def pick(self, question: str, found: Sequence[Document], candidates: Sequence[Document], ranks: Sequence[int],
             reader: Sequence[float] | None = None, *, pages: int = 1, min_score: float | None = None) -> list[int]:
        """The candidates to add, best first: at most `pages`, each scoring at least `min_score`."""
        ...
