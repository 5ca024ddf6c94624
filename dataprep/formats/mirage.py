"""MIRAGE (Xiong et al., 2024): the medical RAG benchmark's multiple-choice questions.

benchmark.json is one object {"<dataset>": {"<qid>": {"question", "options": {"A": ..., ...}, "answer": "A"}}}
over MMLU-Med, MedQA-US, MedMCQA, PubMedQA* and BioASQ-Y/N; JSON-lines variants hold one flattened question per
record. The question text gets its options appended ("Options:\\nA. ..."); the gold answers are the letter, "A. text"
and the text; `metadata.multiple_choice` marks the set for the judge-only scoring of evaluation. No paragraphs:
MIRAGE's corpora (PubMed, StatPearls, textbooks, Wikipedia) are prepared separately.
"""

from __future__ import annotations

import hashlib

from dataprep.builder import Builder, SourceInfo
from dataprep.rows import fail, require_object
from s3core.types import QAExample

__all__ = ["parse_mirage"]


def _question_text(question: str, options: dict[str, str]) -> str:
    lines = [question.strip(), "Options:"]
    lines += [f"{k}. {v}" for k, v in options.items()]
    return "\n".join(lines)


def parse_mirage(b: Builder, record: object, where: str, src: SourceInfo) -> None:
    """MIRAGE benchmark.json: {"<dataset>": {"<qid>": {question, options{A..}, answer letter}}}."""
    obj = require_object(record, where, "the MIRAGE benchmark {dataset: {qid: question}}")
    if "question" in obj or "Question" in obj:  # one flattened question per record (JSON-lines variants)
        obj = {str(obj.get("dataset", "mirage")): {str(obj.get("id", "")): obj}}
    for sub, items in obj.items():
        if not isinstance(items, dict):
            raise fail(where, f"MIRAGE dataset {sub!r} must map question ids to questions")
        for qid, q in items.items():
            w = f"{where} ({sub}/{qid})"
            if not isinstance(q, dict):
                raise fail(w, "a MIRAGE question must be an object")
            question, options, letter = q.get("question"), q.get("options"), q.get("answer")
            if not isinstance(question, str) or not question.strip():
                raise fail(w, "missing 'question'")
            if not isinstance(options, dict) or not options or not all(isinstance(v, str) for v in options.values()):
                raise fail(w, "'options' must be a non-empty {letter: text} object")
            if not isinstance(letter, str) or letter.strip() not in options:
                raise fail(w, f"'answer' must be one of the option letters {sorted(options)}, got {letter!r}")
            letter = letter.strip()
            text = options[letter].strip()
            golds = [letter, f"{letter}. {text}", text]
            b.add_question(
                QAExample(
                    id=f"{sub}-{qid}" if qid else f"{sub}-{hashlib.sha1(question.encode()).hexdigest()[:12]}",
                    question=_question_text(question, options),
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
