"""Data preparation (dataprep) on tiny hand-written files: layouts, dedup, stable ids, merging, manifests, errors."""

from __future__ import annotations

import doctest
import hashlib
import importlib
import json
import pkgutil
from pathlib import Path
from typing import Any

import pytest

import dataprep
from dataprep import (
    FORMATS,
    Manifest,
    iter_records,
    join_sentences,
    load,
    load_prepared,
    paragraph_id,
    prepare,
)
from s3core.corpus import iter_corpus, read_questions
from s3core.errors import ConfigError, DataFormatError

# one HotpotQA question in the original layout (with an extra field to ignore)
HOTPOT_ORIGINAL: dict[str, Any] = {
    "_id": "q1",
    "question": "Which city is the capital of the country where the Eiffel Tower stands?",
    "answer": "Paris",
    "type": "bridge",
    "level": "hard",
    "supporting_facts": [["Eiffel Tower", 0], ["France", 1], ["France", 0]],
    "context": [
        ["Eiffel Tower", ["The Eiffel Tower is in Paris.", " It opened in 1889."]],
        ["France", ["France is a country.", " Its capital is Paris."]],
        ["Big Ben", ["Big Ben is in London."]],
    ],
    "reranked_ret_res": ["ignored"],
}
HOTPOT_Q2: dict[str, Any] = {
    "_id": "q2",
    "question": "When did the Eiffel Tower open?",
    "answer": "1889",
    "supporting_facts": [["Eiffel Tower", 1]],
    "context": [
        ["Eiffel Tower", ["The Eiffel Tower is in Paris.", " It opened in 1889."]],  # same paragraph as in q1
        ["Louvre", ["The Louvre is a museum."]],
    ],
}


