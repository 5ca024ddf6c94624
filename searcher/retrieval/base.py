"""The `Retriever` protocol and the checks every backend shares.

Every backend is batch-first: `search(queries, k)` answers a list of queries at once and returns, per query, up to
`k` `Document`s ranked best first, each carrying its `.score`. Input validation lives here, in one place:

- an empty query list, a non-list, or an empty / blank query string -> `RetrievalError`;
- `k <= 0` (or not an int) -> `RetrievalError`;
- `k` larger than the corpus -> every (matching) document, no error;
- equal scores are ordered by corpus order (the row a document had in the corpus file).

Lexical backends (bm25, lucene) return only documents that match at least one query term; a query whose every
term is unknown or a stopword gets an empty list. Dense backends always return `min(k, len(index))` documents.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from s3core.errors import IndexDirError, RetrievalError
from s3core.types import Document


@runtime_checkable
class Retriever(Protocol):
    """What every retrieval backend offers (bm25s, Lucene, dense faiss, remote HTTP)."""

    backend: str

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        """Top-k documents per query, best first, `Document.score` set."""
        ...

    def get(self, ids: list[str]) -> list[Document]:
        """Documents by id, in the order asked; an unknown id is a RetrievalError naming it."""
        ...

    def __len__(self) -> int:
        """Number of documents in the index."""
        ...

    def save(self, path: str | Path) -> Path:
        """Write a self-describing index directory that `load_retriever` can open with no other flag."""
        ...


def check_queries(queries: Any) -> list[str]:
    """Validate a query batch; returns it as a list. One clear RetrievalError per problem."""
    if isinstance(queries, str):
        raise RetrievalError("queries must be a list of strings, got a single string (wrap it in a list)")
    if not isinstance(queries, list | tuple):
        raise RetrievalError(f"queries must be a list of strings, got {type(queries).__name__}")
    if not queries:
        raise RetrievalError("empty query list: pass at least one query")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RetrievalError(f"query {i} is not a string (got {type(q).__name__})")
        if not q.strip():
            raise RetrievalError(f"query {i} is empty")
    return list(queries)


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise RetrievalError(f"k must be a positive integer, got {k!r}")
    if k <= 0:
        raise RetrievalError(f"k must be a positive integer, got {k}")
    return int(k)


def top_k_rows(scores: np.ndarray, k: int, positive_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """Rows and scores of the k best entries of a 1-D score array, ties broken by row (corpus order).

    O(n): one argpartition plus, only when the k-th score is tied, one equality scan.
    With `positive_only`, rows scoring <= 0 (no query term matched) are left out.

    >>> rows, s = top_k_rows(np.array([1.0, 3.0, 3.0, 0.0, 3.0], dtype=np.float32), 2, True)
    >>> rows.tolist(), s.tolist()
    ([1, 2], [3.0, 3.0])
    """
    # Lexical scores are mostly 0 (no query term): rank only the matching rows (ascending, so ties keep order).
    base = np.flatnonzero(scores > 0) if positive_only else None
    vals = scores[base] if base is not None else scores
    n = vals.shape[0]
    k = min(k, n)
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=scores.dtype)
    if k < n:
        cand = np.argpartition(vals, n - k)[n - k :]
        thr = vals[cand].min()
        above = cand[vals[cand] > thr]
        tied = np.flatnonzero(vals == thr)[: k - above.shape[0]]
        pos = np.concatenate([above, tied])
    else:
        pos = np.arange(n)
    sel = vals[pos]
    rows = base[pos] if base is not None else pos
    order = np.lexsort((rows, -sel))
    return rows[order], sel[order]


class IndexedRetriever(ABC):
    """Base of the backends that live in an index directory with a doc store (bm25, lucene, dense).

    Subclasses implement `_search(queries, k) -> list[list[(row, score)]]`-like results via `_search_docs`.
    """

    backend: str = ""

    def __init__(self, index_dir: Path | None, store: Any) -> None:
        self.index_dir = index_dir
        self.store = store

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        qs = check_queries(queries)
        kk = check_k(k)
        return self._search(qs, kk)

    @abstractmethod
    def _search(self, queries: list[str], k: int) -> list[list[Document]]: ...

    def get(self, ids: list[str]) -> list[Document]:
        return self.store.get(ids)

    def __len__(self) -> int:
        return len(self.store)

    def save(self, path: str | Path) -> Path:
        """Copy the index directory to `path` (a no-op when it is the directory itself)."""
        dst = Path(path)
        if self.index_dir is None:
            raise IndexDirError(f"this {self.backend} retriever has no index directory to save")
        if dst.resolve() == self.index_dir.resolve():
            return dst
        if dst.exists() and any(dst.iterdir()):
            raise IndexDirError(f"{dst} exists and is not empty; choose a new directory")
        shutil.copytree(self.index_dir, dst, dirs_exist_ok=True)
        return dst

    def __repr__(self) -> str:
        return f"{type(self).__name__}(index_dir={str(self.index_dir)!r}, docs={len(self)})"
