"""BM25 with Lucene through pyserini (Anserini): local indexes built from our corpus, or a prebuilt index.

A local index keeps our doc store beside the Lucene index, so `get(ids)` and returned documents are the same as
with the other backends. A prebuilt index (`retriever.lucene.prebuilt_index`, e.g. `wikipedia-dpr-100w`) is
downloaded by pyserini on first use (on machines with network) and its stored raw documents are used instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from s3core.errors import IndexDirError, RetrievalError
from s3core.types import Document
from searcher.config import LuceneConfig
from searcher.retrieval.base import IndexedRetriever, check_k, check_queries
from searcher.retrieval.lucene_env import import_pyserini_lucene
from searcher.retrieval.store import DocStore, IndexManifest

SUBDIR = "lucene"


def build_lucene(store: DocStore, out_dir: Path, cfg: LuceneConfig) -> dict[str, Any]:
    """Index the doc store with Anserini's JsonCollection indexer (one thread keeps Lucene ids = corpus order)."""
    _, index_lucene = import_pyserini_lucene()
    indexer = index_lucene.LuceneIndexer(str(out_dir / SUBDIR), threads=1)
    batch: list[dict[str, str]] = []
    for d in store:
        batch.append({"id": d.id, "contents": f"{d.title}\n{d.text}"})
        if len(batch) >= 2048:
            indexer.add_batch_dict(batch)
            batch = []
    if batch:
        indexer.add_batch_dict(batch)
    indexer.close()
    return {"k1": cfg.k1, "b": cfg.b, "analyzer": "anserini-default-english (porter)"}


class LuceneRetriever(IndexedRetriever):
    backend = "lucene"

    def __init__(
        self, searcher: Any, store: DocStore | None, index_dir: Path | None, k1: float, b: float, threads: int
    ) -> None:
        super().__init__(index_dir, store)
        self.searcher = searcher
        self.threads = threads
        self.k1, self.b = k1, b
        searcher.set_bm25(float(k1), float(b))

    @classmethod
    def load(cls, index_dir: Path, store: DocStore, manifest: IndexManifest, cfg: LuceneConfig) -> LuceneRetriever:
        search_lucene, _ = import_pyserini_lucene()
        path = index_dir / SUBDIR
        if not path.is_dir():
            raise IndexDirError(f"{index_dir}: Lucene index folder {SUBDIR}/ is missing")
        searcher = search_lucene.LuceneSearcher(str(path))
        # BM25 parameters are query-time in Lucene: the config may change them; the manifest gives the build's.
        k1 = cfg.k1 if "k1" in cfg.model_fields_set else manifest.params.get("k1", cfg.k1)
        b = cfg.b if "b" in cfg.model_fields_set else manifest.params.get("b", cfg.b)
        return cls(searcher, store, index_dir, k1, b, cfg.threads)

    @classmethod
    def prebuilt(cls, cfg: LuceneConfig) -> LuceneRetriever:
        assert cfg.prebuilt_index
        search_lucene, _ = import_pyserini_lucene()
        try:
            searcher = search_lucene.LuceneSearcher.from_prebuilt_index(cfg.prebuilt_index)
        except Exception as e:  # pyserini raises bare ValueError / Exception on unknown names and failed downloads
            raise IndexDirError(f"could not open prebuilt Lucene index {cfg.prebuilt_index!r}: {e}") from None
        if searcher is None:
            raise IndexDirError(f"could not open prebuilt Lucene index {cfg.prebuilt_index!r}")
        return cls(searcher, None, None, cfg.k1, cfg.b, cfg.threads)

    def __len__(self) -> int:
        if self.store is not None:
            return len(self.store)
        return int(self.searcher.num_docs)

    def _raw_doc(self, docid: str, score: float | None) -> Document:
        d = self.searcher.doc(docid)
        if d is None:
            raise RetrievalError(f"unknown document id: {docid!r}")
        raw = d.raw() or ""
        try:
            obj = json.loads(raw)
            contents = obj.get("contents", "") if isinstance(obj, dict) else str(obj)
        except json.JSONDecodeError:
            contents = raw
        return Document.from_contents(docid, contents, score=score)

    def get(self, ids: list[str]) -> list[Document]:
        if self.store is not None:
            return self.store.get(ids)
        return [self._raw_doc(i, None) for i in ids]

    def search_ids(self, queries: list[str], k: int) -> list[list[tuple[str, float]]]:
        """Raw (docid, score) hits from Lucene, ties in index order."""
        qs = check_queries(queries)
        kk = check_k(k)
        if len(qs) == 1:
            hits = {"0": self.searcher.search(qs[0], k=kk)}
        else:
            qids = [str(i) for i in range(len(qs))]
            hits = self.searcher.batch_search(qs, qids, k=kk, threads=self.threads)
        return [[(h.docid, float(h.score)) for h in hits.get(str(i), [])] for i in range(len(qs))]

    def _search(self, queries: list[str], k: int) -> list[list[Document]]:
        out: list[list[Document]] = []
        for hits in self.search_ids(queries, k):
            if self.store is None:
                out.append([self._raw_doc(docid, s) for docid, s in hits])
                continue
            rows = [(self.store.row_of[docid], s) for docid, s in hits]
            rows.sort(key=lambda rs: (-rs[1], rs[0]))
            out.append(self.store.docs([r for r, _ in rows], [s for _, s in rows]))
        return out
