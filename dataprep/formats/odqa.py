"""Question-only open-domain QA files: Natural Questions, TriviaQA, PopQA, Bamboogle.

These carry no paragraphs (the corpus is a Wikipedia dump, prepared separately), so each row is one question:
- Natural Questions (Kwiatkowski et al., 2019) in its open form (NQ-open, Lee et al., 2019), FlashRAG's or the
  qa500 samples' layouts, and the mixed odqa.json files that interleave NQ and TriviaQA rows;
- TriviaQA (Joshi et al., 2017): aliases as a list, a stringified list or the original {"Value", "Aliases"};
- PopQA (Mallen et al., 2023): `possible_answers` as a list or a stringified list;
- Bamboogle (Press et al., 2023): [{"id", "Question", "answer"}] or FlashRAG jsonl.
All are read by `dataprep.rows` (every answer field and id key these layouts use). In a mixed NQ / TriviaQA file
the `dataset` field routes each row to the format it belongs to: rows of the other dataset are dropped and counted.
"""

from __future__ import annotations

from dataprep.builder import Builder, SourceInfo
from dataprep.rows import add_question_row, require_object

__all__ = ["parse_nq", "parse_triviaqa"]


class _DatasetRows:
    """The record parser of a dataset that shares files with others: keeps rows whose `dataset` field (when set)
    is one of `names`."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def __call__(self, b: Builder, record: object, where: str, src: SourceInfo) -> None:
        row = require_object(record, where, f"a {b.fmt} question")
        ds = row.get("dataset")
        if isinstance(ds, str) and ds.strip() and ds.strip().lower() not in self.names:
            b.drop(f"dataset={ds!r} row (not {b.fmt}) in a mixed file", where)
            return
        add_question_row(b, row, where, src)


parse_nq = _DatasetRows("nq")
parse_triviaqa = _DatasetRows("trivia", "triviaqa", "tqa")
