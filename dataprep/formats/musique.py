"""MuSiQue (Trivedi et al., 2022): 2-4 hop questions composed from single-hop ones, each with 20 paragraphs.

Rows {"id", "question", "answer", "answer_aliases", "answerable", "question_decomposition", "paragraphs":
[{"idx", "title", "paragraph_text", "is_supporting"}]}. The paragraphs become corpus documents; those marked
`is_supporting` are the question's `supporting_ids`; the gold answers are `answer` then its aliases; `hops` comes
from the id ("2hop__..."). FlashRAG's copy (fields inside `metadata`) is lifted back to this layout; a FlashRAG row
without paragraphs is read as a question-only row.
"""

from __future__ import annotations

import re

from dataprep.answers import parse_answers
from dataprep.builder import Builder, SourceInfo
from dataprep.formats.flashrag import lift_raw_fields
from dataprep.rows import add_question_row, fail, question_id, question_text, require_object
from s3core.io import JsonObject
from s3core.types import QAExample

__all__ = ["parse_musique"]


def parse_musique(b: Builder, record: object, where: str, src: SourceInfo) -> None:
    row = lift_raw_fields(require_object(record, where, "a MuSiQue question"), "paragraphs")
    if "paragraphs" not in row:
        if "Question" in row or "golden_answers" in row:
            add_question_row(b, row, where, src)
            return
        raise fail(where, "a MuSiQue row needs 'paragraphs'")
    question = question_text(row, where)
    paras = row["paragraphs"]
    if not isinstance(paras, list):
        raise fail(where, "'paragraphs' must be a list of {title, paragraph_text, is_supporting}")
    context_ids: list[str] = []
    supporting: list[str] = []
    for p in paras:
        if not isinstance(p, dict) or not isinstance(p.get("paragraph_text"), str):
            raise fail(where, "each paragraph needs 'title' and 'paragraph_text' strings")
        pid = b.add_paragraph(p.get("title", ""), p["paragraph_text"], where, src)
        if pid is None:
            continue
        context_ids.append(pid)
        if p.get("is_supporting") is True and pid not in supporting:
            supporting.append(pid)
    answers = parse_answers(row.get("answer"), f"{where} (answer)")
    answers += [a for a in parse_answers(row.get("answer_aliases"), f"{where} (answer_aliases)") if a not in answers]
    qid = question_id(row, b.fmt, question)
    meta: JsonObject = {
        "dataset": b.fmt,
        "supporting_ids": supporting,
        "context_ids": context_ids,
        "hops": int(qid.split("hop")[0]) if re.match(r"^\d+hop", qid) else None,
    }
    for key in ("answerable", "question_decomposition"):
        if key in row:
            meta[key] = row[key]
    b.add_question(QAExample(id=qid, question=question, golden_answers=answers, metadata=meta), src)
