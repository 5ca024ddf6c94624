"""BM25 with bm25s + PyStemmer: the embedded default backend (pure Python, no JVM, no GPU).

Tokenisation (lower-case, `\\w\\w+` tokens, stopwords, Snowball stemmer) and scoring (method, k1, b) come from
`RetrieverConfig.bm25` at build time and are recorded in the manifest, so loading needs none of them.
Our overhead over calling bm25s directly is one vectorised top-k per query with deterministic ties.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from s3core.errors import ConfigError
from s3core.frameworks import import_bm25s
from s3core.types import Document
from searcher.config import BM25Config
from searcher.retrieval.base import IndexedRetriever, top_k_rows
from searcher.retrieval.bm25_build import build_streaming
from searcher.retrieval.store import DocStore, IndexManifest

SUBDIR = "bm25"


def _stemmer(language: str | None) -> Any:
    if not language:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ConfigError(
            f"retriever.bm25.stemmer: unknown PyStemmer language {language!r}; "
            f"choose one of {', '.join(Stemmer.algorithms())} or none"
        ) from None


def _tokenize(texts: list[str], params: dict[str, Any], stemmer: Any) -> list[list[str]]:
    bm25s = import_bm25s()

    out: list[list[str]] = bm25s.tokenize(
        texts, stopwords=params.get("stopwords") or None, stemmer=stemmer, return_ids=False, show_progress=False
    )
    return out


def build_bm25(store: DocStore, out_dir: Path, cfg: BM25Config, progress: bool = False) -> dict[str, Any]:
    """Index the doc store in bm25s's format, streamed (bm25_build: memory grows with the vocabulary, not the corpus);
    returns the parameters to record in the manifest."""
    params = cfg.model_dump(mode="json")
    texts = (f"{d.title}\n{d.text}" for d in store)  # read from the doc store one passage at a time
    build_streaming(texts, len(store), out_dir / SUBDIR, method=cfg.method, k1=cfg.k1, b=cfg.b,
                    stopwords=cfg.stopwords or None, stemmer=_stemmer(cfg.stemmer), progress=progress)
    return params


class BM25Retriever(IndexedRetriever):
    backend = "bm25"

    def __init__(self, index_dir: Path, store: DocStore, manifest: IndexManifest) -> None:
        bm25s = import_bm25s()

        super().__init__(index_dir, store)
        self.params = dict(manifest.params)
        self._stemmer = _stemmer(self.params.get("stemmer"))
        # memory-mapped: the score matrix stays in the page cache, the process touches the rows of query terms
        self.model = bm25s.BM25.load(str(index_dir / SUBDIR), load_corpus=False, mmap=True)
        self._n = int(self.model.scores["num_docs"])

    def tokenize(self, queries: list[str]) -> list[list[str]]:
        return _tokenize(queries, self.params, self._stemmer)

    def _search(self, queries: list[str], k: int) -> list[list[Document]]:
        out: list[list[Document]] = []
        model = self.model
        for tokens in self.tokenize(queries):
            ids = model.get_tokens_ids(tokens)
            if not ids:
                out.append([])
                continue
            scores = model.get_scores_from_ids(ids)
            rows, sel = top_k_rows(np.asarray(scores), k, positive_only=True)
            out.append(self.store.docs(rows.tolist(), sel.tolist()))
        return out
