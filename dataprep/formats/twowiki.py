"""2WikiMultihopQA (Ho et al., 2020): HotpotQA's layout, plus `evidences` (the Wikidata triples behind the answer).

Rows with `context` are read like HotpotQA (`add_multihop_question`), keeping `type` and `evidences`. A row of the
original release without `context` is unusable (no paragraphs to retrieve) and is dropped with its reason
counted; rows in the question-only layouts (FlashRAG, the qa500 samples) carry none of the original's fields and
are kept as questions.
"""

from __future__ import annotations

from dataprep.builder import Builder, SourceInfo
from dataprep.formats.flashrag import lift_raw_fields
from dataprep.formats.hotpotqa import add_multihop_question
from dataprep.rows import add_question_row, require_object

__all__ = ["parse_twowiki"]

# fields only the original release has: a row with one of them but no context is a broken original row
_ORIGINAL_KEYS = ("_id", "supporting_facts", "evidences", "entity_ids", "type")


def parse_twowiki(b: Builder, record: object, where: str, src: SourceInfo) -> None:
    row = lift_raw_fields(require_object(record, where, "a 2WikiMultihopQA question"), "context")
    if row.get("context") is None:
        if any(k in row for k in _ORIGINAL_KEYS):
            b.drop("2WikiMultihopQA row without 'context'", where)
            return
        add_question_row(b, row, where, src)  # question-only layouts (FlashRAG, qa500)
        return
    add_multihop_question(b, row, where, src, ("type", "evidences"))
