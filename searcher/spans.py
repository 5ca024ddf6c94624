"""Title-like spans of a text: the phrases a searcher might query to reach another Wikipedia-style paragraph.

One definition for the scripted heuristic control (experiments/transfer_checks.py `heuristic_documents`: query every
span visible in the question and naive RAG's top documents) and the candidates teacher of the warm-up
(training/prep/oracle.py, teacher "candidates": the spans it lists beside the missing gold title). Pure text functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from searcher.titles import norm, title_variants

MAX_TITLE_WORDS = 10  # longest index title (in words) a span is matched against

# a capitalised word that opens a run but is not part of a title ("Which Kentucky county ...", "In 2002, ...")
_OPENERS = frozenset({
    "which", "what", "who", "whom", "whose", "when", "where", "why", "how", "is", "are", "was", "were", "did", "does",
    "do", "in", "on", "at", "for", "from", "by", "of", "and", "but", "if", "he", "she", "it", "they", "his", "her",
    "its", "this", "that", "these", "those", "as", "after", "before", "during", "with",
})
# lower-case words allowed inside a capitalised run ("Kiss and Tell", "Museum of Modern Art")
_CONNECTORS = frozenset({
    "of", "the", "and", "de", "la", "le", "du", "des", "del", "da", "von", "van", "in", "for", "on", "at", "a", "an", "to",
    "y",
})
_CLAUSE = re.compile(r"[,;:!?()\[\]{}\"“”]|\.(?:\s|$)|\s[-–—]\s")
_QUOTED = re.compile(r"\"([^\"]{2,100})\"|“([^”]{2,100})”")


@dataclass
class TitleIndex:
    """The normalised title variants of an index's documents, for spotting spans that name an index title."""

    variants: set[str] = field(default_factory=set)
    max_words: int = 1

    @classmethod
    def of(cls, titles: Iterable[str], max_words: int = MAX_TITLE_WORDS) -> TitleIndex:
        vs = {v for t in titles for v in title_variants(t) if len(v.split()) <= max_words}
        return cls(vs, max((len(v.split()) for v in vs), default=1))


def _clauses(text: str) -> list[tuple[int, str]]:
    """(offset, clause) pieces of `text` cut at punctuation that no title spans (commas, quotes, sentence ends)."""
    out, start = [], 0
    for m in _CLAUSE.finditer(text):
        out.append((start, text[start:m.start()]))
        start = m.end()
    out.append((start, text[start:]))
    return [(o, c) for o, c in out if c.strip()]


def _is_cap(token: str) -> bool:
    return token[:1].isupper()


def title_like_spans(text: str, titles: TitleIndex | None = None) -> list[str]:
    """Title-like spans of `text`, in order of appearance, each once (by `norm`):

    - quoted spans ("..." or “...”);
    - runs of two or more capitalised words, lower-case connectors allowed inside ("Kiss and Tell"), a leading
      question word or opener dropped ("Which Kentucky County" -> "Kentucky County"); a run with connectors also
      gives its connector-free pieces of two or more words ("Marco Da Silva in Los Angeles" -> "Marco Da Silva",
      "Los Angeles");
    - with `titles`: runs of words that start capitalised (or with a digit) and equal an index title variant
      (single words included: "Macintosh"), the longest first, left to right ("Kiss and Tell", not also "Kiss").

    >>> title_like_spans('Who was born first, Erika Jayne or the band "Lo Fidelity"?')
    ['Erika Jayne', 'Lo Fidelity']
    """
    found: list[tuple[int, str]] = []
    for m in _QUOTED.finditer(text):
        found.append((m.start(), (m.group(1) or m.group(2)).strip()))
    for off, clause in _clauses(text):
        toks = [(off + m.start(), m.group()) for m in re.finditer(r"\S+", clause)]
        words = [(p, re.sub(r"(?:'s|’s)$", "", w)) for p, w in toks]
        found.extend(_capital_runs(words))
        if titles is not None:
            found.extend(_title_ngrams(words, titles))
    out, seen = [], set()
    for _, span in sorted(found, key=lambda x: x[0]):
        key = norm(span)
        if key and key not in seen:
            seen.add(key)
            out.append(span)
    return out


def _capital_runs(words: list[tuple[int, str]]) -> list[tuple[int, str]]:
    runs: list[list[tuple[int, str]]] = []
    cur: list[tuple[int, str]] = []
    for p, w in [*words, (-1, "")]:
        if w and (_is_cap(w) or (cur and w.lower() in _CONNECTORS)):
            cur.append((p, w))
        else:
            while cur and not _is_cap(cur[-1][1]):
                cur.pop()  # trailing connectors
            while cur and cur[0][1].lower() in _OPENERS:
                cur.pop(0)
            if sum(_is_cap(x[1]) for x in cur) >= 2:
                runs.append(cur)
                pieces: list[list[tuple[int, str]]] = [[]]
                for x in cur:  # "Marco Da Silva in Los Angeles" -> also "Marco Da Silva", "Los Angeles"
                    if _is_cap(x[1]):
                        pieces[-1].append(x)
                    else:
                        pieces.append([])
                runs.extend(pc for pc in pieces if len(pc) >= 2 and len(pc) < len(cur))
            cur = []
    return [(r[0][0], " ".join(w for _, w in r)) for r in runs]


def _title_ngrams(words: list[tuple[int, str]], titles: TitleIndex) -> list[tuple[int, str]]:
    """Index titles named in `words`, longest match first, left to right ("Kiss and Tell" is one span, not "Kiss")."""
    out, i = [], 0
    while i < len(words):
        p, w = words[i]
        best = 0
        if _is_cap(w) or w[:1].isdigit():
            for n in range(min(titles.max_words, len(words) - i), 0, -1):
                key = norm(" ".join(x for _, x in words[i:i + n]))
                if key in titles.variants and key not in _OPENERS and key not in _CONNECTORS:
                    best = n
                    break
        if best:
            out.append((p, " ".join(x for _, x in words[i:i + best])))
        i += best or 1
    return out
