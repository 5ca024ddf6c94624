"""Paragraph and question identity: the id rules, and the builder that merges input files into one dataset.

Every format module hands its paragraphs and questions to a `Builder`, which deduplicates, assigns ids and counts
what happened (`LoadStats`; its `ManifestCounts` are manifest.json's "counts"). The rules below are a contract:
prepared corpora, indexes, cached baselines and published results all refer to these ids.

Paragraph identity and ids (stable across runs and machines):
    text  = the sentences joined in order, with one space inserted where neither side has whitespace, stripped
    key   = (title.strip(), text)                 two occurrences with the same key are one document
    id    = the corpus's own id, where a corpus record carries one ("id" or "_id"; see below), else
            f"{slug(title)}-{sha1(title + '\\n' + text)[:12]}"
    slug  = title NFKD-folded to ASCII, lower-cased, non-alphanumeric runs -> "-", at most 40 chars, "p" if empty
A generated id depends only on the paragraph itself, never on file order or on which other files were merged; inputs
without ids of their own (HotpotQA, 2WikiMultihopQA, MuSiQue contexts, HippoRAG corpora) get only generated ids.

A corpus record's own id survives preparation as it is (an integer as its decimal string). It changes only where it
must, and each change is one `RenamedId` (manifest.json's "renamed_ids", original -> new, with the reason and line):
    - an id another passage already has (two shards both numbered 0..n): f"{file stem}:{id}" (then "#2", "#3" ...);
      the passage keeps its original id as `Document.original_id`, which the index serves with it;
    - an unusable id (empty, control characters, not a string or an integer): the generated id, original kept too;
    - the same passage (same key) under a second id: one document, under the first id; the second id maps to it.
A question's paragraph ids (`supporting_ids`, `context_ids`) follow their paragraphs to the final ids.

Question ids are the source's own ids (`_id`, `id`, `example_id`, `QuestionId`); rows without one get
f"{format}-{sha1(question)[:12]}". When merged inputs reuse an id for a different question (e.g. two 500-question
samples both numbered 0..499), the later one is renamed f"{file stem}:{id}" and counted in the manifest; the same
question seen twice (same id, same text) is kept once. Preparing keeps every question; filtering belongs to training.
The only rows dropped are ones the format defines as unusable (2WikiMultihopQA rows without `context`) or rows
of another dataset in a mixed file (the NQ / TriviaQA `dataset` field); each drop is counted with its reason.
"""

from __future__ import annotations

import hashlib
import json
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

__all__ = [
    "ID_RULE", "Builder", "LoadStats", "ManifestCounts", "RenamedId", "SourceInfo", "join_sentences", "paragraph_id",
]

ID_RULE = (
    "paragraph id = the corpus record's own id where it has one (renamed only when taken or unusable: renamed_ids), "
    "else f'{slug(title)}-{sha1(title + chr(10) + text)[:12]}' where text = sentences joined with a "
    "space where neither side has whitespace, stripped; slug = NFKD->ASCII, lower, non-alnum runs -> '-', <= 40 chars"
)
QUESTION_ID_KEYS = ("supporting_ids", "context_ids")  # a question's metadata that names paragraphs by id


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
    corpus_ids_kept: int = Field(default=0, description="Documents under the id their corpus record gave them.")
    corpus_ids_renamed: int = Field(default=0, description="Corpus ids changed or merged (see `renamed_ids`).")


