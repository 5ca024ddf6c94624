"""Doc store and manifest of an index directory.

An index directory describes itself:

    index.json        manifest: backend, build parameters, encoder, corpus sha256 + size, the title rule, doc count,
                      created time
    docs.jsonl        the corpus as indexed, one {"id","title","text"} a line (row i = corpus line i; + "original_id"
                      where `s3 data prepare` renamed the user's id)
    docs.offsets.npy  byte offset of every line (n + 1 entries), so any row is one read
    docs.idmap.npy    id map: 64-bit id hashes sorted, and their rows (memory-mapped; absent in older indexes)
    <backend files>   bm25/, lucene/, dense.faiss ...

`get(ids)` and the mapping from a hit's row to a `Document` read the doc store, so every backend returns the
same documents for the same ids.
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from s3core.errors import IndexDirError, RetrievalError
from s3core.io import ReadOnlyFile, file_sha256
from s3core.types import Document, construct_trusted

MANIFEST = "index.json"
DOCS = "docs.jsonl"
OFFSETS = "docs.offsets.npy"
IDMAP = "docs.idmap.npy"
FORMAT_VERSION = 1
# Doc stores up to this size are re-hashed on load (cheap); larger ones are checked by size only.
VERIFY_HASH_MAX_BYTES = 512 * 1024 * 1024


class CorpusInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The corpus file the index was built from (as given at build time).")
    sha256: str
    bytes: int
    docs: int


class FileInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    sha256: str
    bytes: int


class IndexManifest(BaseModel):
    """index.json: everything needed to load the index with no flag the build had."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    format: str = "s3-index"
    format_version: int = FORMAT_VERSION
    backend: str
    params: dict[str, Any] = Field(default_factory=dict, description="Build parameters of the backend.")
    encoder: dict[str, Any] | None = Field(default=None, description="Dense encoder: name, path, dim, fingerprint.")
    corpus: CorpusInfo | None = None
    title_rule: str | None = Field(
        default=None, description="How the corpus's titles were read (s3core.corpus.TITLE_RULE); None in an index "
        "built before the rule, which took any first line of a multi-line 'contents' for the title "
        "(searcher.retrieval.check_title_rule).")
    docstore: FileInfo | None = None
    doc_count: int
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def write(self, index_dir: Path) -> None:
        tmp = index_dir / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
        tmp.replace(index_dir / MANIFEST)


