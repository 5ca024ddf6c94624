"""Titles as a searcher reads them: `norm` (ASCII, lower case, punctuation to spaces) and `title_variants` (whole, and
without a trailing parenthetical). One definition for the loop's title-first windows of several queries
(searcher/agent.py `interleave`), the copyable teachers (training/prep/oracle.py) and the transfer checks.
"""

from __future__ import annotations

import re
import unicodedata

_PAREN_TAIL = re.compile(r"\s*\([^()]*\)\s*$")


def norm(text: str) -> str:
    """ASCII, lower case, every run of non-alphanumerics one space.

    >>> norm("Pirate's Cove (board game)!")
    'pirate s cove board game'
    """
    spaced = "".join(" " if unicodedata.category(c)[0] in "PSZ" else c for c in unicodedata.normalize("NFKD", text))
    ascii_ = spaced.encode("ascii", "ignore").decode("ascii")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", ascii_.lower()).split())


def _title_forms(title: str) -> list[str]:
    """A title as written, then without a trailing parenthetical (when that differs and is not empty)."""
    short = _PAREN_TAIL.sub("", title).strip()
    return [title.strip()] + ([short] if short and short != title.strip() else [])


def title_variants(title: str) -> set[str]:
    """The normalised forms a title is recognised by: whole, and without a trailing parenthetical.

    >>> sorted(title_variants("Kiss and Tell (1945 film)"))
    ['kiss and tell', 'kiss and tell 1945 film']
    """
    return {v for v in (norm(f) for f in _title_forms(title)) if v}


def contains_phrase(haystack: str, phrase: str) -> bool:
    """Whether normalised `phrase` occurs in normalised `haystack` on word boundaries.

    >>> contains_phrase("the kiss and tell show", "kiss and tell"), contains_phrase("kissandtell", "kiss")
    (True, False)
    """
    return bool(phrase) and f" {phrase} " in f" {haystack} "
