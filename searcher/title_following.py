"""The title-following searcher: a script, no model. It reads what naive RAG shows, asks for every page it sees named,
and keeps the pages whose title is exactly that name.

    from searcher.title_following import TitleFollowingSearcher, corpus_titles
    searcher = TitleFollowingSearcher(retriever, cfg.searcher, k0=cfg.retriever.k, titles=corpus_titles(retriever))
    searcher.search_one("Which actress played Corliss Archer in Kiss and Tell?").documents

What it does for each question (one batched retrieval call per step for the whole batch):

    turn 0   D0 = the retriever's top-k0 of the question (naive RAG's documents; kept, in order: the script only adds)
    turn 1   every title-like span (searcher/spans.py `title_like_spans`) of what it can read (the question, then each
             D0 document's title and first `words` words; a span that is a D0 document's own title is skipped) is
             searched with k = searcher.k; a retrieved document whose title IS the span (`title_variants`: "Kiss and
             Tell" is also "Kiss and Tell (1945 film)") is added, in span order then rank order, until the document
             cap (searcher.context_cap, else max_select x max_turns) is reached
    turn 2   only with searcher.read_last: the question's own retrieval list at ranks k0+1..read_last, less what it
             has, is read by a trained ranker (searcher.ranker, searcher/links.py: the page's rank and whether a found
             document or the question names it; no model) and its one best page is added, beyond the cap; a ranker
             fitted with a trained pointwise reader's score (searcher.reader, searcher/reader.py) also reads each
             candidate with that small LM (about 0.1 s a page for the 135M on this CPU)

It is the control every trained searcher is reported against (docs/transfer.md: +0.082 GenAcc over naive RAG top-3 on
hotpotqa_dev500 with the 1.5B generator, cap 5). Its limits: it needs TITLED documents (Wikipedia-style pages whose
title names their subject); on a corpus without titles no retrieved title can equal a span, so it would return D0,
naive RAG's top-k, unchanged: `build_title_following` refuses such an index. It follows names, not descriptions: a
bridge entity that is never named in what it reads is out of its reach. It runs one span turn (max_turns = 0 stops
at D0). The returned records are the LLM searcher's (SearchResult, SearchStep), with no policy text and no tokens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from s3core.errors import ConfigError, S3Error
from s3core.types import Document, QAExample, SearchResult, SearchStep
from searcher.agent import START_SCRIPTS, LoopStats  # the services read the LLM searcher's accounting
from searcher.config import SearcherConfig
from searcher.links import LinkRanker
from searcher.reader import PointwiseReader
from searcher.retrieval.base import Retriever
from searcher.spans import TitleIndex, title_like_spans
from searcher.titles import norm, title_variants

__all__ = [
    "TITLE_FOLLOWING", "VISIBLE_WORDS", "TitleFollowing", "TitleFollowingSearcher", "build_title_following",
    "corpus_titles", "follow_titles", "visible_segments", "visible_spans",
]

log = logging.getLogger(__name__)

TITLE_FOLLOWING = "title_following"  # searcher.kind
VISIBLE_WORDS = 70  # words of each D0 document (after its title) the script reads: ~ an LLM searcher's 96-token view


class _Search(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Document]]: ...


SearchFn = Callable[[list[str], int], list[list[Document]]]


@dataclass
class TitleFollowing:
    """One question's documents (D0, then the added pages), the spans it searched, and which span added which page."""

    documents: list[Document]
    queries: list[str] = field(default_factory=list)
    added_by: dict[str, str] = field(default_factory=dict)  # added document id -> the span whose search found it
    retrieved: list[str] = field(default_factory=list)  # every id the span searches returned, first seen first
    read: str | None = None  # the page the ranker added after the spans (searcher.read_last), last in `documents`
    read_from: list[str] = field(default_factory=list)  # the candidates it chose among, best bm25 rank first


# ------------------------------------------------------------------------------------------------ the script, pure


def visible_segments(question: str, top: Sequence[Document], words: int = VISIBLE_WORDS) -> list[str]:
    """What the script reads, as raw text: the question, then each top document's title and its first `words` words.

    >>> visible_segments("Who?", [Document(id="a", title="Veldor", text="one two three")], words=2)
    ['Who?', 'Veldor. one two']
    """
    return [question, *(f"{d.title}. {' '.join(d.text.split()[:words])}" for d in top)]


