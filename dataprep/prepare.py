"""`load` raw files of one format into (corpus, questions); `prepare` writes them as a prepared folder.

A prepared folder, what `s3 data prepare` writes and evaluation and training read (`load_prepared`):

    corpus.jsonl      {"id", "contents"} per distinct paragraph (only when the inputs carry paragraphs)
    questions.jsonl   {"id", "question", "golden_answers", "metadata"} per question (the FlashRAG shape)
    manifest.json     counts, dropped rows with their reasons, the id rule, the corpus ids that had to change
                      (renamed_ids: original -> new, with the reason), every source file with its sha256

Several input files of one format merge into one corpus and one question set (ids: dataprep.builder); any input
file may also be a corpus file (dataprep.formats.corpus).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from dataprep.builder import ID_RULE, Builder, LoadStats, ManifestCounts, RenamedId, SourceInfo
from dataprep.formats import FORMATS, DataFormat
from dataprep.formats.corpus import add_corpus_row, add_hipporag_dict, is_corpus_row, is_hipporag_dict
from dataprep.records import iter_records
from s3core.corpus import read_questions, write_corpus, write_questions
from s3core.errors import DataFormatError
from s3core.io import file_sha256, path_from, write_text_atomic
from s3core.types import Document, QAExample

__all__ = [
    "CORPUS_FILE",
    "MANIFEST_FILE",
    "QUESTIONS_FILE",
    "DroppedRows",
    "LoadedData",
    "Manifest",
    "SourceFile",
    "load",
    "load_prepared",
    "prepare",
]

CORPUS_FILE = "corpus.jsonl"
QUESTIONS_FILE = "questions.jsonl"
MANIFEST_FILE = "manifest.json"


# ------------------------------------------------------------------------------------------------- loading


@dataclass
class LoadedData:
    """The result of loading one or more files: unpacks as `corpus, questions = load(...)` (the attributes keep
    their precise types; the unpacking cannot, as the two lists differ)."""

    corpus: list[Document]
    questions: list[QAExample]
    stats: LoadStats
    sources: list[SourceInfo] = field(default_factory=list, repr=False)
    renamed: list[RenamedId] = field(default_factory=list, repr=False)
    """The corpus records' own ids that had to change (dataprep.builder)."""

    def __iter__(self) -> Iterator[Any]:
        yield self.corpus
        yield self.questions


