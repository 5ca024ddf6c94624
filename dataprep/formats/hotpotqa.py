"""HotpotQA (Yang et al., 2018), distractor setting: each question with its 10 candidate paragraphs.

Two layouts, which give the same corpus, ids and questions:
- the original release: [{"_id", "question", "answer", "type", "level", "supporting_facts": [[title, sent_idx]],
  "context": [[title, [sentences]]]}] (a JSON array);
- the Hugging Face `hotpot_qa` export: {"id", ..., "supporting_facts": {"title": [...], "sent_id": [...]},
  "context": {"title": [...], "sentences": [[...]]}} (JSON lines).
FlashRAG's copy (fields inside `metadata`) is lifted back to these; a FlashRAG row without paragraphs is read as a
question-only row.

The context paragraphs become corpus documents; `metadata["supporting_ids"]` holds the paragraphs whose titles the
supporting facts name and `metadata["context_ids"]` the whole candidate set. 2WikiMultihopQA uses the same layout
(`add_multihop_question`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprep.answers import parse_answers
from dataprep.builder import Builder, SourceInfo, join_sentences
from dataprep.formats.flashrag import lift_raw_fields
from dataprep.rows import add_question_row, fail, question_id, question_text, require_object
from s3core.io import JsonObject
from s3core.types import QAExample

__all__ = ["add_multihop_question", "parse_hotpotqa"]


@dataclass(frozen=True)
class _TitledList:
    """A field of [title, value] entries, in the original layout [[title, value], ...] or the Hugging Face one
    {"title": [...], key: [...]} (parallel lists)."""

    name: str
    key: str
    hf_shape: str
    entry_shape: str

    def pairs(self, value: object, where: str) -> list[tuple[object, object]]:
        if isinstance(value, dict):
            titles, values = value.get("title"), value.get(self.key)
            if not isinstance(titles, list) or not isinstance(values, list) or len(titles) != len(values):
                raise fail(where, f"'{self.name}' must be {self.hf_shape} of equal lengths")
            return list(zip(titles, values, strict=True))
        if isinstance(value, list):
            out: list[tuple[object, object]] = []
            for item in value:
                if not isinstance(item, list | tuple) or len(item) != 2:
                    raise fail(where, f"a '{self.name}' entry must be {self.entry_shape}, got {str(item)[:80]}")
                out.append((item[0], item[1]))
            return out
        raise fail(where, f"'{self.name}' must be a list or a dict, got {type(value).__name__}")


_CONTEXT = _TitledList("context", "sentences", "{'title': [...], 'sentences': [[...], ...]}", "[title, [sentences]]")
_FACTS = _TitledList("supporting_facts", "sent_id", "{'title': [...], 'sent_id': [...]}", "[title, sentence index]")


def _context_pairs(ctx: object, where: str) -> list[tuple[str, list[str]]]:
    """HotpotQA / 2Wiki context in either layout -> [(title, sentences)]."""
    out: list[tuple[str, list[str]]] = []
    for title, sentences in _CONTEXT.pairs(ctx, where):
        if isinstance(sentences, str):
            sentences = [sentences]
        if not isinstance(title, str) or not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise fail(where, "a context paragraph must be a title string and a list of sentence strings")
        out.append((title, sentences))
    return out


def _supporting_facts(sf: object, where: str) -> list[tuple[str, int]]:
    """HotpotQA / 2Wiki supporting facts in either layout -> [(title, sentence index)]; absent = none."""
    if sf is None:
        return []
    if isinstance(sf, dict):  # Hugging Face: a missing list is an empty one
        sf = {"title": sf.get("title", []), "sent_id": sf.get("sent_id", [])}
    out = []
    for title, idx in _FACTS.pairs(sf, where):
        if not isinstance(title, str) or isinstance(idx, bool) or not isinstance(idx, int):
            raise fail(where, f"bad supporting fact {[title, idx]!r}: expected [title, sentence index]")
        out.append((title, idx))
    return out


def add_multihop_question(
    b: Builder, row: JsonObject, where: str, src: SourceInfo, extra_keys: tuple[str, ...]
) -> None:
    """A HotpotQA / 2WikiMultihopQA row with its context (either layout); `extra_keys` are kept in metadata."""
    question = question_text(row, where)
    pairs = _context_pairs(row["context"], where)
    facts = _supporting_facts(row.get("supporting_facts"), where)
    by_title: dict[str, list[str]] = {}
    context_ids: list[str] = []
    for title, sentences in pairs:
        pid = b.add_paragraph(title, join_sentences(sentences), where, src)
        if pid is None:
            continue
        context_ids.append(pid)
        by_title.setdefault(title.strip(), []).append(pid)
    supporting: list[str] = []
    sup_titles: list[str] = []
    for title, _ in facts:
        if title in sup_titles:
            continue
        sup_titles.append(title)
        ids = by_title.get(title.strip())
        if not ids:
            b.counts.supporting_titles_missing += 1
            continue
        supporting.extend(i for i in ids if i not in supporting)
    meta: JsonObject = {
        "dataset": b.fmt,
        "supporting_ids": supporting,
        "supporting_titles": sup_titles,
        "supporting_facts": [[t, i] for t, i in facts],
        "context_ids": context_ids,
    }
    for key in extra_keys:
        if key in row and row[key] is not None:
            meta[key] = row[key]
    answers = parse_answers(row.get("answer"), f"{where} (answer)")
    b.add_question(
        QAExample(id=question_id(row, b.fmt, question), question=question, golden_answers=answers, metadata=meta), src
    )


def parse_hotpotqa(b: Builder, record: object, where: str, src: SourceInfo) -> None:
    row = lift_raw_fields(require_object(record, where, "a HotpotQA question"), "context")
    if "context" not in row and ("Question" in row or "golden_answers" in row):
        add_question_row(b, row, where, src)  # FlashRAG-shaped HotpotQA: questions only
        return
    if row.get("context") is None:
        raise fail(where, "a HotpotQA row needs 'context' (the distractor paragraphs)")
    add_multihop_question(b, row, where, src, ("type", "level"))