def visible_spans(question: str, top: Sequence[Document], titles: TitleIndex | None = None,
                  words: int = VISIBLE_WORDS) -> list[str]:
    """The spans the script searches: every title-like span of `visible_segments`, in reading order, each once (by
    `norm`), none that is a top document's own title.

    >>> top = [Document(id="k", title="Kiss and Tell (1945 film)", text="It stars Shirley Temple as Corliss Archer.")]
    >>> visible_spans("Who starred in Kiss and Tell?", top)
    ['Shirley Temple', 'Corliss Archer']
    """
    own = {v for d in top for v in title_variants(d.title)}
    spans: list[str] = []
    seen: set[str] = set()
    for seg in visible_segments(question, top, words):
        for s in title_like_spans(seg, titles):
            key = norm(s)
            if key not in seen and key not in own:
                seen.add(key)
                spans.append(s)
    return spans


def admit_titled(top: Sequence[Document], spans: Sequence[str], hits: Sequence[Sequence[Document]],
                 cap: int) -> TitleFollowing:
    """`top`, then each span's retrieved documents whose title equals the span, in span order then rank order, each
    once, until `cap` documents.

    >>> d = lambda i, t: Document(id=i, title=t, text="")
    >>> r = admit_titled([d("a", "A")], ["Bo", "Cy"], [[d("x", "Box"), d("b", "Bo (band)")], [d("c", "Cy")]], cap=2)
    >>> [x.id for x in r.documents], r.added_by
    (['a', 'b'], {'b': 'Bo'})
    """
    if len(spans) != len(hits):
        raise S3Error(f"{len(hits)} result lists for {len(spans)} spans")
    docs, added_by = list(top), {}
    have = {x.id for x in docs}
    for span, found in zip(spans, hits, strict=True):
        key = norm(span)
        for x in found:
            if len(docs) >= cap:
                break
            if x.id not in have and key in title_variants(x.title):
                docs.append(x)
                have.add(x.id)
                added_by[x.id] = span
    retrieved = list(dict.fromkeys(x.id for found in hits for x in found))
    return TitleFollowing(docs, list(spans), added_by, retrieved)


def follow_titles(
    question: str, top: Sequence[Document], search: SearchFn, titles: TitleIndex | None = None, *,
    cap: int, k: int, words: int = VISIBLE_WORDS,
) -> TitleFollowing:
    """One question's title-following from its `top` documents: `visible_spans`, searched with `search(spans, k)`
    (a retriever's batched search) when there is room under `cap`, then `admit_titled`."""
    if cap < len(top):
        raise ConfigError(f"the document cap {cap} is below the {len(top)} documents it starts from")
    spans = visible_spans(question, top, titles, words)
    if not spans or len(top) >= cap:
        return TitleFollowing(list(top), spans)
    return admit_titled(top, spans, search(spans, k), cap)


# ------------------------------------------------------------------------------------------------ the searcher


def corpus_titles(retriever: Any) -> TitleIndex | None:
    """The title index of a local retriever's documents (its doc store, read once: a pass over the corpus), None for
    one that has no store of its own (remote): spans are then found without it (single-word titles are missed)."""
    store = getattr(retriever, "store", None)
    if store is None:
        return None
    return TitleIndex.of(d.title for d in store)


def _titled(titles: TitleIndex | None) -> bool:
    return titles is None or bool(titles.variants)


