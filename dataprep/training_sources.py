"""The raw QA files a training run starts from (`training.data.sources`), loaded into one corpus and question set.

Each source is 'format:path' (a format of `s3 data formats`, a path relative to `base_dir`, the config file's
folder). Every file is loaded on its own (`dataprep.load`); their corpora merge by paragraph id (ids depend only on
the paragraph, so a paragraph two sources share is one document) and their questions by id (the first wins).
Filtering the questions (yes/no answers, the naive-RAG baseline) is training's job, not this module's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from dataprep.formats import FORMATS
from dataprep.prepare import load
from s3core.errors import ConfigError, DataFormatError
from s3core.io import JsonObject, file_sha256
from s3core.types import Document, QAExample

__all__ = ["TrainingSources", "load_sources"]


class TrainingSources(NamedTuple):
    corpus: list[Document]
    questions: list[QAExample]
    sources: list[JsonObject]
    """One {"format", "path", "sha256", "questions", "paragraphs"} per source file (training's sources.json)."""


def load_sources(sources: Sequence[str], base_dir: Path) -> TrainingSources:
    """Load every 'format:path' of `sources` (paths relative to `base_dir`, `~` expanded); merge the corpora
    (dedup by id) and the questions (first of each id). Raises ConfigError on a malformed entry or an unknown
    format, DataFormatError on a missing or malformed file."""
    corpus: dict[str, Document] = {}
    questions: dict[str, QAExample] = {}
    summaries: list[JsonObject] = []
    for item in sources:
        fmt, sep, raw = item.partition(":")
        if not sep or not raw:
            raise ConfigError(f"training.data.sources entry {item!r}: expected 'format:path'")
        if fmt not in FORMATS:
            raise ConfigError(f"training.data.sources: unknown format {fmt!r}; known: {', '.join(sorted(FORMATS))}")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        if not path.exists():
            raise DataFormatError(f"training source not found: {path} (from training.data.sources {item!r})")
        data = load(fmt, [path])
        for d in data.corpus:
            corpus.setdefault(d.id, d)
        for q in data.questions:
            questions.setdefault(q.id, q)
        summaries.append(
            {
                "format": fmt,
                "path": str(path),
                "sha256": file_sha256(path),
                "questions": len(data.questions),
                "paragraphs": len(data.corpus),
            }
        )
    return TrainingSources(list(corpus.values()), list(questions.values()), summaries)
