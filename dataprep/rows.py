"""The fields a raw question row has in every format: question text, question id, gold answers.

`add_question_row` reads a question-only row in any of the common layouts — FlashRAG's {id, question,
golden_answers, metadata}, the qa500 samples' {id, Question, answer}, NQ-open's {question, answer}, PopQA's
{id, question, possible_answers}, Natural Questions' short_answers — into the builder; `parse_question_row` is
the record parser of the question-only formats. Errors name the file and line (`where`).
"""

from __future__ import annotations

import hashlib

from dataprep.answers import parse_answers
from dataprep.builder import Builder, SourceInfo
from s3core.errors import DataFormatError
from s3core.io import JsonObject
from s3core.types import QAExample

__all__ = ["add_question_row", "fail", "parse_question_row", "question_id", "question_text", "require_object"]

# the answer fields of the question-only layouts, in order of preference: the first with a non-empty answer wins
_ANSWER_KEYS = ("golden_answers", "answers", "answer", "Answer", "possible_answers", "short_answers")


def fail(where: str, msg: str) -> DataFormatError:
    """The error for a bad record: `where` is "file:line" (and the field or sub-record, when useful)."""
    return DataFormatError(f"{where}: {msg}")


def require_object(obj: object, where: str, what: str) -> JsonObject:
    if not isinstance(obj, dict):
        raise fail(where, f"expected a JSON object ({what}), got {type(obj).__name__}")
    return obj


def question_text(row: JsonObject, where: str) -> str:
    q = row.get("question", row.get("Question"))
    if not isinstance(q, str) or not q.strip():
        if "question" not in row and "Question" not in row and {"title", "text", "contents", "paragraph_text"} & set(row):
            # a corpus row missing its text, not a question row
            raise fail(where, f"corpus row without its text (keys: {sorted(row)[:12]}): a corpus row needs "
                              "'contents', or 'title' with 'text'")
        raise fail(where, f"row has no 'question' text (keys: {sorted(row)[:12]}); a corpus row needs 'contents', "
                          "or 'title' with 'text'")
    return q.strip()


def question_id(row: JsonObject, fmt: str, question: str) -> str:
    """The source's own id, else f"{fmt}-{sha1(question)[:12]}" (see dataprep.builder)."""
    for key in ("_id", "id", "example_id", "QuestionId", "qid", "question_id"):
        v = row.get(key)
        if v is not None and str(v).strip() != "":
            return str(v).strip()
    return f"{fmt}-{hashlib.sha1(question.encode()).hexdigest()[:12]}"


def add_question_row(b: Builder, row: JsonObject, where: str, src: SourceInfo) -> None:
    """A question-only row: {"question"|"Question", one of the answer keys, optional id / metadata}."""
    question = question_text(row, where)
    answers: list[str] = []
    for key in _ANSWER_KEYS:
        if row.get(key) is not None:
            answers = parse_answers(row[key], f"{where} ({key})")
            if answers:
                break
    if not answers:  # scored against nothing, it would spend a generator call and fail its row in every run
        raise fail(where, f"question row without an answer (keys: {sorted(row)[:12]}): give 'golden_answers', a list "
                          "of the accepted answers")
    meta: JsonObject = {}
    if isinstance(row.get("metadata"), dict):
        meta.update(row["metadata"])
    meta.setdefault("dataset", b.fmt)
    q = QAExample(id=question_id(row, b.fmt, question), question=question, golden_answers=answers, metadata=meta)
    b.add_question(q, src)


def parse_question_row(b: Builder, record: object, where: str, src: SourceInfo) -> None:
    """The record parser of the question-only formats (FlashRAG, PopQA, Bamboogle): one question per record."""
    add_question_row(b, require_object(record, where, "a FlashRAG question"), where, src)
