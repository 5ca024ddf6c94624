"""Paragraph and question identity: the id rules, and the builder that merges input files into one dataset.

Every format module hands its paragraphs and questions to a `Builder`, which deduplicates, assigns ids and counts
what happened (`LoadStats`; its `ManifestCounts` are manifest.json's "counts"). The rules below are a contract:
prepared corpora, indexes, cached baselines and published results all refer to these ids.

Paragraph identity and ids (stable across runs and machines):
    text  = the sentences joined in order, with one space inserted where neither side has whitespace, stripped
    key   = (title.strip(), text)                 two occurrences with the same key are one document
    id    = f"{slug(title)}-{sha1(title + '\\n' + text)[:12]}"
    slug  = title NFKD-folded to ASCII, lower-cased, non-alphanumeric runs -> "-", at most 40 chars, "p" if empty
The id depends only on the paragraph itself, never on file order or on which other files were merged.

Question ids are the source's own ids (`_id`, `id`, `example_id`, `QuestionId`); rows without one get
f"{format}-{sha1(question)[:12]}". When merged inputs reuse an id for a different question (e.g. two 500-question
samples both numbered 0..499), the later one is renamed f"{file stem}:{id}" and counted in the manifest; the same
question seen twice (same id, same text) is kept once. Preparing keeps every question; filtering belongs to training.
The only rows dropped are ones the format defines as unusable (2WikiMultihopQA rows without `context`) or rows
of another dataset in a mixed file (the NQ / TriviaQA `dataset` field); each drop is counted with its reason.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from s3core.errors import DataFormatError
from s3core.types import Document, QAExample

__all__ = ["ID_RULE", "Builder", "LoadStats", "ManifestCounts", "SourceInfo", "join_sentences", "paragraph_id"]

ID_RULE = (
    "paragraph id = f'{slug(title)}-{sha1(title + chr(10) + text)[:12]}' where text = sentences joined with a "
    "space where neither side has whitespace, stripped; slug = NFKD->ASCII, lower, non-alnum runs -> '-', <= 40 chars"
)


def join_sentences(sentences: Iterable[str]) -> str:
    """Join sentences in order, inserting one space only where neither side already has whitespace.

    HotpotQA keeps the leading space of each sentence, 2WikiMultihopQA does not; both give the same text.

    >>> join_sentences(["First one.", " Second one.", "Third."])
    'First one. Second one. Third.'
    """
    out = ""
    for s in sentences:
        if not isinstance(s, str):
            raise TypeError(f"a sentence must be a string, got {type(s).__name__}")
        if out and s and not out[-1].isspace() and not s[0].isspace():
            out += " "
        out += s
    return out.strip()


def _slug(title: str) -> str:
    ascii_ = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_.lower()).strip("-")[:40].strip("-")
    return slug or "p"


def paragraph_id(title: str, text: str) -> str:
    """The stable id of a paragraph (see the module docstring).

    >>> paragraph_id("Shirley Temple", "Shirley Temple Black was an American actress.")
    'shirley-temple-9ed81aef7a8d'
    """
    title, text = title.strip(), text.strip()
    digest = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]
    return f"{_slug(title)}-{digest}"


@pydantic_dataclass
class ManifestCounts:
    """What the builder counts as it goes, written as manifest.json's "counts" (in this order)."""

    questions: int = Field(default=0, description="Questions kept (after merging duplicates).")
    paragraphs: int = Field(default=0, description="Distinct paragraphs written to the corpus.")
    paragraph_occurrences: int = Field(default=0, description="Paragraphs seen, before deduplication.")
    duplicates_merged: int = Field(default=0, description="Paragraph occurrences of an already-seen (title, text).")
    empty_paragraphs_skipped: int = Field(default=0, description="Paragraphs with neither a title nor text.")
    duplicate_questions_merged: int = Field(default=0, description="A question seen again (same id and text).")
    question_ids_renamed: int = Field(default=0, description="Questions renamed: their id was taken.")
    questions_without_answers: int = Field(default=0, description="Questions kept with no gold answer.")
    questions_with_supporting_ids: int = Field(default=0, description="Questions with gold paragraphs.")
    supporting_titles_missing: int = Field(default=0, description="Supporting titles not in the context.")
    dropped: int = Field(default=0, description="Rows dropped (see `dropped`).")


@dataclass
class LoadStats:
    """What happened while loading: the manifest's counts, and the dropped rows by reason."""

    counts: ManifestCounts = field(default_factory=ManifestCounts)
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_examples: dict[str, list[str]] = field(default_factory=dict)
    """The first few file:line locations of each reason."""


@dataclass
class SourceInfo:
    """One input file and what it contributed."""

    path: Path
    records: int = 0
    questions: int = 0
    paragraphs: int = 0


class Builder:
    """Collects paragraphs (deduplicated by (title, text)) and questions (unique ids) across input files."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.docs: dict[str, Document] = {}
        self.questions: dict[str, QAExample] = {}
        self.stats = LoadStats()
        self.counts = self.stats.counts
        self.sources: list[SourceInfo] = []

    def add_paragraph(self, title: object, text: str, where: str, src: SourceInfo) -> str | None:
        """Add one paragraph occurrence; returns its id, or None for an empty paragraph (skipped and counted)."""
        title_s = "" if title is None else str(title).strip()
        text = text.strip()
        if not title_s and not text:
            self.counts.empty_paragraphs_skipped += 1
            return None
        pid = paragraph_id(title_s, text)
        self.counts.paragraph_occurrences += 1
        src.paragraphs += 1
        old = self.docs.get(pid)
        if old is None:
            self.docs[pid] = Document(id=pid, title=title_s, text=text)
            self.counts.paragraphs += 1
        elif old.title != title_s or old.text != text:  # a 48-bit hash collision: never silently merge
            raise DataFormatError(f"{where}: paragraph id collision on {pid!r} ({old.title!r} vs {title_s!r})")
        else:
            self.counts.duplicates_merged += 1
        return pid

    def add_question(self, q: QAExample, src: SourceInfo) -> None:
        """Add a question; a repeated one is merged, a different one under a taken id is renamed."""
        if not q.golden_answers:
            self.counts.questions_without_answers += 1
        old = self.questions.get(q.id)
        if old is not None:
            if old.question == q.question:
                self.counts.duplicate_questions_merged += 1
                return
            base = f"{src.path.stem}:{q.id}"
            new_id, n = base, 1
            while new_id in self.questions:
                n += 1
                new_id = f"{base}#{n}"
            q = q.model_copy(update={"id": new_id, "metadata": {**q.metadata, "original_id": q.id}})
            self.counts.question_ids_renamed += 1
        self.questions[q.id] = q
        self.counts.questions += 1
        if q.metadata.get("supporting_ids"):
            self.counts.questions_with_supporting_ids += 1
        src.questions += 1

    def drop(self, reason: str, where: str) -> None:
        """Count a row the format defines as unusable, keeping its first few locations."""
        self.counts.dropped += 1
        self.stats.dropped[reason] += 1
        ex = self.stats.dropped_examples.setdefault(reason, [])
        if len(ex) < 3:
            ex.append(where)