def read_manifest(index_dir: str | Path) -> IndexManifest:
    d = Path(index_dir)
    if not d.exists():
        raise IndexDirError(f"index directory not found: {d} (build one with `s3 index build`)")
    if not d.is_dir():
        raise IndexDirError(f"not a directory: {d}")
    mf = d / MANIFEST
    if not mf.is_file():
        raise IndexDirError(f"{d} is not an s3 index: no {MANIFEST} (build one with `s3 index build`)")
    try:
        raw = json.loads(mf.read_text(encoding="utf-8"))
        m = IndexManifest.model_validate(raw)
    except (json.JSONDecodeError, ValidationError) as e:
        raise IndexDirError(f"{mf}: unreadable manifest ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if m.format != "s3-index" or m.format_version > FORMAT_VERSION:
        raise IndexDirError(f"{mf}: format {m.format} v{m.format_version} is not supported by this version")
    return m


def _document(doc_id: str, title: str, text: str, score: float | None, original_id: str | None = None) -> Document:
    """A Document validated when the index was written, built without re-validation (hot path)."""
    return construct_trusted(
        Document, {"id": doc_id, "title": title, "text": text, "score": score, "original_id": original_id})


def id_hash(doc_id: str) -> int:
    """64-bit key of a document id in the on-disk id map (blake2b; collisions are resolved by reading the row)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little")


def _id_hashes(ids: Iterable[str]) -> np.ndarray:
    return np.fromiter((id_hash(i) for i in ids), dtype=np.uint64)


class _RowOf(Mapping[str, int]):
    """id -> row, read from the doc store's id map; iterating reads every row (for tests and small tools only)."""

    def __init__(self, store: DocStore) -> None:
        self._store = store

    def __getitem__(self, doc_id: str) -> int:
        row = self._store.row(doc_id)
        if row is None:
            raise KeyError(doc_id)
        return row

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self._store.row(doc_id) is not None

    def __iter__(self) -> Iterator[str]:
        for row in range(len(self._store)):
            yield self._store.doc_id(row)

    def __len__(self) -> int:
        return len(self._store)


class DocStore(ReadOnlyFile):
    """Read-only documents of an index directory, addressed by row or by id; memory does not grow with the corpus.

    - `docs.jsonl` is read per hit (one `pread` of the row's bytes + orjson): the text lives in the OS page cache,
      not in this process.
    - `docs.offsets.npy` and the id map (`docs.idmap.npy`: id hashes sorted, with their rows) are memory-mapped:
      a lookup touches a few pages. Index directories written before the id map existed get one built in memory
      at open (8 bytes per document hash + 8 per row).
    """

    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / DOCS
        off_path = index_dir / OFFSETS
        if not self.path.is_file() or not off_path.is_file():
            raise IndexDirError(f"{index_dir}: doc store missing ({DOCS} / {OFFSETS})")
        self.offsets = np.load(off_path, mmap_mode="r")
        n = self.offsets.shape[0] - 1
        size = self.path.stat().st_size
        if n < 0 or int(self.offsets[-1]) != size:
            raise IndexDirError(f"{self.path}: doc store does not match its offsets (file changed after build?)")
        self._n = n
        ReadOnlyFile.__init__(self, self.path)
        idmap = index_dir / IDMAP
        if idmap.is_file():
            table = np.load(idmap, mmap_mode="r")
            if table.shape != (2, n):
                raise IndexDirError(f"{idmap}: id map has shape {table.shape}, expected (2, {n}); rebuild the index")
            self._hashes, self._rows = table[0], table[1]
        else:  # an index built before the id map: hash the ids once, in memory
            hashes = _id_hashes(self.doc_id(r) for r in range(n))
            order = np.argsort(hashes, kind="stable")
            self._hashes, self._rows = hashes[order], order.astype(np.uint64)

    def _raw(self, row: int) -> dict[str, Any]:
        if not 0 <= row < self._n:
            raise RetrievalError(f"row {row} is outside the doc store (0..{self._n - 1})")
        if self._fd is None:
            raise RetrievalError(f"{self.path}: the doc store is closed")
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        obj: dict[str, Any] = orjson.loads(os.pread(self._fd, end - start, start))
        return obj

    def __len__(self) -> int:
        return self._n

    @property
    def ids(self) -> list[str]:
        """Every id in row order (reads the whole store: for tools and tests, not the hot path)."""
        return [self.doc_id(r) for r in range(self._n)]

    @property
    def row_of(self) -> Mapping[str, int]:
        return _RowOf(self)

    def doc_id(self, row: int) -> str:
        return str(self._raw(row)["id"])

    def row(self, doc_id: str) -> int | None:
        """The row of `doc_id`, None when the store has no such id."""
        h = np.uint64(id_hash(doc_id))
        i = int(np.searchsorted(self._hashes, h, side="left"))
        while i < self._n and self._hashes[i] == h:
            row = int(self._rows[i])
            if self.doc_id(row) == doc_id:
                return row
            i += 1
        return None

    def doc(self, row: int, score: float | None = None) -> Document:
        o = self._raw(row)
        return _document(o["id"], o["title"], o["text"], score, o.get("original_id"))

    def docs(self, rows: Iterable[int], scores: Iterable[float]) -> list[Document]:
        return [self.doc(int(r), float(s)) for r, s in zip(rows, scores, strict=True)]

    def get(self, ids: list[str]) -> list[Document]:
        if isinstance(ids, str):
            raise RetrievalError("ids must be a list of strings, got a single string")
        rows = [self.row(i) for i in ids]
        missing = [i for i, r in zip(ids, rows, strict=True) if r is None]
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise RetrievalError(f"{len(missing)} unknown document id(s): {shown}")
        return [self.doc(r) for r in rows if r is not None]

    def __iter__(self) -> Iterator[Document]:
        for row in range(len(self)):
            yield self.doc(row)



def write_docstore(docs: Iterable[Document], index_dir: Path) -> tuple[int, FileInfo]:
    """Write docs.jsonl + offsets + id map, streaming (one document in memory at a time, plus 24 bytes a document
    for the offsets and id hashes); returns (count, file info). Duplicate ids are rejected by the corpus reader."""
    offsets = array("q", [0])
    hashes = array("Q")
    pos = 0
    h = hashlib.sha256()
    with (index_dir / DOCS).open("wb") as fh:
        for d in docs:
            row = {"id": d.id, "title": d.title, "text": d.text}
            if d.original_id is not None:
                row["original_id"] = d.original_id
            line = orjson.dumps(row) + b"\n"
            fh.write(line)
            h.update(line)
            pos += len(line)
            offsets.append(pos)
            hashes.append(id_hash(d.id))
    np.save(index_dir / OFFSETS, np.frombuffer(offsets, dtype=np.int64))
    hv = np.frombuffer(hashes, dtype=np.uint64)
    order = np.argsort(hv, kind="stable")
    np.save(index_dir / IDMAP, np.stack([hv[order], order.astype(np.uint64)]))
    info = FileInfo(file=DOCS, sha256=h.hexdigest(), bytes=pos)
    return len(offsets) - 1, info


def open_docstore(index_dir: Path, manifest: IndexManifest) -> DocStore:
    """Open the doc store and check it against the manifest (size always, sha256 when small)."""
    info = manifest.docstore
    if info is None:
        raise IndexDirError(f"{index_dir}: the manifest names no doc store")
    p = index_dir / info.file
    if not p.is_file():
        raise IndexDirError(f"{index_dir}: doc store {info.file} is missing")
    size = p.stat().st_size
    if size != info.bytes or (size <= VERIFY_HASH_MAX_BYTES and file_sha256(p) != info.sha256):
        raise IndexDirError(
            f"{p}: doc store does not match the manifest (corpus changed after the index was built); rebuild the index"
        )
    store = DocStore(index_dir)
    if len(store) != manifest.doc_count:
        raise IndexDirError(f"{index_dir}: manifest says {manifest.doc_count} docs, doc store has {len(store)}")
    return store
