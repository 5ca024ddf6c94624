"""Corpus files, which merge into the corpus of any format.

- HippoRAG (Gutiérrez et al., 2024) corpora: one object {title: [sentences]} (its hotpotqa_train_corpus.json), or
  records {"title", "text"} (its musique_train_corpus.json);
- FlashRAG (Jin et al., 2024) / DPR (Karpukhin et al., 2020) corpora: records {"id", "contents"} with contents =
  `"Title"\\ntext`, or {"id", "title", "text"};
- MuSiQue-style paragraph records {"title", "paragraph_text"}.

A record's own id ("id", or BEIR's "_id") is kept (renamed only when taken or unusable, each change in the manifest's
"renamed_ids": dataprep.builder); records without one get the stable generated id. A corpus record and a question's
own context paragraph with the same title and text are one document, under the record's id. A "contents" string is
read by `s3core.corpus.TITLE_RULE`: its first line is the title only where it is double-quoted.
"""

from __future__ import annotations

from typing import TypeGuard

from dataprep.builder import Builder, SourceInfo, join_sentences
from dataprep.rows import fail
from s3core.io import JsonObject
from s3core.types import Document

__all__ = ["add_corpus_row", "add_hipporag_dict", "is_corpus_row", "is_hipporag_dict"]


def is_corpus_row(record: object) -> TypeGuard[JsonObject]:
    """A paragraph record (never a question): "contents", or "title" with "text" or "paragraph_text"."""
    if not isinstance(record, dict) or "question" in record or "Question" in record:
        return False
    return "contents" in record or (
        "title" in record and ("text" in record or "paragraph_text" in record)
    )


def add_corpus_row(b: Builder, row: JsonObject, where: str, src: SourceInfo) -> None:
    if "contents" in row:
        if not isinstance(row["contents"], str):
            raise fail(where, "'contents' must be a string")
        d = Document.from_contents("x", row["contents"])
        b.add_paragraph(d.title, d.text, where, src, own_id=_own_id(row))
        return
    text = row.get("text", row.get("paragraph_text"))
    if isinstance(text, list):
        text = join_sentences(text)
    if not isinstance(text, str):
        raise fail(where, "corpus row 'text' must be a string or a list of sentences")
    b.add_paragraph(row.get("title"), text, where, src, own_id=_own_id(row))


def _own_id(row: JsonObject) -> object:
    """The id a corpus record gives its passage ("id", else "_id"), None when it gives none."""
    return row["id"] if row.get("id") is not None else row.get("_id")


def is_hipporag_dict(record: object) -> TypeGuard[dict[str, list[str]]]:
    """A whole HippoRAG corpus as one object: every value a list of sentence strings."""
    if not isinstance(record, dict) or not record:
        return False
    return all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in record.values())


def add_hipporag_dict(b: Builder, corpus: dict[str, list[str]], where: str, src: SourceInfo) -> None:
    for title, sentences in corpus.items():
        b.add_paragraph(title, join_sentences(sentences), where, src)
