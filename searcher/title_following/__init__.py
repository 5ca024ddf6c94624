"""The title-following searchers: scripts that follow the names they read, and the reading searcher built on them.

    script.py    TitleFollowingSearcher (searcher.kind = 'title_following'): naive RAG's top-k, then the pages titled
                 as a title-like span it read; no model. TitleFollowingStart: the same script as the LLM searcher's
                 start (searcher.start = 'title_following').
    reading.py   ReadingSearcher (searcher.kind = 'reading'): the script, then one page of the question's own ranks
                 k0+1..read_last, picked by a Ranker over a Reader's scores. The best searcher on a titled corpus.
    base.py      the Ranker and Reader protocols the reading searcher reads with.
    links.py     LinkRanker: the shipped logistic rankers (searcher/policies/links-*.json).
    reader.py    PointwiseReader: a small causal LM read as a cross-encoder (searcher/policies/reader-*/).

Fitting a ranker or training a reader is training's work, not the searcher's.
"""

from searcher.title_following.reading import READING, ReadingSearcher
from searcher.title_following.script import (
    TITLE_FOLLOWING,
    VISIBLE_WORDS,
    TitleFollowing,
    TitleFollowingSearcher,
    TitleFollowingStart,
    admit_titled,
    check_titled,
    corpus_titles,
    follow_titles,
    has_titles,
    visible_segments,
    visible_spans,
)

__all__ = [
    "READING", "TITLE_FOLLOWING", "VISIBLE_WORDS", "ReadingSearcher", "TitleFollowing", "TitleFollowingSearcher",
    "TitleFollowingStart", "admit_titled", "check_titled", "corpus_titles", "follow_titles", "has_titles", "visible_segments",
    "visible_spans",
]
