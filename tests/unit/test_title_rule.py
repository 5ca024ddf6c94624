"""The title rule (s3core.corpus.TITLE_RULE, issue 79): a title is only what the corpus line says is one — a "title"
field, or a double-quoted first line of "contents" (`"Title"\\ntext`); any other contents is all text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3core.corpus import TITLE_RULE, iter_corpus, write_corpus
from s3core.errors import IndexDirError
from s3core.types import Document
from searcher.retrieval import rebuild_command
from searcher.retrieval.store import CorpusInfo, IndexManifest
from searcher.retrieval.title_rule import check_title_rule, first_line_was_title

CHUNK = "Error E12 means the battery temperature is too high.\nMove the vacuum to a cooler room."


@pytest.mark.parametrize(("contents", "title", "text"), [
    ('"Angkor Wat"\nA temple complex.', "Angkor Wat", "A temple complex."),  # FlashRAG's form
    ('  "Angkor Wat"  \nA temple.\nIn Cambodia.', "Angkor Wat", "A temple.\nIn Cambodia."),  # spaces around the line
    ('""\nNo title.', "", "No title."),  # what `Document.contents` writes for an untitled passage
    ('"The "Boss" tapes"\nA title holding quotes.', 'The "Boss" tapes', "A title holding quotes."),
    (CHUNK, "", CHUNK),  # an unquoted first line is text, never a title
    ('"Yes," she said.\nThen she left.', "", '"Yes," she said.\nThen she left.'),  # opens with a quote, no title
    ("Absalon\ndragged forth and burnt.", "", "Absalon\ndragged forth and burnt."),  # a bare title-like line too
    ("one line only", "", "one line only"),
    ('"Quoted, one line"', "", '"Quoted, one line"'),  # no text after it: not the FlashRAG form
    ("  padded  \n", "", "padded"),
])
def test_from_contents_takes_a_title_only_from_a_quoted_first_line(contents: str, title: str, text: str) -> None:
    d = Document.from_contents("x", contents)
    assert (d.title, d.text) == (title, text)


def test_contents_round_trips_titled_and_untitled_passages() -> None:
    for d in (Document(id="a", title="Angkor Wat", text="A temple."), Document(id="b", title="", text=CHUNK)):
        assert Document.from_contents(d.id, d.contents) == d


def test_the_corpus_reader_follows_the_rule_and_keeps_original_ids(tmp_path: Path) -> None:
    rows = [
        {"id": "c2", "contents": CHUNK},
        {"id": "t", "contents": '"Dock"\nGreen means charging.'},
        {"id": "f", "title": "Filter", "text": "Rinse it.\nDry it."},
        {"id": "s:r7", "contents": '"Wheels"\nThey lift off.', "original_id": "r7"},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    docs = list(iter_corpus(path))
    assert [(d.id, d.title, d.text, d.original_id) for d in docs] == [
        ("c2", "", CHUNK, None), ("t", "Dock", "Green means charging.", None), ("f", "Filter", "Rinse it.\nDry it.", None),
        ("s:r7", "Wheels", "They lift off.", "r7"),
    ]
    write_corpus(tmp_path / "again.jsonl", docs)
    assert list(iter_corpus(tmp_path / "again.jsonl")) == docs  # original_id written back
    assert "original_id" not in (tmp_path / "again.jsonl").read_text(encoding="utf-8").splitlines()[0]


def _old_reading(contents: str) -> tuple[str, str]:
    """(title, text) as indexes built before the rule read "contents": any first line a title, quotes optional."""
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents.strip()
    title = title.strip()
    if len(title) >= 2 and title[0] == '"' and title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


@pytest.mark.parametrize(("contents", "changed"), [
    (CHUNK, True), ("Absalon\ndragged forth.", True), ('"Absalon"\ndragged forth.', False), ('""\ntext', False),
    ("one line", False), ("\nleading newline", False), ("  \n  blank first line", False),
])
def test_first_line_was_title_is_where_the_old_reading_differs(contents: str, changed: bool) -> None:
    new = Document.from_contents("x", contents)
    assert first_line_was_title(contents) is changed is (_old_reading(contents) != (new.title, new.text))


def _manifest(corpus: Path, rows: list[dict[str, str]], title_rule: str | None) -> IndexManifest:
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    from s3core.io import file_sha256

    info = CorpusInfo(path=str(corpus), sha256=file_sha256(corpus), bytes=corpus.stat().st_size, docs=len(rows))
    return IndexManifest(backend="bm25", corpus=info, doc_count=len(rows), title_rule=title_rule,
                         params={"method": "lucene", "k1": 1.2, "b": 0.75, "stemmer": None, "stopwords": "en"})


def test_check_title_rule(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [{"id": "c1", "contents": '"T"\ntext'}, {"id": "c2", "contents": CHUNK}]
    idx = tmp_path / "idx"
    rebuild = rebuild_command(idx, _manifest(tmp_path / "c.jsonl", rows, None))
    assert rebuild == (f"s3 index build --corpus {tmp_path / 'c.jsonl'} --backend bm25 --out {idx} --overwrite "
                       "--set retriever.bm25.k1=1.2 --set retriever.bm25.stemmer=none")
    check_title_rule(idx, _manifest(tmp_path / "c.jsonl", rows, TITLE_RULE), rebuild)  # built under the rule
    with pytest.raises(IndexDirError, match=r"1 of its 2 passages \(the first: id 'c2' .*rebuild it: s3 index build"):
        check_title_rule(idx, _manifest(tmp_path / "c.jsonl", rows, None), rebuild)
    check_title_rule(idx, _manifest(tmp_path / "c.jsonl", rows[:1], None), rebuild)  # reads alike: opens
    # a corpus that cannot be read to tell: a warning, and the index opens
    m = _manifest(tmp_path / "c.jsonl", rows, None)
    (tmp_path / "c.jsonl").write_text("{}\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        check_title_rule(idx, m, rebuild)
    assert "has changed since the build" in caplog.text and rebuild in caplog.text


def test_the_rule_modules_doctests() -> None:
    import doctest

    import s3core.types
    import searcher.retrieval.title_rule

    for mod in (s3core.types, searcher.retrieval.title_rule):
        res = doctest.testmod(mod)
        assert res.attempted and not res.failed, mod.__name__
