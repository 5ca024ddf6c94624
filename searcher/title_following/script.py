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
    turn 2   the reading searcher only (reading.py, searcher.kind = 'reading'): one more page of the question's own
             retrieval list, picked by a trained ranker over a small trained reader

It is the control every trained searcher is reported against (docs/transfer.md: +0.082 GenAcc over naive RAG top-3 on
hotpotqa_dev500 with the 1.5B generator, cap 5). Its limits: it needs TITLED documents (Wikipedia-style pages whose
title names their subject); on a corpus without titles no retrieved title can equal a span, so it would return D0,
naive RAG's top-k, unchanged: searcher/kinds.py refuses such an index (`check_titled`). It follows names, not descriptions: a
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
from searcher.base import LoopStats, SearcherBase, search_items
from searcher.config import SearcherConfig, TitleFollowingConfig
from searcher.spans import TitleIndex, title_like_spans
from searcher.titles import norm, title_variants

__all__ = [
    "TITLE_FOLLOWING",
    "VISIBLE_WORDS",
    "TitleFollowing",
    "TitleFollowingSearcher",
    "TitleFollowingStart",
    "check_titled",
    "corpus_titles",
    "follow_titles",
    "has_titles",
    "visible_segments",
    "visible_spans",
]

log = logging.getLogger(__name__)

TITLE_FOLLOWING = "title_following"  # searcher.kind
VISIBLE_WORDS: int = TitleFollowingConfig.model_fields["words"].default  # [searcher.title_following] words


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
    read: list[str] = field(default_factory=list)  # the pages the reading searcher's ranker added, last in `documents`
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


