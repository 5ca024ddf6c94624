"""Raw QA / corpus formats -> (corpus, questions) in the FlashRAG shape, and `prepare` for `s3 data prepare`.

Every question becomes a `QAExample` {"id", "question", "golden_answers", "metadata"}; formats that carry
paragraphs (HotpotQA, 2WikiMultihopQA, MuSiQue, corpus files) also give `Document`s, with the gold supporting
paragraphs of each question in `metadata["supporting_ids"]` and its whole candidate set in
`metadata["context_ids"]`.

Readers accept a JSON array, JSON-lines or a single JSON object whatever the file's extension, and ignore fields
they do not use. Every input file of a format may also be a *corpus file*, merged into the same corpus:
a HippoRAG corpus (a dict title -> [sentences], or a list of {"title", "text"}) or a FlashRAG / DPR corpus
(lines {"id", "contents"} or {"id", "title", "text"}). FlashRAG's own copies of HotpotQA / 2Wiki / MuSiQue, which
keep the raw `context` / `paragraphs` inside `metadata`, give the same corpus and ids as the raw files.

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

import ast
import hashlib
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from s3core.corpus import read_questions, write_corpus, write_questions
from s3core.errors import DataFormatError
from s3core.io import file_sha256
from s3core.types import Document, QAExample

__all__ = [
    "CORPUS_FILE",
    "FORMATS",
    "MANIFEST_FILE",
    "QUESTIONS_FILE",
    "DataFormat",
    "LoadedData",
    "Manifest",
    "iter_records",
    "join_sentences",
    "load",
    "load_prepared",
    "paragraph_id",
    "prepare",
    "read_flashrag_corpus",
    "read_hipporag_corpus",
]

CORPUS_FILE = "corpus.jsonl"
QUESTIONS_FILE = "questions.jsonl"
MANIFEST_FILE = "manifest.json"

ID_RULE = (
    "paragraph id = f'{slug(title)}-{sha1(title + chr(10) + text)[:12]}' where text = sentences joined with a "
    "space where neither side has whitespace, stripped; slug = NFKD->ASCII, lower, non-alnum runs -> '-', <= 40 chars"
)


# --------------------------------------------------------------------------------------------- reading files


def _where(path: Path, lineno: int) -> str:
    return f"{path}:{lineno}"


def iter_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield `(line number, record)` from a JSON array, a JSON-lines file or a single JSON document.

    The format is sniffed from the content, never the extension. JSON-lines files are streamed. Raises
    DataFormatError naming the file and line on a missing file or malformed JSON.
    """
    p = Path(path)
    if p.is_dir():
        hint = sorted(x.name for x in p.iterdir() if x.suffix in (".json", ".jsonl"))
        found = f" (found: {', '.join(hint)})" if hint else ""
        raise DataFormatError(f"{p} is a directory; pass its data files with --input{found}")
    if not p.is_file():
        raise DataFormatError(f"input file not found: {p}")
    lineno = 0
    try:
        with p.open("r", encoding="utf-8") as fh:
            first = ""
            while chunk := fh.read(1 << 16):
                stripped = chunk.lstrip(_JSON_WS + "\ufeff")
                if stripped:
                    first = stripped[0]
                    break
            if not first:
                raise DataFormatError(f"{p}: the file is empty")
            if first not in "[{":
                raise DataFormatError(f"{p}: expected JSON (an array, JSON lines or an object), found {first!r}")
            fh.seek(0)
            if first == "{":
                # JSON lines when the first non-empty line is a whole object; else one (pretty-printed) object
                first_line = ""
                for n, line in enumerate(fh, start=1):
                    if line.strip():
                        first_line, lineno = line, n
                        break
                try:
                    obj = json.loads(first_line)
                except json.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict):
                    yield lineno, obj
                    for n, line in enumerate(fh, start=lineno + 1):
                        lineno = n
                        if not line.strip():
                            continue
                        try:
                            rec = json.loads(line)
                        except json.JSONDecodeError as e:
                            raise DataFormatError(f"{p}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
                        yield lineno, rec
                    return
                fh.seek(0)
            text = fh.read().lstrip("\ufeff")
    except UnicodeDecodeError:
        raise _utf8_error(p) from None
    yield from _iter_json_document(p, text)


def _utf8_error(p: Path) -> DataFormatError:
    """Locate the first byte that is not UTF-8 (error path only: reads the file as bytes)."""
    raw = p.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = 1 + raw.count(b"\n", 0, e.start)
        return DataFormatError(f"{p}:{line}: not UTF-8 text ({e.reason} at byte {e.start})")
    return DataFormatError(f"{p}: not UTF-8 text")


_JSON_WS = " \t\r\n"


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _JSON_WS:
        i += 1
    return i


def _decode_error(p: Path, text: str, e: json.JSONDecodeError) -> DataFormatError:
    # an error at the very end (a truncated file) points at the last line that has content
    last = 1 + text.rstrip().count("\n")
    return DataFormatError(f"{p}:{min(e.lineno, last)}: not valid JSON ({e.msg} at column {e.colno})")


def _iter_json_document(p: Path, text: str) -> Iterator[tuple[int, Any]]:
    """A whole-file JSON document: an array yields its elements (with their line numbers), an object itself."""
    dec = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    line = 1 + text.count("\n", 0, pos)
    if text[pos] == "{":
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise _decode_error(p, text, e) from None
        if text[end:].strip():
            extra = 1 + text.count("\n", 0, end)
            raise DataFormatError(f"{p}:{extra}: unexpected data after the JSON object")
        yield line, obj
        return
    # an array: decode element by element to know each element's line
    i = pos + 1
    last = pos
    expect_value = True
    while True:
        i = _skip_ws(text, i)
        if i >= len(text):
            raise DataFormatError(f"{p}:{1 + text.count(chr(10), 0, i)}: JSON array is not closed")
        if text[i] == "]":
            if expect_value and last != pos:
                raise DataFormatError(f"{p}:{1 + text.count(chr(10), 0, i)}: trailing comma in JSON array")
            rest = text[i + 1 :].strip()
            if rest:
                raise DataFormatError(f"{p}:{1 + text.count(chr(10), 0, i)}: unexpected data after the JSON array")
            return
        if not expect_value:
            if text[i] != ",":
                raise DataFormatError(
                    f"{p}:{1 + text.count(chr(10), 0, i)}: not valid JSON (expected ',' or ']' in the array)"
                )
            i += 1
            expect_value = True
            continue
        line += text.count("\n", last, i)
        last = i
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise _decode_error(p, text, e) from None
        yield line, obj
        expect_value = False


# ------------------------------------------------------------------------------------------------ paragraphs


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


# ------------------------------------------------------------------------------------------- the accumulator


@dataclass
class LoadStats:
    """What happened while loading: counts the manifest reports."""

    rows: int = 0
    paragraph_occurrences: int = 0
    duplicates_merged: int = 0
    empty_paragraphs_skipped: int = 0
    duplicate_questions_merged: int = 0
    question_ids_renamed: int = 0
    questions_without_answers: int = 0
    supporting_titles_missing: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_examples: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class _SourceInfo:
    path: Path
    records: int = 0
    questions: int = 0
    paragraphs: int = 0


class _Builder:
    """Collects paragraphs (deduplicated by (title, text)) and questions (unique ids) across input files."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.docs: dict[str, Document] = {}
        self.questions: dict[str, QAExample] = {}
        self.stats = LoadStats()
        self.sources: list[_SourceInfo] = []

    def add_paragraph(self, title: Any, text: str, where: str, src: _SourceInfo) -> str | None:
        title_s = "" if title is None else str(title).strip()
        text = text.strip()
        if not title_s and not text:
            self.stats.empty_paragraphs_skipped += 1
            return None
        pid = paragraph_id(title_s, text)
        self.stats.paragraph_occurrences += 1
        src.paragraphs += 1
        old = self.docs.get(pid)
        if old is None:
            self.docs[pid] = Document(id=pid, title=title_s, text=text)
        elif old.title != title_s or old.text != text:  # a 48-bit hash collision: never silently merge
            raise DataFormatError(f"{where}: paragraph id collision on {pid!r} ({old.title!r} vs {title_s!r})")
        else:
            self.stats.duplicates_merged += 1
        return pid

    def add_question(self, q: QAExample, src: _SourceInfo) -> None:
        if not q.golden_answers:
            self.stats.questions_without_answers += 1
        old = self.questions.get(q.id)
        if old is not None:
            if old.question == q.question:
                self.stats.duplicate_questions_merged += 1
                return
            base = f"{src.path.stem}:{q.id}"
            new_id, n = base, 1
            while new_id in self.questions:
                n += 1
                new_id = f"{base}#{n}"
            q = q.model_copy(update={"id": new_id, "metadata": {**q.metadata, "original_id": q.id}})
            self.stats.question_ids_renamed += 1
        self.questions[q.id] = q
        src.questions += 1

    def drop(self, reason: str, where: str) -> None:
        self.stats.dropped[reason] += 1
        ex = self.stats.dropped_examples.setdefault(reason, [])
        if len(ex) < 3:
            ex.append(where)


# ------------------------------------------------------------------------------------------- shared parsing


def _fail(where: str, msg: str) -> DataFormatError:
    return DataFormatError(f"{where}: {msg}")


def _maybe_literal_list(value: str) -> Any:
    """'["a", "b"]' or "['a', 'b']" -> list (json first, then ast.literal_eval: literals only, never code)."""
    s = value.strip()
    if not (s.startswith("[") and s.endswith("]")):
        return value
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    try:
        parsed = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value  # e.g. "[citation needed]": a plain answer that happens to be bracketed
    return parsed if isinstance(parsed, list | tuple) else value


def _answers(value: Any, where: str) -> list[str]:
    """Normalise the many shapes of gold answers into a de-duplicated list of non-empty strings."""
    if value is None:
        return []
    if isinstance(value, str):
        value = _maybe_literal_list(value)
    if isinstance(value, dict):  # TriviaQA's original {"Value", "Aliases", ...}
        items: list[Any] = []
        if "Value" in value or "value" in value:
            items.append(value.get("Value", value.get("value")))
        items.extend(value.get("Aliases", value.get("aliases", [])) or [])
        value = items
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple):
        raise _fail(where, f"gold answers must be a string or a list of strings, got {type(value).__name__}")
    out: list[str] = []
    for a in value:
        if isinstance(a, bool) or not isinstance(a, str | int | float):
            raise _fail(where, f"a gold answer must be a string, got {a!r}")
        s = str(a).strip()
        if s and s not in out:
            out.append(s)
    return out


def _require_dict(obj: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(where, f"expected a JSON object ({what}), got {type(obj).__name__}")
    return obj


def _question_text(row: dict[str, Any], where: str) -> str:
    q = row.get("question", row.get("Question"))
    if not isinstance(q, str) or not q.strip():
        raise _fail(where, f"row has no 'question' text (keys: {sorted(row)[:12]})")
    return q.strip()


def _question_id(row: dict[str, Any], fmt: str, question: str) -> str:
    for key in ("_id", "id", "example_id", "QuestionId", "qid", "question_id"):
        v = row.get(key)
        if v is not None and str(v).strip() != "":
            return str(v).strip()
    return f"{fmt}-{hashlib.sha1(question.encode()).hexdigest()[:12]}"


_ANSWER_KEYS = ("golden_answers", "answers", "answer", "Answer", "possible_answers", "short_answers")


def _simple_question(row: dict[str, Any], fmt: str, where: str, metadata: dict[str, Any] | None = None) -> QAExample:
    """A question-only row: {"question"|"Question", one of the answer keys, optional id / metadata}."""
    question = _question_text(row, where)
    answers: list[str] = []
    for key in _ANSWER_KEYS:
        if row.get(key) is not None:
            answers = _answers(row[key], f"{where} ({key})")
            if answers:
                break
    meta: dict[str, Any] = {}
    if isinstance(row.get("metadata"), dict):
        meta.update(row["metadata"])
    meta.update(metadata or {})
    meta.setdefault("dataset", fmt)
    return QAExample(id=_question_id(row, fmt, question), question=question, golden_answers=answers, metadata=meta)


def _is_corpus_row(row: Any) -> bool:
    if not isinstance(row, dict) or "question" in row or "Question" in row:
        return False
    return "contents" in row or ("text" in row and "title" in row) or ("paragraph_text" in row and "title" in row)


def _add_corpus_row(b: _Builder, row: dict[str, Any], where: str, src: _SourceInfo) -> None:
    if "contents" in row:
        if not isinstance(row["contents"], str):
            raise _fail(where, "'contents' must be a string")
        d = Document.from_contents("x", row["contents"])
        b.add_paragraph(d.title, d.text, where, src)
        return
    text = row.get("text", row.get("paragraph_text"))
    if isinstance(text, list):
        text = join_sentences(text)
    if not isinstance(text, str):
        raise _fail(where, "corpus row 'text' must be a string or a list of sentences")
    b.add_paragraph(row.get("title"), text, where, src)


def _is_hipporag_dict_corpus(obj: Any) -> bool:
    if not isinstance(obj, dict) or not obj:
        return False
    return all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in obj.values())


def _add_hipporag_dict(b: _Builder, obj: dict[str, list[str]], where: str, src: _SourceInfo) -> None:
    for title, sentences in obj.items():
        b.add_paragraph(title, join_sentences(sentences), where, src)


# ----------------------------------------------------------------------------- formats with paragraphs


def _context_pairs(ctx: Any, where: str) -> list[tuple[str, list[str]]]:
    """HotpotQA / 2Wiki context in either layout -> [(title, sentences)]."""
    if isinstance(ctx, dict):  # Hugging Face: {"title": [...], "sentences": [[...], ...]}
        titles, sents = ctx.get("title"), ctx.get("sentences")
        if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
            raise _fail(where, "'context' must be {'title': [...], 'sentences': [[...], ...]} of equal lengths")
        pairs = list(zip(titles, sents, strict=True))
    elif isinstance(ctx, list):  # original: [[title, [sentences]], ...]
        pairs = []
        for item in ctx:
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise _fail(where, f"a 'context' entry must be [title, [sentences]], got {str(item)[:80]}")
            pairs.append((item[0], item[1]))
    else:
        raise _fail(where, f"'context' must be a list or a dict, got {type(ctx).__name__}")
    out: list[tuple[str, list[str]]] = []
    for title, sentences in pairs:
        if isinstance(sentences, str):
            sentences = [sentences]
        if not isinstance(title, str) or not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise _fail(where, "a context paragraph must be a title string and a list of sentence strings")
        out.append((title, sentences))
    return out


def _supporting_facts(sf: Any, where: str) -> list[tuple[str, int]]:
    if sf is None:
        return []
    if isinstance(sf, dict):  # Hugging Face: {"title": [...], "sent_id": [...]}
        titles, ids = sf.get("title", []), sf.get("sent_id", [])
        if not isinstance(titles, list) or not isinstance(ids, list) or len(titles) != len(ids):
            raise _fail(where, "'supporting_facts' must be {'title': [...], 'sent_id': [...]} of equal lengths")
        pairs = list(zip(titles, ids, strict=True))
    elif isinstance(sf, list):
        pairs = []
        for item in sf:
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise _fail(where, f"a 'supporting_facts' entry must be [title, sentence index], got {str(item)[:80]}")
            pairs.append((item[0], item[1]))
    else:
        raise _fail(where, f"'supporting_facts' must be a list or a dict, got {type(sf).__name__}")
    out = []
    for title, idx in pairs:
        if not isinstance(title, str) or isinstance(idx, bool) or not isinstance(idx, int):
            raise _fail(where, f"bad supporting fact {[title, idx]!r}: expected [title, sentence index]")
        out.append((title, idx))
    return out


def _multihop_question(b: _Builder, row: dict[str, Any], where: str, src: _SourceInfo, extra_keys: tuple[str, ...]) -> None:
    """HotpotQA / 2WikiMultihopQA with context (both layouts)."""
    question = _question_text(row, where)
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
            b.stats.supporting_titles_missing += 1
            continue
        supporting.extend(i for i in ids if i not in supporting)
    meta: dict[str, Any] = {
        "dataset": b.fmt,
        "supporting_ids": supporting,
        "supporting_titles": sup_titles,
        "supporting_facts": [[t, i] for t, i in facts],
        "context_ids": context_ids,
    }
    for key in extra_keys:
        if key in row and row[key] is not None:
            meta[key] = row[key]
    answers = _answers(row.get("answer"), f"{where} (answer)")
    b.add_question(
        QAExample(id=_question_id(row, b.fmt, question), question=question, golden_answers=answers, metadata=meta), src
    )


def _unwrap_flashrag(row: dict[str, Any], key: str) -> dict[str, Any]:
    """FlashRAG's copies of HotpotQA / 2Wiki / MuSiQue keep the raw fields (`context`, `paragraphs`, ...) in
    `metadata`: lift them up so the paragraphs become corpus documents."""
    meta = row.get("metadata")
    if key in row or not isinstance(meta, dict) or meta.get(key) is None:
        return row
    lifted = dict(meta)
    lifted.update({k: row[k] for k in ("id", "_id", "question") if k in row})
    if "golden_answers" in row:
        lifted["answer"] = row["golden_answers"]
    return lifted


def _hotpotqa_record(b: _Builder, row: Any, where: str, src: _SourceInfo) -> None:
    row = _unwrap_flashrag(_require_dict(row, where, "a HotpotQA question"), "context")
    if "context" not in row and ("Question" in row or "golden_answers" in row):
        b.add_question(_simple_question(row, b.fmt, where), src)  # FlashRAG-shaped HotpotQA: questions only
        return
    if row.get("context") is None:
        raise _fail(where, "a HotpotQA row needs 'context' (the distractor paragraphs)")
    _multihop_question(b, row, where, src, ("type", "level"))


_TWOWIKI_ORIGINAL_KEYS = ("_id", "supporting_facts", "evidences", "entity_ids", "type")


def _twowiki_record(b: _Builder, row: Any, where: str, src: _SourceInfo) -> None:
    row = _unwrap_flashrag(_require_dict(row, where, "a 2WikiMultihopQA question"), "context")
    if row.get("context") is None:
        if any(k in row for k in _TWOWIKI_ORIGINAL_KEYS):
            b.drop("2WikiMultihopQA row without 'context'", where)
            return
        b.add_question(_simple_question(row, b.fmt, where), src)  # question-only layouts (FlashRAG, qa500)
        return
    _multihop_question(b, row, where, src, ("type", "evidences"))


def _musique_record(b: _Builder, row: Any, where: str, src: _SourceInfo) -> None:
    row = _unwrap_flashrag(_require_dict(row, where, "a MuSiQue question"), "paragraphs")
    if "paragraphs" not in row:
        if "Question" in row or "golden_answers" in row:
            b.add_question(_simple_question(row, b.fmt, where), src)
            return
        raise _fail(where, "a MuSiQue row needs 'paragraphs'")
    question = _question_text(row, where)
    paras = row["paragraphs"]
    if not isinstance(paras, list):
        raise _fail(where, "'paragraphs' must be a list of {title, paragraph_text, is_supporting}")
    context_ids: list[str] = []
    supporting: list[str] = []
    for p in paras:
        if not isinstance(p, dict) or not isinstance(p.get("paragraph_text"), str):
            raise _fail(where, "each paragraph needs 'title' and 'paragraph_text' strings")
        pid = b.add_paragraph(p.get("title", ""), p["paragraph_text"], where, src)
        if pid is None:
            continue
        context_ids.append(pid)
        if p.get("is_supporting") is True and pid not in supporting:
            supporting.append(pid)
    answers = _answers(row.get("answer"), f"{where} (answer)")
    answers += [a for a in _answers(row.get("answer_aliases"), f"{where} (answer_aliases)") if a not in answers]
    qid = _question_id(row, b.fmt, question)
    meta: dict[str, Any] = {
        "dataset": b.fmt,
        "supporting_ids": supporting,
        "context_ids": context_ids,
        "hops": int(qid.split("hop")[0]) if re.match(r"^\d+hop", qid) else None,
    }
    for key in ("answerable", "question_decomposition"):
        if key in row:
            meta[key] = row[key]
    b.add_question(QAExample(id=qid, question=question, golden_answers=answers, metadata=meta), src)


# ------------------------------------------------------------------------------------ question-only formats


def _flashrag_record(b: _Builder, row: Any, where: str, src: _SourceInfo) -> None:
    row = _require_dict(row, where, "a FlashRAG question")
    b.add_question(_simple_question(row, b.fmt, where), src)


def _odqa_record(dataset_names: tuple[str, ...]) -> Callable[[_Builder, Any, str, _SourceInfo], None]:
    """NQ / TriviaQA rows; a mixed file's `dataset` field routes rows to the loader they belong to."""

    def parse(b: _Builder, row: Any, where: str, src: _SourceInfo) -> None:
        row = _require_dict(row, where, f"a {b.fmt} question")
        ds = row.get("dataset")
        if isinstance(ds, str) and ds.strip() and ds.strip().lower() not in dataset_names:
            b.drop(f"dataset={ds!r} row (not {b.fmt}) in a mixed file", where)
            return
        b.add_question(_simple_question(row, b.fmt, where), src)

    return parse


def _mirage_question_text(question: str, options: dict[str, str]) -> str:
    lines = [question.strip(), "Options:"]
    lines += [f"{k}. {v}" for k, v in options.items()]
    return "\n".join(lines)


def _mirage_record(b: _Builder, obj: Any, where: str, src: _SourceInfo) -> None:
    """MIRAGE benchmark.json: {"<dataset>": {"<qid>": {question, options{A..}, answer letter}}}."""
    obj = _require_dict(obj, where, "the MIRAGE benchmark {dataset: {qid: question}}")
    if "question" in obj or "Question" in obj:  # one flattened question per record (JSON-lines variants)
        obj = {str(obj.get("dataset", "mirage")): {str(obj.get("id", "")): obj}}
    for sub, items in obj.items():
        if not isinstance(items, dict):
            raise _fail(where, f"MIRAGE dataset {sub!r} must map question ids to questions")
        for qid, q in items.items():
            w = f"{where} ({sub}/{qid})"
            if not isinstance(q, dict):
                raise _fail(w, "a MIRAGE question must be an object")
            question, options, letter = q.get("question"), q.get("options"), q.get("answer")
            if not isinstance(question, str) or not question.strip():
                raise _fail(w, "missing 'question'")
            if not isinstance(options, dict) or not options or not all(isinstance(v, str) for v in options.values()):
                raise _fail(w, "'options' must be a non-empty {letter: text} object")
            if not isinstance(letter, str) or letter.strip() not in options:
                raise _fail(w, f"'answer' must be one of the option letters {sorted(options)}, got {letter!r}")
            letter = letter.strip()
            text = options[letter].strip()
            golds = [letter, f"{letter}. {text}", text]
            b.add_question(
                QAExample(
                    id=f"{sub}-{qid}" if qid else f"{sub}-{hashlib.sha1(question.encode()).hexdigest()[:12]}",
                    question=_mirage_question_text(question, options),
                    golden_answers=list(dict.fromkeys(g for g in golds if g)),
                    metadata={
                        "dataset": "mirage",
                        "subset": sub,
                        "question_only": question.strip(),
                        "options": options,
                        "answer": letter,
                        "multiple_choice": True,
                    },
                ),
                src,
            )


# ------------------------------------------------------------------------------------------------ registry


RecordParser = Callable[[_Builder, Any, str, _SourceInfo], None]


@dataclass(frozen=True)
class DataFormat:
    """One raw format: how to parse a question record, and whether it carries paragraphs."""

    name: str
    description: str
    parse: RecordParser = field(repr=False)
    carries_paragraphs: bool = False

    def load(self, inputs: Iterable[str | Path]) -> LoadedData:
        return load(self.name, inputs)


FORMATS: dict[str, DataFormat] = {
    "hotpotqa": DataFormat(
        "hotpotqa",
        "HotpotQA distractor: original (_id, context [[title,[sents]]]) or Hugging Face layout; + corpus files",
        _hotpotqa_record,
        carries_paragraphs=True,
    ),
    "2wiki": DataFormat(
        "2wiki",
        "2WikiMultihopQA (rows without context are dropped); question-only layouts accepted too",
        _twowiki_record,
        carries_paragraphs=True,
    ),
    "musique": DataFormat(
        "musique", "MuSiQue (paragraphs with is_supporting; answer + answer_aliases)", _musique_record, carries_paragraphs=True
    ),
    "flashrag": DataFormat(
        "flashrag", "FlashRAG question jsonl {id, question, golden_answers}; FlashRAG corpus files merge in", _flashrag_record
    ),
    "nq": DataFormat("nq", "Natural Questions (open): FlashRAG, NQ-open, qa500 or mixed odqa files", _odqa_record(("nq",))),
    "triviaqa": DataFormat(
        "triviaqa", "TriviaQA: aliases as a list, a stringified list or {Value, Aliases}", _odqa_record(("trivia", "triviaqa", "tqa"))
    ),
    "popqa": DataFormat("popqa", "PopQA: possible_answers (list or stringified list), FlashRAG or qa500 layouts", _flashrag_record),
    "bamboogle": DataFormat("bamboogle", "Bamboogle: [{id, Question, answer}] or FlashRAG jsonl", _flashrag_record),
    "mirage": DataFormat(
        "mirage", "MIRAGE medical multiple choice: {dataset: {qid: {question, options, answer}}}", _mirage_record
    ),
}


# ------------------------------------------------------------------------------------------------- loading


@dataclass
class LoadedData:
    """The result of loading one or more files: unpacks as `corpus, questions = load(...)`."""

    corpus: list[Document]
    questions: list[QAExample]
    stats: LoadStats
    sources: list[_SourceInfo] = field(default_factory=list, repr=False)

    def __iter__(self) -> Iterator[Any]:
        yield self.corpus
        yield self.questions


def _get_format(fmt: str) -> DataFormat:
    spec = FORMATS.get(fmt)
    if spec is None:
        raise DataFormatError(f"unknown data format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    return spec


def _load_file(b: _Builder, spec: DataFormat, path: Path) -> None:
    src = _SourceInfo(path=path)
    b.sources.append(src)
    for lineno, rec in iter_records(path):
        where = _where(path, lineno)
        src.records += 1
        b.stats.rows += 1
        if _is_corpus_row(rec):
            _add_corpus_row(b, rec, where, src)
        elif spec.name != "mirage" and _is_hipporag_dict_corpus(rec):
            _add_hipporag_dict(b, rec, where, src)
        else:
            spec.parse(b, rec, where, src)


def load(fmt: str, inputs: Iterable[str | Path]) -> LoadedData:
    """Load and merge input files of one format into (corpus, questions); see the module docstring for the rules."""
    spec = _get_format(fmt)
    paths = [Path(p) for p in inputs]
    if not paths:
        raise DataFormatError("no input files given")
    b = _Builder(spec.name)
    for p in paths:
        _load_file(b, spec, p)
    return LoadedData(corpus=list(b.docs.values()), questions=list(b.questions.values()), stats=b.stats, sources=b.sources)


def read_hipporag_corpus(path: str | Path) -> list[Document]:
    """A HippoRAG corpus file (dict title -> sentences, or a list of {"title", "text"}) as deduplicated Documents."""
    return _read_corpus_only(path)


def read_flashrag_corpus(path: str | Path) -> list[Document]:
    """A FlashRAG / DPR corpus ({"id","contents"} or {"id","title","text"} lines) with stable, hash-derived ids.

    To keep a corpus's own ids instead, read it with `s3core.corpus.iter_corpus`.
    """
    return _read_corpus_only(path)


def _read_corpus_only(path: str | Path) -> list[Document]:
    p = Path(path)
    b = _Builder("corpus")
    src = _SourceInfo(path=p)
    for lineno, rec in iter_records(p):
        where = _where(p, lineno)
        if _is_corpus_row(rec):
            _add_corpus_row(b, rec, where, src)
        elif _is_hipporag_dict_corpus(rec):
            _add_hipporag_dict(b, rec, where, src)
        else:
            keys = sorted(rec)[:10] if isinstance(rec, dict) else type(rec).__name__
            raise _fail(where, f"not a corpus record (need 'contents', or 'title' + 'text'; got {keys})")
    return list(b.docs.values())


# ------------------------------------------------------------------------------------------------ preparing


class SourceFile(BaseModel):
    path: str
    sha256: str
    bytes: int
    records: int = Field(description="Top-level records read (lines, array elements, or 1 for a single object).")
    questions: int = Field(description="Questions this file contributed (after merging duplicates).")
    paragraphs: int = Field(description="Paragraph occurrences in this file (before deduplication).")


class DroppedRows(BaseModel):
    reason: str
    count: int
    examples: list[str] = Field(default_factory=list, description="First few file:line locations.")


class ManifestCounts(BaseModel):
    questions: int
    paragraphs: int = Field(description="Distinct paragraphs written to the corpus.")
    paragraph_occurrences: int
    duplicates_merged: int = Field(description="Paragraph occurrences that were an already-seen (title, text).")
    empty_paragraphs_skipped: int = 0
    duplicate_questions_merged: int = 0
    question_ids_renamed: int = 0
    questions_without_answers: int = 0
    questions_with_supporting_ids: int = 0
    supporting_titles_missing: int = 0
    dropped: int = 0


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
    sources: list[SourceFile]


def prepare(fmt: str, inputs: list[Path], out_dir: str | Path) -> Manifest:
    """Load `inputs` (one format, merged) and write corpus.jsonl (if any paragraphs), questions.jsonl, manifest.json."""
    data = load(fmt, inputs)
    out = Path(out_dir)
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
        counts=ManifestCounts(
            questions=len(data.questions),
            paragraphs=len(data.corpus),
            paragraph_occurrences=st.paragraph_occurrences,
            duplicates_merged=st.duplicates_merged,
            empty_paragraphs_skipped=st.empty_paragraphs_skipped,
            duplicate_questions_merged=st.duplicate_questions_merged,
            question_ids_renamed=st.question_ids_renamed,
            questions_without_answers=st.questions_without_answers,
            questions_with_supporting_ids=sum(1 for q in data.questions if q.metadata.get("supporting_ids")),
            supporting_titles_missing=st.supporting_titles_missing,
            dropped=sum(st.dropped.values()),
        ),
        dropped=[
            DroppedRows(reason=r, count=c, examples=st.dropped_examples.get(r, [])) for r, c in sorted(st.dropped.items())
        ],
        sources=[
            SourceFile(
                path=str(s.path.resolve()),
                sha256=file_sha256(s.path),
                bytes=s.path.stat().st_size,
                records=s.records,
                questions=s.questions,
                paragraphs=s.paragraphs,
            )
            for s in data.sources
        ],
    )
    tmp = out / (MANIFEST_FILE + ".tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / MANIFEST_FILE)
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