def to_hf(row: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face `hotpot_qa` layout of an original-layout row."""
    return {
        "id": row["_id"],
        "question": row["question"],
        "answer": row["answer"],
        **{k: row[k] for k in ("type", "level") if k in row},
        "supporting_facts": {
            "title": [t for t, _ in row["supporting_facts"]],
            "sent_id": [i for _, i in row["supporting_facts"]],
        },
        "context": {"title": [t for t, _ in row["context"]], "sentences": [s for _, s in row["context"]]},
    }


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_json(path: Path, obj: Any, indent: int | None = 2) -> Path:
    path.write_text(json.dumps(obj, indent=indent), encoding="utf-8")
    return path


def test_doctests() -> None:
    modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(dataprep.__path__, "dataprep.")]
    results = [doctest.testmod(m) for m in modules]
    assert sum(r.attempted for r in results) >= 4 and sum(r.failed for r in results) == 0  # builder + demo


def test_registry_names_match_the_cli() -> None:
    from s3.commands.data import FORMAT_NAMES

    assert list(FORMATS) == FORMAT_NAMES == [
        "hotpotqa", "2wiki", "musique", "flashrag", "nq", "triviaqa", "popqa", "bamboogle", "mirage",
    ]


# ------------------------------------------------------------------------------------------ reading files


def test_iter_records_sniffs_content_not_extension(tmp_path: Path) -> None:
    rows = [{"a": 1}, {"a": 2}]
    as_array = write_json(tmp_path / "rows.jsonl", rows)  # an array despite .jsonl
    as_lines = write_jsonl(tmp_path / "rows.json", rows)  # JSON lines despite .json
    one_obj = write_json(tmp_path / "obj.txt", {"x": {"y": 1}})  # pretty-printed single object
    assert [r for _, r in iter_records(as_array)] == rows
    assert [r for _, r in iter_records(as_lines)] == rows
    assert list(iter_records(one_obj)) == [(1, {"x": {"y": 1}})]
    # one whose inner lines are whole objects (an array's last element) is still one object, not JSON lines
    nested = tmp_path / "nested.json"
    nested.write_text('{\n  "rows": [\n    {"a": 1},\n    {"a": 2}\n  ]\n}\n', encoding="utf-8")
    assert list(iter_records(nested)) == [(1, {"rows": [{"a": 1}, {"a": 2}]})]
    # line numbers of array elements
    assert [ln for ln, _ in iter_records(as_array)] == [2, 5]
    assert [ln for ln, _ in iter_records(as_lines)] == [1, 2]


def test_malformed_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"question": "a", "answer": "b"}\n\n{"question": "c", "answer": \n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:3: not valid JSON"):
        load("nq", [p])


def test_malformed_array_element_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text('[\n {"Question": "a", "answer": ["b"]},\n {"Question": "c", "answer": [}\n]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.json:3: not valid JSON"):
        load("popqa", [p])
    p.write_text('[{"Question": "a", "answer": ["b"]},]', encoding="utf-8")
    with pytest.raises(DataFormatError, match="trailing comma"):
        load("popqa", [p])
    p.write_text('[{"Question": "a", "answer": ["b"]}', encoding="utf-8")
    with pytest.raises(DataFormatError, match="not closed"):
        load("popqa", [p])


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "empty"), ("hello", "expected JSON"), ('{"a": 1} trailing', r"not valid JSON|unexpected data")],
)
def test_unreadable_files(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "f.json"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load("nq", [p])


def test_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "latin1.jsonl"
    p.write_bytes(b'{"question": "ok", "answer": "x"}\n{"question": "caf\xe9", "answer": "y"}\n')
    with pytest.raises(DataFormatError, match=r"latin1\.jsonl:2: not UTF-8 text"):
        load("nq", [p])


def test_missing_file_directory_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"input file not found: .*nope\.json"):
        load("nq", [tmp_path / "nope.json"])
    write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataFormatError, match=r"is a directory.*x\.jsonl"):
        load("nq", [tmp_path])
    with pytest.raises(DataFormatError, match="unknown data format 'squad'; choose one of: hotpotqa, 2wiki"):
        load("squad", [tmp_path / "x.jsonl"])
    with pytest.raises(DataFormatError, match="no input files"):
        load("nq", [])


# ---------------------------------------------------------------------------------------------- paragraphs


def test_join_sentences_handles_both_spacing_conventions() -> None:
    assert join_sentences(["A b.", " C d."]) == join_sentences(["A b.", "C d."]) == "A b. C d."
    assert join_sentences([]) == ""
    assert join_sentences(["  x ", "y"]) == "x y"


def test_paragraph_id_rule() -> None:
    title, text = "Zürich (city)", "Zürich is a city."
    digest = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]
    assert paragraph_id(title, text) == f"zurich-city-{digest}"
    assert paragraph_id(" Zürich (city) ", text + " ") == paragraph_id(title, text)  # outer whitespace ignored
    assert paragraph_id("", "x").startswith("p-")
    assert paragraph_id("东京", "x").startswith("p-")  # no ASCII left in the slug
    assert len(paragraph_id("a" * 200, "x").split("-")[0]) == 40


# ------------------------------------------------------------------------------------------------- HotpotQA


def test_hotpotqa_original_layout(tmp_path: Path) -> None:
    p = write_json(tmp_path / "hotpot.json", [HOTPOT_ORIGINAL, HOTPOT_Q2])
    corpus, questions = load("hotpotqa", [p])
    # 4 distinct paragraphs: the Eiffel Tower paragraph is shared by both questions
    assert sorted(d.title for d in corpus) == ["Big Ben", "Eiffel Tower", "France", "Louvre"]
    by_title = {d.title: d for d in corpus}
    assert by_title["Eiffel Tower"].text == "The Eiffel Tower is in Paris. It opened in 1889."
    q1, q2 = questions
    assert (q1.id, q1.golden_answers) == ("q1", ["Paris"])
    assert q1.supporting_ids == [by_title["Eiffel Tower"].id, by_title["France"].id]
    assert q1.metadata["context_ids"] == [by_title[t].id for t in ("Eiffel Tower", "France", "Big Ben")]
    assert q1.metadata["type"] == "bridge" and q1.metadata["level"] == "hard"
    assert "reranked_ret_res" not in q1.metadata
    assert q2.supporting_ids == [by_title["Eiffel Tower"].id]


def test_hotpotqa_hf_and_original_layouts_agree(tmp_path: Path) -> None:
    orig = write_json(tmp_path / "orig.json", [HOTPOT_ORIGINAL, HOTPOT_Q2])
    hf = write_jsonl(tmp_path / "hf.json", [to_hf(HOTPOT_ORIGINAL), to_hf(HOTPOT_Q2)])
    a, b = load("hotpotqa", [orig]), load("hotpotqa", [hf])
    assert a.corpus == b.corpus
    assert a.questions == b.questions  # same ids, answers, supporting ids, context ids, metadata


def test_flashrag_copy_of_hotpotqa_builds_the_same_corpus(tmp_path: Path) -> None:
    # FlashRAG's hotpotqa files keep the Hugging Face fields inside metadata
    hf = to_hf(HOTPOT_ORIGINAL)
    row = {
        "id": hf["id"], "question": hf["question"], "golden_answers": [hf["answer"]],
        "metadata": {k: hf[k] for k in ("type", "level", "supporting_facts", "context")},
    }
    flash = load("hotpotqa", [write_jsonl(tmp_path / "dev.jsonl", [row])])
    orig = load("hotpotqa", [write_json(tmp_path / "orig.json", [HOTPOT_ORIGINAL])])
    assert flash.corpus == orig.corpus and flash.questions == orig.questions
    # without paragraphs in metadata it is a question-only row
    (q,) = load("hotpotqa", [write_jsonl(tmp_path / "q.jsonl", [{"id": "x", "question": "q?", "golden_answers": ["a"]}])]).questions
    assert q.golden_answers == ["a"] and "supporting_ids" not in q.metadata


def test_ids_are_stable_across_runs_and_file_order(tmp_path: Path) -> None:
    p1 = write_json(tmp_path / "a.json", [HOTPOT_ORIGINAL])
    p2 = write_json(tmp_path / "b.json", [HOTPOT_Q2])
    ids_12 = {d.title: d.id for d in load("hotpotqa", [p1, p2]).corpus}
    ids_21 = {d.title: d.id for d in load("hotpotqa", [p2, p1]).corpus}
    ids_1 = {d.title: d.id for d in load("hotpotqa", [p1]).corpus}
    assert ids_12 == ids_21
    assert all(ids_12[t] == i for t, i in ids_1.items())


def test_hotpotqa_bad_context_names_file_and_line(tmp_path: Path) -> None:
    bad = dict(HOTPOT_Q2, context=[["Title only"]])
    p = write_jsonl(tmp_path / "h.jsonl", [HOTPOT_ORIGINAL, bad])
    with pytest.raises(DataFormatError, match=r"h\.jsonl:2: a 'context' entry must be \[title, \[sentences\]\]"):
        load("hotpotqa", [p])
    p = write_jsonl(tmp_path / "h2.jsonl", [dict(HOTPOT_Q2, supporting_facts=[["Louvre", "zero"]])])
    with pytest.raises(DataFormatError, match=r"h2\.jsonl:1: bad supporting fact"):
        load("hotpotqa", [p])
    p = write_jsonl(tmp_path / "h3.jsonl", [{"_id": "x", "answer": "y", "context": []}])
    with pytest.raises(DataFormatError, match=r"h3\.jsonl:1: row has no 'question'"):
        load("hotpotqa", [p])


def test_supporting_title_missing_from_context_is_counted(tmp_path: Path) -> None:
    row = dict(HOTPOT_Q2, supporting_facts=[["Eiffel Tower", 1], ["Not There", 0]])
    m = prepare("hotpotqa", [write_json(tmp_path / "h.json", [row])], tmp_path / "out")
    assert m.counts.supporting_titles_missing == 1
    (q,) = read_questions(tmp_path / "out" / "questions.jsonl")
    assert len(q.supporting_ids) == 1


def test_hipporag_corpus_merges_with_questions(tmp_path: Path) -> None:
    qs = write_json(tmp_path / "hotpotqa_train.json", [HOTPOT_ORIGINAL])
    dict_corpus = write_json(
        tmp_path / "corpus.json",
        {"Eiffel Tower": ["The Eiffel Tower is in Paris.", " It opened in 1889."], "Extra": ["Only in the corpus."]},
    )
    data = load("hotpotqa", [qs, dict_corpus])
    assert sorted(d.title for d in data.corpus) == ["Big Ben", "Eiffel Tower", "Extra", "France"]
    assert data.stats.counts.duplicates_merged == 1
    list_corpus = write_json(tmp_path / "corpus2.json", [{"title": "Extra", "text": "Only in the corpus."}])
    # a corpus file alone (no questions) loads as a corpus, in either HippoRAG layout, with the same ids
    assert [d.id for d in load("hotpotqa", [list_corpus]).corpus] == [d.id for d in load("hotpotqa", [dict_corpus]).corpus][1:]


# ---------------------------------------------------------------------------------------------- 2Wiki / MuSiQue


def test_2wiki_drops_rows_without_context_and_counts_them(tmp_path: Path) -> None:
    good = {
        "_id": "w1", "type": "comparison", "question": "Which film came first, A or B?", "answer": "A",
        "context": [["A", ["A is a 1950 film."]], ["B", ["B is a 1960 film."]]],
        "supporting_facts": [["A", 0], ["B", 0]], "evidences": [["A", "year", "1950"]],
    }
    no_ctx = {"_id": "w2", "type": "comparison", "question": "q?", "answer": "no", "supporting_facts": [["A", 0]]}
    p = write_jsonl(tmp_path / "wikihop.json", [good, no_ctx, dict(good, _id="w3", context=None)])
    m = prepare("2wiki", [p], tmp_path / "out")
    assert m.counts.questions == 1 and m.counts.dropped == 2
    assert m.dropped[0].count == 2 and m.dropped[0].examples == [f"{p}:2", f"{p}:3"]
    (q,) = read_questions(tmp_path / "out" / "questions.jsonl")
    assert len(q.supporting_ids) == 2 and q.metadata["evidences"] == [["A", "year", "1950"]]


def test_2wiki_question_only_layout_is_kept(tmp_path: Path) -> None:
    # the qa500 sample layout: no context at all, questions only
    p = write_json(tmp_path / "2wiki.json", [{"id": 0, "Question": "q?", "answer": ["a"], "golden_context": ["x"]}])
    corpus, questions = load("2wiki", [p])
    assert corpus == [] and [q.id for q in questions] == ["0"]


def test_musique_supporting_and_aliases(tmp_path: Path) -> None:
    row = {
        "id": "2hop__1_2",
        "question": "What is the seat of the county where X is?",
        "answer": "Stanley",
        "answer_aliases": ["Stanley, ND", "Stanley"],
        "answerable": True,
        "paragraphs": [
            {"idx": 0, "title": "X", "paragraph_text": "X is in Mountrail County.", "is_supporting": True},
            {"idx": 1, "title": "Y", "paragraph_text": "Y is elsewhere.", "is_supporting": False},
            {"idx": 2, "title": "Mountrail County", "paragraph_text": "Its seat is Stanley.", "is_supporting": True},
        ],
    }
    corpus, (q,) = load("musique", [write_jsonl(tmp_path / "m.json", [row])])
    ids = {d.title: d.id for d in corpus}
    assert q.golden_answers == ["Stanley", "Stanley, ND"]
    assert q.supporting_ids == [ids["X"], ids["Mountrail County"]]
    assert q.metadata["hops"] == 2 and q.metadata["answerable"] is True
    bad = dict(row, paragraphs=[{"title": "X"}])
    with pytest.raises(DataFormatError, match=r"m2\.json:1: each paragraph needs"):
        load("musique", [write_jsonl(tmp_path / "m2.json", [bad])])


# ----------------------------------------------------------------------------------------- question-only


def test_nq_triviaqa_mixed_file_routes_by_dataset(tmp_path: Path) -> None:
    rows = [
        {"question": "how many votes", "answer": ["A simple majority"], "id": "-340", "dataset": "nq", "context": ""},
        {"question": "who presides", "answer": None, "short_answers": ["President"], "example_id": 22, "dataset": "nq"},
        {"question": "Cassini?", "answer": "[\"Cassini's Division\", \"Cassini's division\"]", "dataset": "trivia"},
        {"question": "Phar?", "answer": "['Phar Lap', 'Pharlap']", "dataset": "trivia"},
    ]
    p = write_jsonl(tmp_path / "odqa.json", rows)
    nq = load("nq", [p])
    assert [(q.id, q.golden_answers) for q in nq.questions] == [("-340", ["A simple majority"]), ("22", ["President"])]
    assert nq.stats.dropped == {"dataset='trivia' row (not nq) in a mixed file": 2}
    tq = load("triviaqa", [p]).questions
    assert [q.golden_answers for q in tq] == [["Cassini's Division", "Cassini's division"], ["Phar Lap", "Pharlap"]]
    # rows without ids get a stable id derived from the question text
    assert tq[0].id == "triviaqa-" + hashlib.sha1(b"Cassini?").hexdigest()[:12]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Paris", ["Paris"]),
        ("[citation needed]", ["[citation needed]"]),  # bracketed but not a list literal
        ("['a', 'b', 'a']", ["a", "b"]),
        ('["x"]', ["x"]),
        ([" a ", "", "b"], ["a", "b"]),
        (1999, ["1999"]),
        ({"Value": "Vienna", "Aliases": ["Wien", "Vienna"]}, ["Vienna", "Wien"]),
        ("__import__('os').system('echo hi')", ["__import__('os').system('echo hi')"]),  # never evaluated
    ],
)
def test_answer_shapes(tmp_path: Path, answer: Any, expected: list[str]) -> None:
    p = write_jsonl(tmp_path / "t.jsonl", [{"question": "q?", "answer": answer}])
    (q,) = load("triviaqa", [p]).questions
    assert q.golden_answers == expected


def test_bad_answer_type_names_line(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "t.jsonl", [{"question": "q?", "answer": ["ok"]}, {"question": "r?", "answer": [{"a": 1}]}])
    with pytest.raises(DataFormatError, match=r"t\.jsonl:2 \(answer\): a gold answer must be a string"):
        load("nq", [p])


def test_qa500_bamboogle_popqa_flashrag_layouts(tmp_path: Path) -> None:
    bamboo = write_json(tmp_path / "bamboogle.json", [{"id": "test_71", "Question": "In what year?", "answer": ["1999"]}])
    ((q,),) = [load("bamboogle", [bamboo]).questions]
    assert (q.id, q.question, q.golden_answers, q.metadata["dataset"]) == ("test_71", "In what year?", ["1999"], "bamboogle")
    popqa = write_jsonl(
        tmp_path / "popqa.jsonl", [{"id": 7, "question": "Who wrote X?", "possible_answers": '["Aiwass", "Aleister Crowley"]'}]
    )
    assert load("popqa", [popqa]).questions[0].golden_answers == ["Aiwass", "Aleister Crowley"]
    fr = write_jsonl(
        tmp_path / "test.jsonl",
        [{"id": "test_0", "question": "who?", "golden_answers": ["Röntgen"], "metadata": {"split": "test"}}],
    )
    (q,) = load("flashrag", [fr]).questions
    assert q.metadata == {"split": "test", "dataset": "flashrag"} and q.golden_answers == ["Röntgen"]


def test_duplicate_question_ids_across_inputs(tmp_path: Path) -> None:
    a = write_json(tmp_path / "nq.json", [{"id": 0, "Question": "q-a", "answer": ["x"]}, {"id": 1, "Question": "same", "answer": ["y"]}])
    b = write_json(tmp_path / "nq_pre.json", [{"id": 0, "Question": "q-b", "answer": ["z"]}, {"id": 1, "Question": "same", "answer": ["y"]}])
    data = load("nq", [a, b])
    assert [q.id for q in data.questions] == ["0", "1", "nq_pre:0"]
    assert data.questions[2].metadata["original_id"] == "0"
    assert data.stats.counts.question_ids_renamed == 1 and data.stats.counts.duplicate_questions_merged == 1


def test_mirage_multiple_choice(tmp_path: Path) -> None:
    bench = {
        "medqa": {"0000": {"question": "Which drug?", "options": {"A": "Aspirin", "B": "Heparin"}, "answer": "B"}},
        "pubmedqa": {"123": {"question": "Is X useful?", "options": {"A": "yes", "B": "no", "C": "maybe"}, "answer": "A"}},
    }
    _, questions = load("mirage", [write_json(tmp_path / "benchmark.json", bench, indent=None)])
    q = questions[0]
    assert q.id == "medqa-0000"
    assert q.question == "Which drug?\nOptions:\nA. Aspirin\nB. Heparin"
    assert q.golden_answers == ["B", "B. Heparin", "Heparin"]
    assert q.metadata == {
        "dataset": "mirage", "subset": "medqa", "question_only": "Which drug?",
        "options": {"A": "Aspirin", "B": "Heparin"}, "answer": "B", "multiple_choice": True,
    }
    assert questions[1].golden_answers == ["A", "A. yes", "yes"]
    bad = {"medqa": {"1": {"question": "Q?", "options": {"A": "x"}, "answer": "E"}}}
    with pytest.raises(DataFormatError, match=r"bad\.json:1 \(medqa/1\): 'answer' must be one of the option letters"):
        load("mirage", [write_json(tmp_path / "bad.json", bad)])


# ------------------------------------------------------------------------------------------------ corpora


def test_flashrag_corpus_and_questions_merge(tmp_path: Path) -> None:
    corpus_file = write_jsonl(
        tmp_path / "sample_data.jsonl",
        [
            {"id": "0", "contents": '"Evan Morris"\nEvan Morris was a lobbyist.'},
            {"id": "1", "title": "Evan Morris", "text": "Evan Morris was a lobbyist."},  # the same passage
            {"id": "2", "contents": "no title line at all"},
        ],
    )
    docs = load("flashrag", [corpus_file]).corpus
    assert [(d.title, d.text) for d in docs] == [("Evan Morris", "Evan Morris was a lobbyist."), ("", "no title line at all")]
    qs = write_jsonl(tmp_path / "test.jsonl", [{"id": "t0", "question": "who?", "golden_answers": ["Evan"]}])
    m = prepare("flashrag", [qs, corpus_file], tmp_path / "out")
    assert (m.counts.questions, m.counts.paragraphs, m.counts.duplicates_merged) == (1, 2, 1)
    # a record that is neither a corpus record nor a question is an error naming its line
    neither = write_jsonl(tmp_path / "neither.jsonl", [{"id": "1", "title": "T"}])
    with pytest.raises(DataFormatError, match=r"neither\.jsonl:1: corpus row without its text .*a corpus row needs 'contents', or 'title' with 'text'"):
        load("flashrag", [corpus_file, neither])


# ---------------------------------------------------------------------------------- prepare / load_prepared


def test_prepare_writes_files_and_manifest(tmp_path: Path) -> None:
    src = write_json(tmp_path / "hotpot.json", [HOTPOT_ORIGINAL, HOTPOT_Q2])
    out = tmp_path / "prepared"
    m = prepare("hotpotqa", [src], out)
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl", "manifest.json", "questions.jsonl"]
    assert Manifest.model_validate_json((out / "manifest.json").read_text()) == m
    assert (m.counts.questions, m.counts.paragraphs, m.counts.paragraph_occurrences, m.counts.duplicates_merged) == (2, 4, 5, 1)
    assert m.sources[0].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()
    assert (m.sources[0].records, m.sources[0].questions, m.sources[0].paragraphs) == (2, 2, 5)
    corpus = list(iter_corpus(out / "corpus.jsonl"))  # readable by the shared corpus reader, unique ids
    assert len(corpus) == 4
    corpus_path, questions = load_prepared(out)
    assert corpus_path == out / "corpus.jsonl"
    assert {i for q in questions for i in q.supporting_ids} <= {d.id for d in corpus}
    # re-running gives byte-identical data files
    before = (out / "corpus.jsonl").read_bytes(), (out / "questions.jsonl").read_bytes()
    prepare("hotpotqa", [src], out)
    assert ((out / "corpus.jsonl").read_bytes(), (out / "questions.jsonl").read_bytes()) == before


def test_question_only_prepare_has_no_corpus_and_removes_a_stale_one(tmp_path: Path) -> None:
    out = tmp_path / "p"
    prepare("hotpotqa", [write_json(tmp_path / "h.json", [HOTPOT_Q2])], out)
    m = prepare("nq", [write_jsonl(tmp_path / "nq.jsonl", [{"question": "q?", "answer": ["a"]}])], out)
    assert m.corpus_file is None and not (out / "corpus.jsonl").exists()
    corpus_path, questions = load_prepared(out)
    assert corpus_path is None and [q.golden_answers for q in questions] == [["a"]]


def test_load_prepared_errors(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="prepared dataset folder not found"):
        load_prepared(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match=r"no questions\.jsonl"):
        load_prepared(tmp_path / "empty")
    out = tmp_path / "p"
    prepare("hotpotqa", [write_json(tmp_path / "h.json", [HOTPOT_Q2])], out)
    (out / "corpus.jsonl").unlink()
    with pytest.raises(DataFormatError, match=r"manifest names corpus\.jsonl but the file is missing"):
        load_prepared(out)


def test_load_prepared_accepts_a_plain_flashrag_folder(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "questions.jsonl",
        [{"id": "a", "question": "q?", "golden_answers": ["x"]}, {"id": "b", "question": "r?", "golden_answers": None}],
    )
    corpus_path, questions = load_prepared(tmp_path)
    assert corpus_path is None and [q.golden_answers for q in questions] == [["x"], []]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q?", "golden_answers": {"a": 1}}, "'golden_answers' must be a list"),
        ({"question": "q?", "golden_answers": ["x"], "metadata": [1]}, "'metadata' must be a JSON object"),
        ({"golden_answers": ["x"]}, "a question line needs at least 'question'"),
    ],
)
def test_load_prepared_bad_question_lines(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    write_jsonl(tmp_path / "questions.jsonl", [{"question": "ok?", "golden_answers": ["y"]}, row])
    with pytest.raises(DataFormatError, match=rf"questions\.jsonl:2: {message}"):
        load_prepared(tmp_path)


# ------------------------------------------------------------------------------------------ training sources


def test_training_sources_merge_by_id_and_name_bad_entries(tmp_path: Path) -> None:
    from dataprep.training_sources import load_sources

    a = write_json(tmp_path / "a.json", [HOTPOT_ORIGINAL])
    b = write_json(tmp_path / "b.json", [HOTPOT_ORIGINAL, HOTPOT_Q2])
    corpus, questions, sources = load_sources(["hotpotqa:a.json", f"hotpotqa:{b}"], tmp_path)  # relative + absolute
    assert [q.id for q in questions] == ["q1", "q2"] and len(corpus) == 4  # q1 and 3 paragraphs shared: kept once
    assert [(s["path"], s["questions"], s["paragraphs"]) for s in sources] == [(str(a), 1, 3), (str(b), 2, 4)]
    assert sources[0]["sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    with pytest.raises(ConfigError, match=r"'a\.json': expected 'format:path'"):
        load_sources(["a.json"], tmp_path)
    with pytest.raises(ConfigError, match="unknown format 'squad'"):
        load_sources(["squad:a.json"], tmp_path)
    with pytest.raises(DataFormatError, match=r"training source not found: .*nope\.json"):
        load_sources(["hotpotqa:nope.json"], tmp_path)


# ---------------------------------------------------------------------------------------------------- CLI


def test_cli_prepare_and_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import main

    src = write_json(tmp_path / "h.json", [HOTPOT_ORIGINAL])
    assert main(["data", "prepare", "hotpotqa", "--input", str(src), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "questions            1" in out and "paragraphs           3" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a"\n', encoding="utf-8")
    assert main(["data", "prepare", "nq", "--input", str(bad), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and f"{bad}:1" in err and "\n" not in err
    assert main(["data", "formats"]) == 0
    assert "mirage" in capsys.readouterr().out
    assert main(["data", "show", str(tmp_path / "o")]) == 0
    assert '"questions": 1' in capsys.readouterr().out
