"""The reading searcher (searcher.kind = 'reading'): the title-following script, then one more page of the question's
own retrieval list, read by a small trained reader and picked by a trained ranker. The best searcher measured on a
titled corpus (hotpotqa_dev500 with the 1.5B generator: 0.462 GenAcc, +0.030 [+0.006, +0.054] over the script,
docs/transfer.md "The reader ships").

    searcher = ReadingSearcher(retriever, cfg.searcher, k0=3, titles=corpus_titles(retriever))
    searcher.search_one("Which actress played Corliss Archer in Kiss and Tell?").documents  # the script's, + one page

What it adds to the script, per question (one batched retrieval call and one batched reader pass for the batch):

    turn 2   the question's own retrieval list at ranks k0+1..read_last ([searcher.reading] read_last), less what the
             script found, is scored by the ranker ([searcher.reading] ranker, a `Ranker`: links.py's LinkRanker, a
             logistic regression over the page's rank, the names that link it to what was found and, for a ranker that
             reads, the `Reader`'s score of each page: reader.py's PointwiseReader, a 135M LoRA cross-encoder); its
             one best page is added, beyond the document cap
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError, S3Error
from s3core.types import Document
from searcher.base import LoopStats
from searcher.config import SearcherConfig
from searcher.identity import local_path
from searcher.spans import TitleIndex
from searcher.title_following.base import Ranker, Reader
from searcher.title_following.links import LinkRanker
from searcher.title_following.reader import PointwiseReader, reader_identity
from searcher.title_following.script import (
    TitleFollowing,
    TitleFollowingSearcher,
    _Search,
    _titled,
    check_titled,
)

__all__ = ["READING", "ReadingSearcher"]

log = logging.getLogger(__name__)

READING = "reading"  # searcher.kind


class ReadingSearcher(TitleFollowingSearcher):
    """The title-following script plus one page read further (searcher/base.py `Searcher`, kind 'reading'). Its
    ranker and reader load when it is built (a broken one fails here, before the first question), once a name; a
    request may set its own read_last (the /search service passes per-call settings)."""

    kind = READING
    name = "reading"

    def __init__(self, retriever: _Search, cfg: SearcherConfig | None = None, k0: int = 3, *,
                 titles: TitleIndex | None = None, words: int | None = None) -> None:
        super().__init__(retriever, cfg, k0, titles=titles, words=words)
        self._rankers: dict[tuple[str, str | None], LinkRanker] = {}
        self._readers: dict[str, PointwiseReader] = {}
        self._warned: set[tuple[str, str | None, int, int]] = set()  # (ranker, reader, first, last) warned of
        self._reader(self.cfg, self._ranker(self.cfg))

    @property
    def max_turns(self) -> int:
        """Its turns after D0: the span turn, and the read as a second."""
        spans = min(self.cfg.max_turns, 1)
        return spans + spans

    def start(self, cfg: SearcherConfig) -> str:
        """What it adds to ([searcher.reading] start): 'title_following' (the script) or 'top_k' (naive RAG's top-k0);
        'auto' = the script where the index has titles, top-k0 where it has none."""
        start = cfg.reading.start
        if start == "auto":
            return "title_following" if _titled(self.titles) else "top_k"
        if start == "title_following":
            check_titled(self.titles, self.retriever, f"{READING} (searcher.reading.start = 'title_following')")
        return start

    def _ranker(self, cfg: SearcherConfig) -> LinkRanker:
        """[searcher.reading] ranker (loaded once a name, with the reader it reads with)."""
        r = cfg.reading
        if r.read_last <= self.k0:
            raise ConfigError(f"searcher.reading.read_last = {r.read_last} reads nothing past naive RAG's top-{self.k0}: "
                              f"set it above {self.k0} (16 in docs/transfer.md), or use searcher.kind = "
                              "'title_following' for the script alone")
        key = (r.ranker, r.reader)
        if key not in self._rankers:
            ranker = LinkRanker.load(r.ranker, reader=r.reader)
            if ranker.reader and r.reader and Path(r.reader).name != ranker.reader:
                log.warning("searcher.reading.ranker %s was fitted on the scores of reader %s; searcher.reading.reader "
                            "is %s: its weights may not carry", ranker.name, ranker.reader, r.reader)
            self._rankers[key] = ranker
        ranker = self._rankers[key]
        span = (self.k0 + 1, r.read_last)  # once for each span read (a request may set its own read_last)
        if ranker.ranks is not None and ranker.ranks != span and (*key, *span) not in self._warned:
            log.warning("searcher.reading.ranker %s was fitted on ranks %d-%d of the question's list; it reads ranks "
                        "%d-%d here (searcher.reading.read_last, retriever.k): its weights may not carry", ranker.name,
                        *ranker.ranks, *span)
            self._warned.add((*key, *span))
        return ranker

    def _reader(self, cfg: SearcherConfig, ranker: LinkRanker) -> PointwiseReader | None:
        """[searcher.reading] reader, else the reader the ranker names where it ships (`shipped_reader`), loaded once a
        place, for a ranker that reads; None for one that does not."""
        spec = ranker.reader_for(cfg.reading.reader)
        if spec is None:
            return None
        key = (str(Path(spec).resolve()) if Path(spec).exists() else spec) + f"@{cfg.reading.dtype}"
        if key not in self._readers:
            self._readers[key] = PointwiseReader.load(spec, threads=cfg.reading.threads, dtype=cfg.reading.dtype)
        return self._readers[key]

    def identity(self, relative_to: Path | None = None) -> dict[str, Any]:
        """The script's identity, plus what it read with: read_last, the ranker and its weights, and (for a ranker
        that reads) where the reader was loaded from, its prompt and its weights' hash (its base's with it)."""
        s = self.cfg
        out = super().identity(relative_to) | {"kind": READING}
        ranker = self._ranker(s)
        out |= {"read_last": s.reading.read_last, "ranker": s.reading.ranker, "ranker_weights": ranker.weights}
        reader = ranker.reader_for(s.reading.reader)
        if reader:
            out |= {"reader": local_path(reader, relative_to),
                    **{f"reader_{k}": v for k, v in reader_identity(reader).items()}}
            if s.reading.dtype != "float32":  # only then: the float32 runs keep their identity
                out["reader_dtype"] = s.reading.dtype
            import torch
            import transformers

            if s.reading.reader:  # a reader of its own (a trained one): the runtime that read with it too
                out["reader_runtime"] = f"transformers {transformers.__version__}, torch {torch.__version__}"
        # the settings a trained reading searcher chose, where they differ from the shipped one's (whose runs keep their
        # identity): its start, how many pages it adds and the score below which it adds none
        if self.start(s) != "title_following":
            out["start"] = self.start(s)
        if s.reading.pages != 1:
            out["pages"] = s.reading.pages
        if s.reading.min_score is not None:
            out["min_score"] = s.reading.min_score
        return out

    about = ("the title-following script (naive top-k on an untitled index), then up to `pages` more pages of the "
             "question's own ranks k0+1..read_last: the ones a trained ranker scores highest over a small trained "
             "reader's score of each")

    def describe(self, cfg: SearcherConfig | None = None) -> dict[str, Any]:
        """The script's description, with what it reads with: the ranker, the reader (its model) and read_last; its
        turns are the span turn and the read."""
        s = self.cfg if cfg is None else cfg
        ranker = self._ranker(s)
        reader = ranker.reader_for(s.reading.reader)
        name = Path(reader).name if reader else None
        out = super().describe(s)
        out["settings"] |= {"max_turns": 2 * min(s.max_turns, 1), "read_last": s.reading.read_last,
                            "start": self.start(s), "pages": s.reading.pages, "min_score": s.reading.min_score,
                            **({"reader_dtype": s.reading.dtype} if reader else {})}
        return out | {"kind": READING, "model": name, "ranker": ranker.name, "reader": name}

    def check_call(self, cfg: SearcherConfig) -> None:
        """The script's rule, and a read_last that reads past the top-k0 (searcher/base.py `Searcher.check_call`)."""
        super().check_call(cfg)
        self._ranker(cfg)

    def follow(self, questions: Sequence[str], *, cfg: SearcherConfig | None = None,
               skip: Sequence[bool] | None = None) -> tuple[list[TitleFollowing], list[float]]:
        """The script for a batch (`TitleFollowingSearcher.follow`), then the read (`read_further`) for every question
        the script searched for."""
        run = self.cfg if cfg is None else cfg
        ranker = self._ranker(run)
        top_k = self.start(run) == "top_k"  # naive top-k is the start: the span turn is not taken
        out, (d0_s, spans_s, _, _) = super().follow(questions, cfg=run,
                                                    skip=[True] * len(questions) if top_k else skip)
        stats = self.last_stats
        retrieval_s, reader_s = stats.retrieval_seconds, stats.reader_seconds
        reads = [i for i in range(len(questions)) if run.begin_with_search and run.max_turns >= 1
                 and not (skip is not None and skip[i])]
        if reads:
            self.read_further([questions[i] for i in reads], [out[i] for i in reads], ranker, run.reading.read_last,
                              stats, self._reader(run, ranker), pages=run.reading.pages,
                              min_score=run.reading.min_score)
        n = max(len(reads), 1)  # the read's seconds, each model's own: its retrieval call's, the reader's passes
        return out, [d0_s, spans_s, (stats.retrieval_seconds - retrieval_s) / n, (stats.reader_seconds - reader_s) / n]

    def read_further(self, questions: Sequence[str], found: Sequence[TitleFollowing], ranker: Ranker,
                     last: int, stats: LoopStats, reader: Reader | None = None, *, pages: int = 1,
                     min_score: float | None = None) -> None:
        """Per question, the pages of its own retrieval list at ranks k0+1..`last` that `found` lacks; the `pages`
        `ranker` scores highest (with `reader`'s score of each, for a ranker that reads), each scoring at least
        `min_score`, are added to `found` (in place; `read`, `read_from`). One batched retrieval call; the reader reads
        each question's candidates in batched passes."""
        t0 = time.perf_counter()
        ranked = self.retriever.search(list(questions), last)
        stats.retrieval_calls += 1
        stats.retrieval_seconds += time.perf_counter() - t0
        if len(ranked) != len(questions):
            raise S3Error(f"retriever returned {len(ranked)} result lists for {len(questions)} queries")
        cands: list[list[Document]] = []
        for f, r in zip(found, ranked, strict=True):
            have = {d.id for d in f.documents}
            cands.append([d for d in r[self.k0:last] if d.id not in have])
            f.read_from = [d.id for d in cands[-1]]
        scores: list[list[float]] | None = None
        if reader is not None:
            t1 = time.perf_counter()
            scores = [reader.scores(q, c) if c else [] for q, c in zip(questions, cands, strict=True)]
            stats.reader_seconds += time.perf_counter() - t1
            stats.reader_calls += 1
        for i, (q, f, r) in enumerate(zip(questions, found, ranked, strict=True)):
            rank = {d.id: n for n, d in enumerate(r, 1)}
            picks = ranker.pick(q, f.documents, cands[i], [rank[d.id] for d in cands[i]],
                                scores[i] if scores is not None and cands[i] else None, pages=pages,
                                min_score=min_score)
            for j in picks:
                f.read.append(cands[i][j].id)
            f.documents.extend(cands[i][j] for j in picks)
