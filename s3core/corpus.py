"""Corpus and question files in the DPR / FlashRAG shapes, streamed line by line.

Corpus lines: {"id", "contents"} with contents = `"Title"\\ntext`, or {"id", "title", "text"}; optionally
"original_id", the user's id of a passage `s3 data prepare` had to rename. A title is only what the line says is one
(`TITLE_RULE`): a "title" field, or a double-quoted first line of "contents"; any other "contents" is all text.
Question lines: {"id", "question", "golden_answers", "metadata"}.
A 21M-passage corpus never has to fit in memory: `iter_corpus` yields one Document at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from s3core.errors import DataFormatError
from s3core.io import iter_jsonl, write_jsonl_atomic
from s3core.types import Document, QAExample

__all__ = ["TITLE_RULE", "iter_corpus", "iter_questions", "read_questions", "write_corpus", "write_questions"]

TITLE_RULE = "title-field-or-quoted-first-line"
"""How a corpus line's title is read (`Document.from_contents`), as an index manifest records it: a "title" field, or
the first line of "contents" where it is double-quoted (`"Title"\\ntext`); nothing else is a title, and a passage's
text is never shortened. Indexes built before the rule took any first line of a multi-line "contents" for the title
(searcher/retrieval/title_rule.py names them when they are opened, with the command that rebuilds them)."""


def _doc_from_obj(obj: Any, path: Path, lineno: int) -> Document:
    if not isinstance(obj, dict):
        raise DataFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    if "id" not in obj:
        raise DataFormatError(f"{path}:{lineno}: corpus line has no 'id'")
    doc_id = str(obj["id"])
    original = obj.get("original_id")
    if original is not None and not isinstance(original, str):
        raise DataFormatError(f"{path}:{lineno}: 'original_id' must be a string")
    if "contents" in obj:
        if not isinstance(obj["contents"], str):
            raise DataFormatError(f"{path}:{lineno}: 'contents' must be a string")
        doc = Document.from_contents(doc_id, obj["contents"])
        return doc if original is None else doc.model_copy(update={"original_id": original})
    if "text" in obj:
        return Document(id=doc_id, title=str(obj.get("title", "") or ""), text=str(obj["text"]), original_id=original)
    raise DataFormatError(f"{path}:{lineno}: corpus line needs 'contents' or 'title' + 'text' (keys: {sorted(obj)})")


def iter_corpus(path: str | Path, check_unique: bool = True) -> Iterator[Document]:
    """Stream a corpus jsonl. Raises DataFormatError naming the line on a malformed line or a duplicate id."""
    p = Path(path)
    if not p.is_file():
        raise DataFormatError(f"corpus file not found: {p}")
    seen: set[str] = set()
    for lineno, obj in iter_jsonl(p):
        doc = _doc_from_obj(obj, p, lineno)
        if check_unique:
            if doc.id in seen:
                raise DataFormatError(f"{p}:{lineno}: duplicate document id {doc.id!r}")
            seen.add(doc.id)
        yield doc


def _corpus_line(d: Document, fmt: str) -> dict[str, str]:
    line = {"id": d.id, "contents": d.contents} if fmt == "contents" else {"id": d.id, "title": d.title, "text": d.text}
    if d.original_id is not None:
        line["original_id"] = d.original_id
    return line


def write_corpus(path: str | Path, docs: Iterable[Document], fmt: str = "contents") -> int:
    """Write documents as jsonl ({"id","contents"} by default, or {"id","title","text"}; + "original_id" where a
    document has one); returns the count."""
    return write_jsonl_atomic(path, (_corpus_line(d, fmt) for d in docs))


def iter_questions(path: str | Path) -> Iterator[QAExample]:
    """Stream a FlashRAG-shaped questions jsonl."""
    p = Path(path)
    if not p.is_file():
        raise DataFormatError(f"questions file not found: {p}")
    for lineno, obj in iter_jsonl(p, what="a question object"):
        if "question" not in obj:
            raise DataFormatError(f"{p}:{lineno}: a question line needs at least 'question'")
        answers = obj.get("golden_answers", obj.get("answers")) or []
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list):
            raise DataFormatError(f"{p}:{lineno}: 'golden_answers' must be a list of strings")
        if not isinstance(obj.get("metadata") or {}, dict):
            raise DataFormatError(f"{p}:{lineno}: 'metadata' must be a JSON object")
        yield QAExample(
            id=str(obj.get("id", lineno - 1)),
            question=str(obj["question"]),
            golden_answers=[str(a) for a in answers],
            metadata=obj.get("metadata") or {},
        )


def read_questions(path: str | Path) -> list[QAExample]:
    return list(iter_questions(path))


def write_questions(path: str | Path, questions: Iterable[QAExample]) -> int:
    return write_jsonl_atomic(path, (q.model_dump(mode="json") for q in questions))
