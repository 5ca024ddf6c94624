"""A corpus's own ids survive data preparation (dataprep.builder, issue 79); inputs without ids keep generated ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dataprep import load
from dataprep.builder import paragraph_id

HOTPOT = {
    "_id": "q1",
    "question": "When did the Eiffel Tower open?",
    "answer": "1889",
    "supporting_facts": [["Eiffel Tower", 1]],
    "context": [
        ["Eiffel Tower", ["The Eiffel Tower is in Paris.", " It opened in 1889."]],
        ["Louvre", ["The Louvre is a museum."]],
    ],
}
EIFFEL = ("Eiffel Tower", "The Eiffel Tower is in Paris. It opened in 1889.")
LOUVRE = ("Louvre", "The Louvre is a museum.")


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _renamed(data: Any) -> list[tuple[str, str, str]]:
    return [(r.original_id, r.id, r.reason) for r in data.renamed]


def test_own_ids_are_kept_as_they_are(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "c.jsonl", [
        {"id": "r7-18", "contents": "Error E12 means too hot.\nMove it."},
        {"id": "doc 2", "title": "Dock", "text": "Green means charging."},
        {"id": 20, "contents": '"Filter"\nRinse it.'},
        {"_id": "beir-1", "title": "Bin", "text": "Empty it."},  # BEIR's key
        {"title": "No id", "text": "A generated id."},
    ])
    data = load("flashrag", [corpus])
    assert [(d.id, d.original_id) for d in data.corpus] == [
        ("r7-18", None), ("doc 2", None), ("20", None), ("beir-1", None), (paragraph_id("No id", "A generated id."), None),
    ]
    assert data.corpus[0].text == "Error E12 means too hot.\nMove it." and data.corpus[0].title == ""
    assert data.renamed == [] and (data.stats.counts.corpus_ids_kept, data.stats.counts.corpus_ids_renamed) == (4, 0)


def test_ids_that_must_change_are_mapped(tmp_path: Path) -> None:
    a = _jsonl(tmp_path / "shard_a.jsonl", [
        {"id": "0", "contents": '"A"\nfirst shard, row 0'},
        {"id": "1", "contents": '"B"\nfirst shard, row 1'},
    ])
    b = _jsonl(tmp_path / "shard_b.jsonl", [
        {"id": "0", "contents": '"C"\nsecond shard, row 0'},  # id taken by another passage
        {"id": "7", "contents": '"B"\nfirst shard, row 1'},  # the same passage again, under another id
        {"id": "bad\nid", "contents": '"D"\ncontrol characters'},
        {"id": "", "contents": '"E"\nempty id'},
        {"id": ["x"], "contents": '"F"\nnot a string'},
        {"id": "shard_b:0", "contents": '"G"\nclaims the name a renamed id would take'},
    ])
    data = load("flashrag", [a, b])
    ids = [(d.id, d.original_id) for d in data.corpus]
    assert ids == [
        ("0", None), ("1", None), ("shard_b:0#2", "0"), (paragraph_id("D", "control characters"), "bad\nid"),
        (paragraph_id("E", "empty id"), ""), (paragraph_id("F", "not a string"), '["x"]'), ("shard_b:0", None),
    ]
    assert _renamed(data) == [
        ("7", "1", "same passage as 1"),
        ("0", "shard_b:0#2", "duplicate id"),
        ("bad\nid", ids[3][0], "unusable id"),
        ("", ids[4][0], "unusable id"),
        ('["x"]', ids[5][0], "unusable id"),
    ]
    assert [r.where for r in data.renamed][:2] == [f"{b}:2", f"{b}:1"]
    assert len({d.id for d in data.corpus}) == len(data.corpus) == 7
    # the same files in another order: the first passage seen keeps the id
    flipped = load("flashrag", [b, a])
    assert [d.id for d in flipped.corpus if d.text.endswith("row 0")] == ["0", "shard_a:0"]


def test_inputs_without_ids_keep_their_generated_ids(tmp_path: Path) -> None:
    hotpot = _jsonl(tmp_path / "hotpot.jsonl", [HOTPOT])
    corpus = _jsonl(tmp_path / "hippo.json", [{"title": "Louvre", "text": "The Louvre is a museum."}])
    data = load("hotpotqa", [hotpot, corpus])
    assert [d.id for d in data.corpus] == [paragraph_id(*EIFFEL), paragraph_id(*LOUVRE)]
    assert all(d.original_id is None for d in data.corpus) and data.renamed == []
    assert data.questions[0].supporting_ids == [paragraph_id(*EIFFEL)]


def test_a_question_context_paragraph_takes_the_corpus_records_id(tmp_path: Path) -> None:
    """A HotpotQA context paragraph that a corpus file also holds, with an id, is one document under that id; the
    question's supporting and context ids follow it."""
    corpus = _jsonl(tmp_path / "wiki.jsonl", [{"id": "wiki-eiffel", "title": EIFFEL[0], "text": EIFFEL[1]}])
    for inputs in ([_jsonl(tmp_path / "hotpot.jsonl", [HOTPOT]), corpus], [corpus, tmp_path / "hotpot.jsonl"]):
        data = load("hotpotqa", inputs)
        assert sorted(d.id for d in data.corpus) == sorted(["wiki-eiffel", paragraph_id(*LOUVRE)])
        q = data.questions[0]
        assert q.supporting_ids == ["wiki-eiffel"]
        assert q.metadata["context_ids"] == ["wiki-eiffel", paragraph_id(*LOUVRE)]


def test_question_rows_naming_a_merged_id_follow_it(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "c.jsonl", [
        {"id": "p1", "contents": '"A"\nsame text'},
        {"id": "p2", "contents": '"A"\nsame text'},
    ])
    qs = _jsonl(tmp_path / "q.jsonl", [
        {"id": "q", "question": "?", "golden_answers": ["a"], "metadata": {"supporting_ids": ["p2", "elsewhere"]}},
    ])
    data = load("flashrag", [qs, corpus])
    assert [d.id for d in data.corpus] == ["p1"] and _renamed(data) == [("p2", "p1", "same passage as p1")]
    assert data.questions[0].supporting_ids == ["p1", "elsewhere"]