def has_titles(retriever: Any, sample: int = 512) -> bool | None:
    """Whether a local retriever's documents have titles, from `sample` documents spread over its store (a corpus
    titled at all is titled throughout: a corpus file gives every line the same shape); None for a retriever without a
    store of its own (remote): unknown."""
    store = getattr(retriever, "store", None)
    if store is None:
        return None
    n = len(store)
    step = max(n // sample, 1)
    return any(store.doc(row).title for row in range(0, n, step))


def _titled(titles: TitleIndex | None) -> bool:
    return titles is None or bool(titles.variants)


def check_titled(titles: TitleIndex | None, retriever: Any, kind: str) -> None:
    """A corpus without titles is refused by the scripts: they would return naive RAG's top-k unchanged."""
    if not _titled(titles):
        raise ConfigError(
            f"searcher.kind = {kind!r} needs titled documents, and none of the index's {len(retriever)} documents has "
            'a title: it would return naive RAG\'s top-k unchanged. Index a corpus with titles ({"id", "title", '
            '"text"} or "contents" = "Title"\\ntext), or use searcher.kind = "llm"')


class TitleFollowingSearcher(SearcherBase):
    """The title-following script as a searcher (searcher/base.py `Searcher`, kind 'title_following'):
    `search(questions, *, cfg=, cancelled=)` returns the LLM searcher's SearchResult records, so `s3 search`, `s3 serve`
    (/search), `s3 mcp` and `s3 eval` run it like any searcher.

    retriever: any batched retriever; cfg: the [searcher] section (k = documents per span query, the document cap =
    cfg.max_contexts, max_turns = 0 stops at D0, begin_with_search; [searcher.title_following] words); k0: the
    begin-with-search depth (naive RAG's k); titles: the index's title variants (`corpus_titles`; None = spans without
    it); words: words of each D0 document read after its title (default: cfg.title_following.words)."""

    kind = TITLE_FOLLOWING
    name = "title-following"
    policy = None  # no model: the services' batch-worker cap does not apply

    def __init__(self, retriever: _Search, cfg: SearcherConfig | None = None, k0: int = 3, *,
                 titles: TitleIndex | None = None, words: int | None = None) -> None:
        if k0 < 1:
            raise ConfigError(f"k0 (begin-with-search depth) must be >= 1, got {k0}; use the naive-RAG k (3)")
        self.retriever = retriever
        self.cfg = cfg if cfg is not None else SearcherConfig.model_validate({})
        words = self.cfg.title_following.words if words is None else words
        if words < 0:
            raise ConfigError(f"words must be >= 0, got {words}")
        self.k0 = k0
        self.titles = titles
        self.words = words
        self.last_stats = LoopStats()
        self._cap(self.cfg)

    @property
    def max_turns(self) -> int:
        """Its turns after D0: the span turn (and, for the reading searcher, the read as a second)."""
        return min(self.cfg.max_turns, 1)

    def _cap(self, cfg: SearcherConfig) -> int:
        cap = cfg.max_contexts
        if cfg.begin_with_search and cap < self.k0:
            raise ConfigError(f"the title-following searcher keeps naive RAG's top-{self.k0}, but the document cap "
                              f"(searcher.context_cap / max_select x max_turns) is {cap}: set searcher.context_cap >= "
                              f"{self.k0}")
        return cap

    def identity(self, relative_to: Path | None = None) -> dict[str, Any]:
        """A script: its identity is its settings, no model (searcher/base.py `Searcher.identity`)."""
        s = self.cfg
        out: dict[str, Any] = {"class": "TitleFollowingSearcher", "kind": TITLE_FOLLOWING, "k": s.k,
                               "max_turns": min(s.max_turns, 1), "context_cap": s.max_contexts}
        if self.words != VISIBLE_WORDS:  # only then: the script's earlier runs keep their identity
            out["words"] = self.words
        return out

    about = ("a script, no model: naive RAG's top-k0, then the pages titled exactly as a name it read in the question "
             "or those documents")
    request_fields = {"k": "documents retrieved per name searched (a page titled as the name is added from them)"}

    def describe(self, cfg: SearcherConfig | None = None) -> dict[str, Any]:
        """What it is, for /health, /search, MCP and `s3 search` (searcher/base.py `Searcher.describe`): the settings
        the script reads (its one span turn: max_turns is 0 or 1)."""
        s = self.cfg if cfg is None else cfg
        return {"kind": self.kind, "about": self.about, "model": None, "reader": None, "ranker": None,
                "settings": {"k0": self.k0, "k": s.k, "max_turns": min(s.max_turns, 1), "context_cap": s.max_contexts,
                             "begin_with_search": s.begin_with_search, "words": self.words},
                "request_fields": dict(self.request_fields)}

    def check_call(self, cfg: SearcherConfig) -> None:
        """Its document cap holds naive RAG's top-k0 (searcher/base.py `Searcher.check_call`)."""
        self._cap(cfg)

    def follow(self, questions: Sequence[str], *, cfg: SearcherConfig | None = None,
               skip: Sequence[bool] | None = None) -> tuple[list[TitleFollowing], list[float]]:
        """The script for a batch: per question its `TitleFollowing` (`skip[i]`: stop at D0), and the seconds of its
        steps, shared over the batch: D0's retrieval, the spans' retrieval, the read's retrieval and the read's reader
        (both 0 here: the reading searcher's). One batched retrieval call per step."""
        run = self.cfg if cfg is None else cfg
        cap = self._cap(run)
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
        stats.retrieval_seconds += t2 - t0
        n = max(len(questions), 1)
        return out, [(t1 - t0) / n, (t2 - t1) / max(len(asks), 1), 0.0, 0.0]

    def search(
        self, questions: Sequence[str | QAExample], *, cfg: SearcherConfig | None = None,
        cancelled: Sequence[Callable[[], bool]] | None = None,
    ) -> list[SearchResult]:
        """One SearchResult per question, in order: turn 0 = D0 (kept), turn 1 = the span searches and the pages they
        added (`queries`: every span searched; `selected_ids`: the pages added), and for the reading searcher a turn 2
        (the candidates read, the page added). `cancelled` (one callable per question, as the /search service passes
        its deadlines): a question whose callable says True before the span turn ends there with D0, `degraded`,
        error_code 'deadline_exceeded'."""
        items = search_items(questions, cancelled)
        run = self.cfg if cfg is None else cfg
        self.last_stats = LoopStats(questions=len(items), batch_sizes=[len(items)])
        t0 = time.perf_counter()
        gone = [bool(c()) for c in cancelled] if cancelled is not None else [False] * len(items)
        found, (d0_s, spans_s, read_s, reader_s) = self.follow([q for q, _ in items], cfg=run, skip=gone)
        seconds = time.perf_counter() - t0
        self.last_stats.seconds = seconds
        results = []
        for (question, qid), f, left in zip(items, found, gone, strict=True):
            d0 = f.documents[: len(f.documents) - len(f.added_by) - len(f.read)]
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
                                        selected_ids=list(f.read), retrieval_seconds=read_s,
                                        reader_seconds=reader_s))
            if not left:
                steps[-1] = steps[-1].model_copy(update={"search_complete": True})
            results.append(SearchResult(
                question_id=qid, question=question, documents=f.documents, steps=steps, seconds=seconds,
                error="cancelled: the request's deadline passed" if left else None,
                error_code="deadline_exceeded" if left else None))
        return results


class TitleFollowingStart:
    """searcher.start = 'title_following' (searcher/base.py `Start`): the script the LLM searcher begins from, its
    documents D0 (naive RAG's top-k0 plus the pages titled as a span, up to searcher.start_cap); a script is built once
    per (k, start_cap) a call asks for."""

    name = TITLE_FOLLOWING

    def __init__(self, retriever: Any, k0: int, titles: TitleIndex | None = None) -> None:
        self.retriever, self.k0, self.titles = retriever, k0, titles
        self._scripts: dict[tuple[int, int, int], TitleFollowingSearcher] = {}

    def documents(self, questions: list[str], cfg: SearcherConfig) -> list[list[Document]]:
        key = (cfg.k, cfg.start_cap, cfg.title_following.words)
        if key not in self._scripts:
            script_cfg = SearcherConfig(kind=TITLE_FOLLOWING, k=cfg.k, context_cap=cfg.start_cap, max_turns=1,
                                        title_following=cfg.title_following)
            self._scripts[key] = TitleFollowingSearcher(self.retriever, script_cfg, k0=self.k0, titles=self.titles)
        found, _ = self._scripts[key].follow(questions)
        return [list(f.documents) for f in found]