class TitleFollowingSearcher:
    """The title-following script as a searcher: `search(questions, *, cfg=, cancelled=)` returns the LLM searcher's
    SearchResult records, so `s3 search`, `s3 serve` (/search), `s3 mcp` and `s3 eval` run it like any searcher.

    retriever: any batched retriever; cfg: the [searcher] section (k = documents per span query, the document cap =
    cfg.max_contexts, max_turns = 0 stops at D0, begin_with_search); k0: the begin-with-search depth (naive RAG's k);
    titles: the index's title variants (`corpus_titles`; None = spans without it); words: words of each D0 document
    read after its title."""

    name = "title-following"
    policy = None  # no model: the services' batch-worker cap does not apply

    def __init__(self, retriever: _Search, cfg: SearcherConfig | None = None, k0: int = 3, *,
                 titles: TitleIndex | None = None, words: int = VISIBLE_WORDS) -> None:
        if k0 < 1:
            raise ConfigError(f"k0 (begin-with-search depth) must be >= 1, got {k0}; use the naive-RAG k (3)")
        if words < 0:
            raise ConfigError(f"words must be >= 0, got {words}")
        self.retriever = retriever
        self.cfg = cfg if cfg is not None else SearcherConfig.model_validate({})
        self.k0 = k0
        self.titles = titles
        self.words = words
        self.last_stats = LoopStats()
        self._rankers: dict[tuple[str, str | None], LinkRanker] = {}
        self._readers: dict[str, PointwiseReader] = {}
        self._warned: set[tuple[str, str | None, int, int]] = set()  # (ranker, reader, first, last) warned of
        self._cap(self.cfg)
        self._reader(self.cfg, self._ranker(self.cfg))  # a ranker or reader that cannot load fails here, before the
        # first question

    @property
    def max_turns(self) -> int:
        """Its turns after D0: the span turn, and the read (searcher.read_last) as a second."""
        spans = min(self.cfg.max_turns, 1)
        return spans + bool(spans and self.cfg.read_last)

    @property
    def k(self) -> int:
        return self.cfg.k

    @property
    def max_contexts(self) -> int:
        return self.cfg.max_contexts

    def _cap(self, cfg: SearcherConfig) -> int:
        cap = cfg.max_contexts
        if cfg.begin_with_search and cap < self.k0:
            raise ConfigError(f"the title-following searcher keeps naive RAG's top-{self.k0}, but the document cap "
                              f"(searcher.context_cap / max_select x max_turns) is {cap}: set searcher.context_cap >= "
                              f"{self.k0}")
        return cap

    def _ranker(self, cfg: SearcherConfig) -> LinkRanker | None:
        """searcher.read_last's ranker (loaded once a name), None when the script reads no further."""
        if not cfg.read_last:
            return None
        if cfg.read_last <= self.k0:
            raise ConfigError(f"searcher.read_last = {cfg.read_last} reads nothing past naive RAG's top-{self.k0}: set it "
                              f"above {self.k0} (16 in docs/transfer.md) or to 0")
        key = (cfg.ranker, cfg.reader)
        if key not in self._rankers:
            ranker = LinkRanker.load(cfg.ranker, reader=cfg.reader)
            if ranker.reader and cfg.reader and Path(cfg.reader).name != ranker.reader:
                log.warning("searcher.ranker %s was fitted on the scores of reader %s; searcher.reader is %s: its "
                            "weights may not carry", ranker.name, ranker.reader, cfg.reader)
            self._rankers[key] = ranker
        ranker = self._rankers[key]
        span = (self.k0 + 1, cfg.read_last)  # once for each span read (a request may set its own read_last)
        if ranker.ranks is not None and ranker.ranks != span and (*key, *span) not in self._warned:
            log.warning("searcher.ranker %s was fitted on ranks %d-%d of the question's list; it reads ranks %d-%d "
                        "here (searcher.read_last, retriever.k): its weights may not carry", ranker.name, *ranker.ranks,
                        *span)
            self._warned.add((*key, *span))
        return ranker

    def _reader(self, cfg: SearcherConfig, ranker: LinkRanker | None) -> PointwiseReader | None:
        """searcher.reader, else the reader the ranker names where it ships (`shipped_reader`), loaded once a place,
        for a `ranker` that reads; None otherwise. A reader set where nothing reads (searcher.read_last = 0) is
        refused: it would be loaded and never read."""
        if cfg.reader and ranker is None:
            raise ConfigError(f"searcher.reader = {cfg.reader!r} reads the pages searcher.read_last adds, and "
                              "read_last is 0: set searcher.read_last (16 in docs/transfer.md) or unset the reader")
        spec = ranker.reader_for(cfg.reader) if ranker is not None else None
        if spec is None:
            return None
        key = str(Path(spec).resolve()) if Path(spec).exists() else spec
        if key not in self._readers:
            self._readers[key] = PointwiseReader.load(spec)
        return self._readers[key]

    def search_one(self, question: str | QAExample) -> SearchResult:
        return self.search([question])[0]

    def follow(self, questions: Sequence[str], *, cfg: SearcherConfig | None = None,
               skip: Sequence[bool] | None = None) -> tuple[list[TitleFollowing], list[float]]:
        """The script for a batch: per question its `TitleFollowing` (`skip[i]`: stop at D0), and the retrieval seconds
        of its steps (D0, the spans, the read: `read_further`), shared over the batch. One batched retrieval call per
        step."""
        run = self.cfg if cfg is None else cfg
        cap = self._cap(run)
        ranker = self._ranker(run)
        stats = self.last_stats
        t0 = time.perf_counter()
        tops: list[list[Document]] = [[] for _ in questions]
        if run.begin_with_search and questions:
            tops = [list(x) for x in self.retriever.search(list(questions), self.k0)]
            stats.retrieval_calls += 1
            if len(tops) != len(questions):
                raise S3Error(f"retriever returned {len(tops)} result lists for {len(questions)} queries")
        t1 = time.perf_counter()
        out = [TitleFollowing(list(top)) for top in tops]
        asks: list[tuple[int, list[str]]] = []
        for i, (q, top) in enumerate(zip(questions, tops, strict=True)):
            if run.max_turns < 1 or (skip is not None and skip[i]):
                continue
            spans = visible_spans(q, top, self.titles, self.words)
            out[i].queries = spans
            if spans and len(top) < cap:
                asks.append((i, spans))
        if asks:
            flat = [s for _, spans in asks for s in spans]
            hits = self.retriever.search(flat, run.k)
            stats.retrieval_calls += 1
            if len(hits) != len(flat):
                raise S3Error(f"retriever returned {len(hits)} result lists for {len(flat)} queries")
            at = 0
            for i, spans in asks:
                out[i] = admit_titled(tops[i], spans, hits[at:at + len(spans)], cap)
                at += len(spans)
        t2 = time.perf_counter()
        reads = [i for i in range(len(questions)) if ranker is not None and run.begin_with_search
                 and run.max_turns >= 1 and not (skip is not None and skip[i])]
        if reads and ranker is not None:
            self.read_further([questions[i] for i in reads], [out[i] for i in reads], ranker, run.read_last, stats,
                              self._reader(run, ranker))
        t3 = time.perf_counter()
        n = max(len(questions), 1)
        return out, [(t1 - t0) / n, (t2 - t1) / max(len(asks), 1), (t3 - t2) / max(len(reads), 1)]

    def read_further(self, questions: Sequence[str], found: Sequence[TitleFollowing], ranker: LinkRanker,
                     last: int, stats: LoopStats, reader: PointwiseReader | None = None) -> None:
        """searcher.read_last: per question, the pages of its own retrieval list at ranks k0+1..`last` that `found`
        lacks; the one `ranker` scores highest (with `reader`'s score of each, for a ranker that reads) is added to
        `found` (in place; `read`, `read_from`). One batched retrieval call."""
        ranked = self.retriever.search(list(questions), last)
        stats.retrieval_calls += 1
        if len(ranked) != len(questions):
            raise S3Error(f"retriever returned {len(ranked)} result lists for {len(questions)} queries")
        for q, f, r in zip(questions, found, ranked, strict=True):
            have = {d.id for d in f.documents}
            rank = {d.id: n for n, d in enumerate(r, 1)}
            cands = [d for d in r[self.k0:last] if d.id not in have]
            f.read_from = [d.id for d in cands]
            scores = reader.scores(q, cands) if reader is not None and cands else None
            best = ranker.best(q, f.documents, cands, [rank[d.id] for d in cands], scores)
            if best is not None:
                f.read = cands[best].id
                f.documents.append(cands[best])

    def search(
        self, questions: Sequence[str | QAExample], *, cfg: SearcherConfig | None = None,
        cancelled: Sequence[Callable[[], bool]] | None = None,
    ) -> list[SearchResult]:
        """One SearchResult per question, in order: turn 0 = D0 (kept), turn 1 = the span searches and the pages they
        added (`queries`: every span searched; `selected_ids`: the pages added). `cancelled` (one callable per
        question, as the /search service passes its deadlines): a question whose callable says True before the span
        turn ends there with D0, `degraded`, error_code 'deadline_exceeded'."""
        if cancelled is not None and len(cancelled) != len(questions):
            raise S3Error(f"cancelled has {len(cancelled)} entries for {len(questions)} questions")
        items: list[tuple[str, str | None]] = []
        for i, q in enumerate(questions):
            text, qid = (q.question, q.id) if isinstance(q, QAExample) else (q, None)
            if not isinstance(text, str) or not text.strip():
                raise S3Error(f"question {i} is empty: every question needs some text")
            items.append((text.strip(), qid))
        run = self.cfg if cfg is None else cfg
        self.last_stats = LoopStats(questions=len(items), batch_sizes=[len(items)])
        t0 = time.perf_counter()
        gone = [bool(c()) for c in cancelled] if cancelled is not None else [False] * len(items)
        found, (d0_s, spans_s, read_s) = self.follow([q for q, _ in items], cfg=run, skip=gone)
        seconds = time.perf_counter() - t0
        self.last_stats.seconds = seconds
        self.last_stats.retrieval_seconds = seconds
        results = []
        for (question, qid), f, left in zip(items, found, gone, strict=True):
            d0 = f.documents[: len(f.documents) - len(f.added_by) - (f.read is not None)]
            searched = bool(f.queries) and len(d0) < run.max_contexts and not left
            steps = [SearchStep(turn=0, query=question if run.begin_with_search else None,
                                retrieved_ids=[d.id for d in d0], selected_ids=[d.id for d in d0],
                                retrieval_seconds=d0_s,
                                invalid_reason="cancelled: the request's deadline passed" if left else None)]
            if searched:
                steps.append(SearchStep(
                    turn=1, query=f.queries[0], queries=list(f.queries) if len(f.queries) > 1 else None,
                    retrieved_ids=list(f.retrieved), selected_ids=list(f.added_by), retrieval_seconds=spans_s))
            if f.read_from:  # the question's own list read further: its candidates, the ranker's pick
                steps.append(SearchStep(turn=len(steps), query=question, retrieved_ids=list(f.read_from),
                                        selected_ids=[f.read] if f.read else [], retrieval_seconds=read_s))
            if not left:
                steps[-1] = steps[-1].model_copy(update={"search_complete": True})
            results.append(SearchResult(
                question_id=qid, question=question, documents=f.documents, steps=steps, seconds=seconds,
                error="cancelled: the request's deadline passed" if left else None,
                error_code="deadline_exceeded" if left else None))
        return results