@pydantic_dataclass
class RenamedId:
    """A corpus record's own id that preparation changed: manifest.json's "renamed_ids" (original -> new)."""

    original_id: str = Field(description="The id the input gave the passage.")
    id: str = Field(description="The passage's id in corpus.jsonl and the index.")
    reason: str = Field(description="'duplicate id', 'unusable id' or 'same passage as <id>'.")
    where: str = Field(description="file:line of the record.")


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
    """Collects paragraphs (deduplicated by (title, text)) and questions (unique ids) across input files; `finish`
    gives the corpus under its final ids (a corpus's own ids, see the module docstring) and the questions."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.docs: dict[str, Document] = {}
        """Paragraphs under their generated ids (the key while loading), in the order first seen."""
        self.questions: dict[str, QAExample] = {}
        self.stats = LoadStats()
        self.counts = self.stats.counts
        self.sources: list[SourceInfo] = []
        self.own_ids: dict[str, list[tuple[object, str, str]]] = {}
        """generated id -> the ids corpus records gave that paragraph: (raw id, file:line, file stem), in order."""
        self.renamed: list[RenamedId] = []

    def add_paragraph(
        self, title: object, text: str, where: str, src: SourceInfo, own_id: object = None
    ) -> str | None:
        """Add one paragraph occurrence, `own_id` the id its corpus record gave it (None: none); returns its
        generated id (`finish` maps it to the final one), or None for an empty paragraph (skipped and counted)."""
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
        if own_id is not None:
            self.own_ids.setdefault(pid, []).append((own_id, where, src.path.stem))
        return pid

    def finish(self) -> tuple[list[Document], list[QAExample]]:
        """The corpus under its final ids and the questions, their paragraph ids mapped to those; fills `renamed`
        and the id counts. Paragraphs without an own id keep their generated id; own ids are settled in the order
        the paragraphs were first seen."""
        self.renamed = []
        taken = {pid for pid in self.docs if pid not in self.own_ids}  # generated ids never change
        claimed = {i for owns in self.own_ids.values() if (i := _usable_id(owns[0][0])) is not None}
        final: dict[str, str] = {}
        docs: list[Document] = []
        kept = 0
        for pid, doc in self.docs.items():
            new_id, original = self._settle(pid, taken, claimed)
            taken.add(new_id)
            final[pid] = new_id
            kept += pid in self.own_ids and original is None
            docs.append(doc if new_id == pid and original is None
                        else doc.model_copy(update={"id": new_id, "original_id": original}))
        self.counts.corpus_ids_kept = kept
        self.counts.corpus_ids_renamed = len(self.renamed)
        questions = list(self.questions.values())
        if any(pid != new for pid, new in final.items()):
            aliases = {**{r.original_id: r.id for r in self.renamed if r.reason != "duplicate id"}, **final}
            questions = [self._remap(q, aliases) for q in questions]
        return docs, questions

    def _settle(self, pid: str, taken: set[str], claimed: set[str]) -> tuple[str, str | None]:
        """(final id, original id where it changed) of the paragraph `pid`, given the ids `taken` so far and those
        `claimed` as own ids (a renamed id takes none of them); records what changed in `renamed`."""
        owns = self.own_ids.get(pid)
        if not owns:
            return pid, None
        (raw, where, stem), *others = owns
        first = _usable_id(raw)
        if first is None:
            new_id, original = pid, _shown_id(raw)
            self.renamed.append(RenamedId(original_id=original, id=new_id, reason="unusable id", where=where))
        elif first in taken:
            new_id, original, n = f"{stem}:{first}", first, 1
            while new_id in taken or new_id in claimed:
                n += 1
                new_id = f"{stem}:{first}#{n}"
            self.renamed.append(RenamedId(original_id=original, id=new_id, reason="duplicate id", where=where))
        else:
            new_id, original = first, None
        seen = {_shown_id(raw)}
        for other, other_where, _ in others:
            shown = _shown_id(other)
            if shown not in seen:
                seen.add(shown)
                self.renamed.append(RenamedId(original_id=shown, id=new_id, where=other_where,
                                              reason=f"same passage as {_shown_id(raw)}"))
        return new_id, original

    @staticmethod
    def _remap(q: QAExample, aliases: dict[str, str]) -> QAExample:
        meta = dict(q.metadata)
        for key in QUESTION_ID_KEYS:
            if isinstance(meta.get(key), list):
                meta[key] = [aliases.get(i, i) if isinstance(i, str) else i for i in meta[key]]
        return q.model_copy(update={"metadata": meta})

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


def _usable_id(raw: object) -> str | None:
    """A corpus record's id as the corpus keeps it (a string, an integer as its decimal string), or None where it
    cannot be one: empty, with control characters (a newline, a tab), or another JSON type."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return None
    s = str(raw)
    return s if s.strip() and s.isprintable() else None


def _shown_id(raw: object) -> str:
    """The id a record gave, as the manifest writes it (JSON for what is not a string)."""
    return raw if isinstance(raw, str) else json.dumps(raw)
