"""Doc store and manifest of an index directory.

An index directory describes itself:

    index.json        manifest: backend, build parameters, encoder, corpus sha256 + size, doc count, created time
    docs.jsonl        the corpus as indexed, one {"id","title","text"} a line (row i = corpus line i)
    docs.offsets.npy  byte offset of every line (n + 1 entries), so any row is one slice of a memory map
    <backend files>   bm25/, lucene/, dense.faiss ...

`get(ids)` and the mapping from a hit's row to a `Document` read the doc store, so every backend returns the
same documents for the same ids.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from s3core.errors import IndexDirError, RetrievalError
from s3core.io import file_sha256
from s3core.types import Document, construct_trusted

MANIFEST = "index.json"
DOCS = "docs.jsonl"
OFFSETS = "docs.offsets.npy"
FORMAT_VERSION = 1
# Doc stores up to this size are re-hashed on load (cheap); larger ones are checked by size only.
VERIFY_HASH_MAX_BYTES = 512 * 1024 * 1024
# Doc stores up to this many documents are decoded into memory at open; larger ones are read row by row (mmap).
PRELOAD_MAX_DOCS = 500_000


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


def _document(doc_id: str, title: str, text: str, score: float | None) -> Document:
    """A Document validated when the index was written, built without re-validation (hot path)."""
    return construct_trusted(Document, {"id": doc_id, "title": title, "text": text, "score": score})


class DocStore:
    """Read-only, memory-mapped documents of an index directory, addressed by row or by id."""

    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / DOCS
        off_path = index_dir / OFFSETS
        if not self.path.is_file() or not off_path.is_file():
            raise IndexDirError(f"{index_dir}: doc store missing ({DOCS} / {OFFSETS})")
        self.offsets = np.load(off_path)
        n = self.offsets.shape[0] - 1
        size = self.path.stat().st_size
        if n < 0 or int(self.offsets[-1]) != size:
            raise IndexDirError(f"{self.path}: doc store does not match its offsets (file changed after build?)")
        self._mm: mmap.mmap | bytes = b""
        if size:
            with self.path.open("rb") as fh:  # the map keeps its own handle
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.ids: list[str] = []
        # Small and medium corpora are held decoded (about the corpus size in memory): no JSON on the hot path.
        self._rows: list[tuple[str, str, str]] | None = [] if n <= PRELOAD_MAX_DOCS else None
        for row in range(n):
            o = self._raw(row)
            self.ids.append(o["id"])
            if self._rows is not None:
                self._rows.append((o["id"], o["title"], o["text"]))
        self.row_of: dict[str, int] = {doc_id: row for row, doc_id in enumerate(self.ids)}

    def _raw(self, row: int) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self._mm[int(self.offsets[row]) : int(self.offsets[row + 1])])
        return obj

    def __len__(self) -> int:
        return len(self.ids)

    def doc(self, row: int, score: float | None = None) -> Document:
        if self._rows is not None:
            doc_id, title, text = self._rows[row]
        else:
            o = self._raw(row)
            doc_id, title, text = o["id"], o["title"], o["text"]
        return _document(doc_id, title, text, score)

    def docs(self, rows: Iterable[int], scores: Iterable[float]) -> list[Document]:
        return [self.doc(int(r), float(s)) for r, s in zip(rows, scores, strict=True)]

    def get(self, ids: list[str]) -> list[Document]:
        if isinstance(ids, str):
            raise RetrievalError("ids must be a list of strings, got a single string")
        missing = [i for i in ids if i not in self.row_of]
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise RetrievalError(f"{len(missing)} unknown document id(s): {shown}")
        return [self.doc(self.row_of[i]) for i in ids]

    def __iter__(self) -> Iterator[Document]:
        for row in range(len(self)):
            yield self.doc(row)

    def close(self) -> None:
        if isinstance(self._mm, mmap.mmap):
            self._mm.close()


def write_docstore(docs: Iterable[Document], index_dir: Path) -> tuple[int, FileInfo]:
    """Write docs.jsonl + offsets; returns (count, file info). Duplicate ids are rejected by the corpus reader."""
    offsets = [0]
    pos = 0
    with (index_dir / DOCS).open("wb") as fh:
        for d in docs:
            line = (json.dumps({"id": d.id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n").encode()
            fh.write(line)
            pos += len(line)
            offsets.append(pos)
    np.save(index_dir / OFFSETS, np.asarray(offsets, dtype=np.int64))
    info = FileInfo(file=DOCS, sha256=file_sha256(index_dir / DOCS), bytes=pos)
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