def build_title_following(cfg: SearcherConfig, retriever: Retriever, *, k0: int) -> TitleFollowingSearcher:
    """The title-following searcher over `retriever` (searcher.kind = "title_following"), its title index read from the
    retriever's documents. A corpus without titles is refused: the script would return naive RAG's top-k unchanged."""
    if cfg.policy_path:
        raise ConfigError(f"searcher.kind = 'title_following' runs no model: unset searcher.policy_path / --policy "
                          f"({cfg.policy_path!r}), or use searcher.kind = 'llm' for a trained searcher")
    titles = corpus_titles(retriever)
    if not _titled(titles):
        raise ConfigError(
            f"searcher.kind = 'title_following' needs titled documents, and none of the index's {len(retriever)} "
            "documents has a title: it would return naive RAG's top-k unchanged. Index a corpus with titles "
            '({"id", "title", "text"} or "contents" = "Title"\\ntext), or use searcher.kind = "llm"')
    return TitleFollowingSearcher(retriever, cfg, k0=k0, titles=titles)


def start_script(retriever: Any, cfg: SearcherConfig, k0: int) -> TitleFollowingSearcher:
    """searcher.start = 'title_following': the script the s3 loop begins from (its documents are D0)."""
    script_cfg = SearcherConfig(kind="title_following", k=cfg.k, context_cap=cfg.start_cap, max_turns=1)
    return TitleFollowingSearcher(retriever, script_cfg, k0=k0, titles=corpus_titles(retriever))


START_SCRIPTS["title_following"] = start_script
