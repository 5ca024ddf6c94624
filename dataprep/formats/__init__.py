"""The raw formats `s3 data prepare` reads, one module each, and their registry `FORMATS`.

Every format turns records into FlashRAG-shaped questions (and, where it carries paragraphs, corpus documents)
through a `dataprep.builder.Builder`; every input file may also hold corpus records (`corpus.py`), which merge
into the same corpus whatever the format.

    hotpotqa.py   HotpotQA            questions + paragraphs
    twowiki.py    2WikiMultihopQA     questions + paragraphs
    musique.py    MuSiQue             questions + paragraphs
    flashrag.py   FlashRAG            questions (+ its corpus files; its copies of the three above)
    odqa.py       NQ, TriviaQA, PopQA, Bamboogle: question-only open-domain QA
    mirage.py     MIRAGE              medical multiple choice
    corpus.py     HippoRAG / FlashRAG / DPR corpus files, in any format's inputs
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dataprep.builder import Builder, SourceInfo
from dataprep.formats.hotpotqa import parse_hotpotqa
from dataprep.formats.mirage import parse_mirage
from dataprep.formats.musique import parse_musique
from dataprep.formats.odqa import parse_nq, parse_triviaqa
from dataprep.formats.twowiki import parse_twowiki
from dataprep.rows import parse_question_row

__all__ = ["FORMATS", "DataFormat", "RecordParser"]

RecordParser = Callable[[Builder, object, str, SourceInfo], None]
"""Adds one record (at `where` = "file:line" of `source`) to the builder, or raises DataFormatError."""


@dataclass(frozen=True)
class DataFormat:
    """One raw format: how to parse a question record, and whether it carries paragraphs."""

    name: str
    description: str
    parse: RecordParser = field(repr=False)
    carries_paragraphs: bool = False
    hipporag_dicts: bool = True
    """Whether an object whose values are all sentence lists is a HippoRAG corpus (not in MIRAGE's files)."""


FORMATS: dict[str, DataFormat] = {
    "hotpotqa": DataFormat(
        "hotpotqa",
        "HotpotQA distractor: original (_id, context [[title,[sents]]]) or Hugging Face layout; + corpus files",
        parse_hotpotqa,
        carries_paragraphs=True,
    ),
    "2wiki": DataFormat(
        "2wiki",
        "2WikiMultihopQA (rows without context are dropped); question-only layouts accepted too",
        parse_twowiki,
        carries_paragraphs=True,
    ),
    "musique": DataFormat(
        "musique", "MuSiQue (paragraphs with is_supporting; answer + answer_aliases)", parse_musique, carries_paragraphs=True
    ),
    "flashrag": DataFormat(
        "flashrag", "FlashRAG question jsonl {id, question, golden_answers}; FlashRAG corpus files merge in", parse_question_row
    ),
    "nq": DataFormat("nq", "Natural Questions (open): FlashRAG, NQ-open, qa500 or mixed odqa files", parse_nq),
    "triviaqa": DataFormat(
        "triviaqa", "TriviaQA: aliases as a list, a stringified list or {Value, Aliases}", parse_triviaqa
    ),
    "popqa": DataFormat("popqa", "PopQA: possible_answers (list or stringified list), FlashRAG or qa500 layouts", parse_question_row),
    "bamboogle": DataFormat("bamboogle", "Bamboogle: [{id, Question, answer}] or FlashRAG jsonl", parse_question_row),
    "mirage": DataFormat(
        "mirage",
        "MIRAGE medical multiple choice: {dataset: {qid: {question, options, answer}}}",
        parse_mirage,
        hipporag_dicts=False,
    ),
}
