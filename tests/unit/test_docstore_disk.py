"""The on-disk doc store: opening it reads no document, memory does not grow with the corpus, ids resolve through
the memory-mapped id map, and doc stores written before the id map existed still open."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from s3core.errors import IndexDirError, RetrievalError
from s3core.types import Document
from searcher.retrieval import store as store_mod
from searcher.retrieval.store import IDMAP, OFFSETS, DocStore, id_hash, write_docstore


def _docs(n: int) -> list[Document]:
    return [Document(id=f"d{i}", title=f"T{i}", text=f"text number {i} é") for i in range(n)]


def _open_cost(tmp_path: Path, n: int) -> tuple[int, int]:
    d = tmp_path / f"s{n}"
    d.mkdir()
    write_docstore(iter(_docs(n)), d)
    tracemalloc.start()
    s = DocStore(d)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(s) == n
    s.close()
    return peak, (d / "docs.jsonl").stat().st_size


def test_opening_reads_no_document_and_memory_does_not_grow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small, _ = _open_cost(tmp_path, 1_000)
    big, big_bytes = _open_cost(tmp_path, 100_000)
    # Python-level allocations while opening a 100x larger store stay flat (offsets and id map are memory-mapped)
    assert big < 64 * 1024 and big < small + 16 * 1024, (small, big)
    assert big < big_bytes / 50
    calls = []
    real = store_mod.orjson.loads
    monkeypatch.setattr(store_mod.orjson, "loads", lambda b: calls.append(1) or real(b))
    s = DocStore(tmp_path / "s100000")
    assert calls == []  # nothing decoded at open
    assert s.get(["d99999", "d5"])[0].text == "text number 99999 é"
    assert len(calls) <= 6  # the two rows (plus a hash collision's check at most)
    assert s.doc(7, 0.5) == Document(id="d7", title="T7", text="text number 7 é", score=0.5)
    s.close()


def test_id_lookup_errors_and_row_of(tmp_path: Path) -> None:
    write_docstore(iter(_docs(50)), tmp_path)
    s = DocStore(tmp_path)
    assert s.row("d42") == 42 and s.row("nope") is None
    assert "d3" in s.row_of and "x" not in s.row_of and s.row_of["d3"] == 3
    assert set(s.row_of) == {f"d{i}" for i in range(50)}
    with pytest.raises(RetrievalError, match=r"2 unknown document id\(s\): 'x', 'y'"):
        s.get(["d1", "x", "y"])
    with pytest.raises(RetrievalError, match="single string"):
        s.get("d1")  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match="outside the doc store"):
        s.doc(50)
    s.close()
    with pytest.raises(RetrievalError, match="closed"):
        s.doc(1)


def test_hash_collisions_resolve_by_reading_the_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod, "id_hash", lambda doc_id: 7)  # every id collides
    write_docstore(iter(_docs(20)), tmp_path)
    s = DocStore(tmp_path)
    assert [s.row(f"d{i}") for i in (0, 13, 19)] == [0, 13, 19] and s.row("zz") is None
    s.close()


def test_store_written_before_the_id_map_still_opens(tmp_path: Path) -> None:
    """The earlier writer: json.dumps lines (with spaces), offsets, no id map."""
    offsets = [0]
    with (tmp_path / "docs.jsonl").open("wb") as fh:
        for d in _docs(30):
            line = (json.dumps({"id": d.id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n").encode()
            fh.write(line)
            offsets.append(offsets[-1] + len(line))
    np.save(tmp_path / OFFSETS, np.asarray(offsets, dtype=np.int64))
    assert not (tmp_path / IDMAP).exists()
    s = DocStore(tmp_path)
    assert s.get(["d29", "d0"])[0].title == "T29" and s.row("d17") == 17
    s.close()


def test_damaged_id_map_is_a_clear_error(tmp_path: Path) -> None:
    write_docstore(iter(_docs(10)), tmp_path)
    np.save(tmp_path / IDMAP, np.zeros((2, 3), dtype=np.uint64))
    with pytest.raises(IndexDirError, match="id map has shape"):
        DocStore(tmp_path)


def test_id_hash_is_stable() -> None:
    assert id_hash("d1") == id_hash("d1") != id_hash("d2")
    assert 0 <= id_hash("anything") < 2**64
