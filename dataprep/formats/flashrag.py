"""FlashRAG (Jin et al., 2024): the toolkit's internal shape, and its copies of the multi-hop datasets.

A FlashRAG question file is JSON lines {"id", "question", "golden_answers", "metadata"}, exactly what
`s3 data prepare` writes (read by `dataprep.rows.parse_question_row`, like every question-only format); its corpus
files ({"id", "contents"}) merge in as in any format (dataprep.formats.corpus).

FlashRAG's copies of HotpotQA, 2WikiMultihopQA and MuSiQue keep the raw fields (`context`, `supporting_facts`,
`paragraphs`, ...) inside `metadata`: `lift_raw_fields` brings them back up, so those files give the same corpus
and the same ids as the original releases.
"""

from __future__ import annotations

from s3core.io import JsonObject

__all__ = ["lift_raw_fields"]


def lift_raw_fields(row: JsonObject, key: str) -> JsonObject:
    """A FlashRAG row whose `metadata` holds the raw `key` (e.g. "context") as the raw row: metadata lifted to the
    top, with the row's id, question and golden_answers (as `answer`); any other row unchanged."""
    meta = row.get("metadata")
    if key in row or not isinstance(meta, dict) or meta.get(key) is None:
        return row
    lifted = dict(meta)
    lifted.update({k: row[k] for k in ("id", "_id", "question") if k in row})
    if "golden_answers" in row:
        lifted["answer"] = row["golden_answers"]
    return lifted