def _get_format(fmt: str) -> DataFormat:
    spec = FORMATS.get(fmt)
    if spec is None:
        raise DataFormatError(f"unknown data format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    return spec


def _load_file(b: Builder, spec: DataFormat, path: Path) -> None:
    src = SourceInfo(path=path)
    b.sources.append(src)
    for lineno, rec in iter_records(path):
        where = f"{path}:{lineno}"
        src.records += 1
        if is_corpus_row(rec):
            add_corpus_row(b, rec, where, src)
        elif spec.hipporag_dicts and is_hipporag_dict(rec):
            add_hipporag_dict(b, rec, where, src)
        else:
            spec.parse(b, rec, where, src)


def load(fmt: str, inputs: Iterable[str | Path]) -> LoadedData:
    """Load and merge input files of one format into (corpus, questions); see dataprep.builder for the id rules."""
    spec = _get_format(fmt)
    paths = [Path(p) for p in inputs]
    if not paths:
        raise DataFormatError("no input files given")
    b = Builder(spec.name)
    for p in paths:
        _load_file(b, spec, p)
    corpus, questions = b.finish()
    return LoadedData(corpus=corpus, questions=questions, stats=b.stats, sources=b.sources, renamed=b.renamed)


# ------------------------------------------------------------------------------------------------ preparing


class SourceFile(BaseModel):
    path: str = Field(description="The input file, relative to the prepared folder (absolute when on another drive).")
    sha256: str
    bytes: int
    records: int = Field(description="Top-level records read (lines, array elements, or 1 for a single object).")
    questions: int = Field(description="Questions this file contributed (after merging duplicates).")
    paragraphs: int = Field(description="Paragraph occurrences in this file (before deduplication).")


class DroppedRows(BaseModel):
    reason: str
    count: int
    examples: list[str] = Field(default_factory=list, description="First few file:line locations.")


class Manifest(BaseModel):
    """manifest.json of a prepared dataset directory."""

    format: str
    created_at: str
    corpus_file: str | None = Field(description="corpus.jsonl, or None when the inputs carry no paragraphs.")
    corpus_sha256: str | None = None
    questions_file: str
    questions_sha256: str
    id_rule: str = ID_RULE
    counts: ManifestCounts
    dropped: list[DroppedRows] = Field(default_factory=list)
    renamed_ids: list[RenamedId] = Field(
        default_factory=list, description="The corpus records' own ids that had to change: original -> new, why, where "
        "(every other own id is kept as it is; renamed documents also carry theirs as `original_id`).")
    sources: list[SourceFile]


def prepare(fmt: str, inputs: list[Path], out_dir: str | Path) -> Manifest:
    """Load `inputs` (one format, merged) and write corpus.jsonl (if any paragraphs), questions.jsonl, manifest.json."""
    data = load(fmt, inputs)
    out = Path(out_dir)
    if not data.questions:
        names = ", ".join(str(p) for p in inputs)
        records = sum(src.records for src in data.sources)
        dropped = "; ".join(f"{c} dropped: {r}" for r, c in sorted(data.stats.dropped.items()))
        raise DataFormatError(
            f"no {fmt} questions in {names} ({records} records read, {len(data.corpus)} corpus paragraphs"
            + (f"; {dropped}" if dropped else "") + f"): is it a {fmt} file? `s3 data formats` lists the formats"
        )
    if out.exists() and not out.is_dir():
        raise DataFormatError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    corpus_path = out / CORPUS_FILE
    if data.corpus:
        write_corpus(corpus_path, data.corpus, fmt="contents")
    elif corpus_path.exists():
        corpus_path.unlink()  # a stale corpus from an earlier prepare into the same folder
    q_path = out / QUESTIONS_FILE
    write_questions(q_path, data.questions)
    st = data.stats
    manifest = Manifest(
        format=fmt,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        corpus_file=CORPUS_FILE if data.corpus else None,
        corpus_sha256=file_sha256(corpus_path) if data.corpus else None,
        questions_file=QUESTIONS_FILE,
        questions_sha256=file_sha256(q_path),
        counts=data.stats.counts,
        dropped=[
            DroppedRows(reason=r, count=c, examples=st.dropped_examples.get(r, [])) for r, c in sorted(st.dropped.items())
        ],
        renamed_ids=data.renamed,
        sources=[
            SourceFile(
                path=path_from(out, s.path),
                sha256=file_sha256(s.path),
                bytes=s.path.stat().st_size,
                records=s.records,
                questions=s.questions,
                paragraphs=s.paragraphs,
            )
            for s in data.sources
        ],
    )
    write_text_atomic(out / MANIFEST_FILE, manifest.model_dump_json(indent=2) + "\n")
    return manifest


def load_prepared(directory: str | Path) -> tuple[Path | None, list[QAExample]]:
    """Open what `s3 data prepare` wrote: `(corpus.jsonl path or None, questions)`.

    Works on any folder holding a FlashRAG-shaped questions.jsonl (and optionally corpus.jsonl); when a
    manifest.json is present, the files it names are used and must exist.
    """
    d = Path(directory)
    if not d.is_dir():
        raise DataFormatError(f"prepared dataset folder not found: {d} (create it with `s3 data prepare`)")
    corpus_name: str | None = CORPUS_FILE
    questions_name = QUESTIONS_FILE
    mpath = d / MANIFEST_FILE
    if mpath.is_file():
        try:
            m = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{mpath}:{e.lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(m, dict):
            raise DataFormatError(f"{mpath}: expected a JSON object")
        corpus_name = m.get("corpus_file")
        questions_name = m.get("questions_file") or QUESTIONS_FILE
        if corpus_name and not (d / corpus_name).is_file():
            raise DataFormatError(f"{d}: manifest names {corpus_name} but the file is missing")
    q_path = d / questions_name
    if not q_path.is_file():
        raise DataFormatError(f"{d}: no {questions_name} (is this a folder written by `s3 data prepare`?)")
    corpus_path = d / corpus_name if corpus_name and (d / corpus_name).is_file() else None
    return corpus_path, read_questions(q_path)
