"""What the reading searcher chooses among, per question: the start's documents and the candidate pages.

    cands = Candidates.build(retriever, questions, k0=3, read_last=16)    # titled index: the script's start
    cands[0].start, cands[0].candidates, cands[0].ranks

Start: the title-following script on an index with titles (naive top-k0 plus the pages its visible titles find), naive
top-k0 where the index has none. Candidates: the question's own ranks k0+1..read_last that the start lacks, in rank
order (exactly what searcher/title_following/reading.py `read_further` reads at search time, so a reader trained here
meets the same pages when it runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from s3core.types import Document
from searcher.config import SearcherConfig

__all__ = ["Candidates"]


@dataclass
class Candidates:
    """One question's start documents and candidate pages (with each page's rank in the question's own list)."""

    question: str
    start: list[Document]
    candidates: list[Document]
    ranks: list[int]
    titled: bool
    gold: list[bool] = field(default_factory=list)  # per candidate, where the data labels gold paragraphs

    @staticmethod
    def build(retriever: Any, questions: Sequence[str], *, k0: int = 3, read_last: int = 16,
              titled: bool | None = None, cfg: SearcherConfig | None = None) -> list[Candidates]:
        """Every question's start and candidates: two or three batched retrieval calls for the batch. `titled` None =
        decided from the index (`has_titles`)."""
        from searcher.title_following.script import TitleFollowingSearcher, corpus_titles, has_titles

        qs = list(questions)
        if not qs:
            return []
        if titled is None:
            titled = bool(has_titles(retriever))
        if titled:
            script = TitleFollowingSearcher(retriever, cfg, k0=k0, titles=corpus_titles(retriever))
            found, _ = script.follow(qs)
            starts = [list(f.documents) for f in found]
        else:
            starts = [list(x) for x in retriever.search(qs, k0)]
        ranked = retriever.search(qs, read_last)
        out = []
        for q, start, r in zip(qs, starts, ranked, strict=True):
            have = {d.id for d in start}
            pairs = [(n, d) for n, d in enumerate(r, 1) if n > k0 and d.id not in have]
            out.append(Candidates(question=q, start=start, candidates=[d for _, d in pairs],
                                  ranks=[n for n, _ in pairs], titled=titled))
        return out
