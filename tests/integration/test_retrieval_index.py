"""Index directories (bm25s, real files): self-description, clear errors, and the CLI end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3.cli import main
from s3core.errors import ConfigError, DataFormatError, IndexDirError
from s3core.io import file_sha256
from searcher.config import RetrieverConfig
from searcher.retrieval import build_index, load_retriever, read_manifest

pytestmark = pytest.mark.integration

ROWS = [
    {"id": "a", "contents": '"Alpha"\nThe alpha particle is a helium nucleus.'},
    {"id": "b", "contents": '"Beta"\nBeta decay emits an electron.'},
    {"id": "c", "title": "Gamma", "text": "Gamma rays are photons of high energy."},
]


def _write(path: Path, rows: list[object], extra: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + extra, encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return _write(tmp_path / "corpus.jsonl", ROWS)


def test_manifest_describes_the_index(corpus: Path, tmp_path: Path) -> None:
    out = build_index(corpus, "bm25", tmp_path / "idx", RetrieverConfig.model_validate({"bm25": {"k1": 1.2}}))
    m = read_manifest(out)
    assert m.backend == "bm25" and m.doc_count == 3
    assert m.params["k1"] == 1.2 and m.params["stemmer"] == "english"
    assert m.corpus is not None and m.corpus.sha256 == file_sha256(corpus) and m.corpus.bytes == corpus.stat().st_size
    assert m.created
    # loading needs no flag the build had: the default config has k1=1.5 but the index keeps its own
    r = load_retriever(RetrieverConfig(), out)
    assert r.params["k1"] == 1.2
    assert r.search(["electron"], 5)[0][0].id == "b"


def test_malformed_corpus_line_names_the_line(tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.jsonl", ROWS[:2], extra="{not json\n")
    with pytest.raises(DataFormatError, match=r"bad.jsonl:3: not valid JSON"):
        build_index(bad, "bm25", tmp_path / "idx")
    assert not (tmp_path / "idx").exists()  # nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".idx")]


def test_duplicate_id_is_an_error(tmp_path: Path) -> None:
    dup = _write(tmp_path / "dup.jsonl", [*ROWS, {"id": "a", "contents": "again"}])
    with pytest.raises(DataFormatError, match=r"dup.jsonl:4: duplicate document id 'a'"):
        build_index(dup, "bm25", tmp_path / "idx")


def test_unknown_backend(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown retrieval backend 'splade'; choose one of: bm25, lucene, dense"):
        build_index(corpus, "splade", tmp_path / "idx")


def test_missing_and_foreign_index_dirs(tmp_path: Path) -> None:
    with pytest.raises(IndexDirError, match="index directory not found"):
        load_retriever(RetrieverConfig(), tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexDirError, match=r"no index\.json"):
        load_retriever(RetrieverConfig(), tmp_path / "empty")
    with pytest.raises(IndexDirError, match="no index directory given"):
        load_retriever(RetrieverConfig())


def test_corpus_mismatch_and_changed_doc_store(corpus: Path, tmp_path: Path) -> None:
    out = build_index(corpus, "bm25", tmp_path / "idx")
    other = _write(tmp_path / "other.jsonl", ROWS[:2])
    with pytest.raises(IndexDirError, match="built from a different corpus"):
        load_retriever(RetrieverConfig(), out, expect_corpus=other)
    load_retriever(RetrieverConfig(), out, expect_corpus=corpus)  # same corpus: fine
    docs = out / "docs.jsonl"
    docs.write_text(docs.read_text().replace("helium", "hydrogen"))
    with pytest.raises(IndexDirError, match="does not match the manifest"):
        load_retriever(RetrieverConfig(), out)


def test_build_refuses_to_overwrite_without_flag(corpus: Path, tmp_path: Path) -> None:
    out = build_index(corpus, "bm25", tmp_path / "idx")
    with pytest.raises(IndexDirError, match="already exists"):
        build_index(corpus, "bm25", out)
    build_index(corpus, "bm25", out, overwrite=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(IndexDirError, match="not an s3 index"):
        build_index(corpus, "bm25", tmp_path / "mine", overwrite=True)


def test_dense_encoder_mismatch_is_an_error(corpus: Path, tmp_path: Path) -> None:
    out = build_index(corpus, "dense", tmp_path / "dense")
    mf = out / "index.json"
    m = json.loads(mf.read_text())
    assert m["encoder"]["name"] == "minilm" and m["encoder"]["dim"] == 384 and len(m["encoder"]["fingerprint"]) == 64
    m["encoder"]["fingerprint"] = "0" * 64  # as if built with other weights
    mf.write_text(json.dumps(m))
    with pytest.raises(IndexDirError, match="encoder mismatch"):
        load_retriever(RetrieverConfig(), out)


def test_cli_build_query_and_questions(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    idx = tmp_path / "idx"
    assert main(["index", "build", "--corpus", str(corpus), "--backend", "bm25", "--out", str(idx)]) == 0
    assert "built bm25 index of 3 documents" in capsys.readouterr().out
    assert main(["retrieve", "--index", str(idx), "--k", "2", "helium", "nucleus"]) == 0
    out = capsys.readouterr().out
    assert "Alpha" in out and "Gamma" not in out
    qs = tmp_path / "q.jsonl"
    _write(qs, [
        {"id": "q1", "question": "what does beta decay emit?", "golden_answers": ["electron"], "metadata": {"supporting_ids": ["b"]}},
        {"id": "q2", "question": "high energy photons", "golden_answers": ["gamma"], "metadata": {"supporting_ids": ["c", "a"]}},
    ])
    run = tmp_path / "run.jsonl"
    assert main(["retrieve", "--index", str(idx), "--questions", str(qs), "--k", "3", "--out", str(run)]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in run.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2"]
    assert rows[0]["documents"][0] == {"id": "b", "title": "Beta", "score": pytest.approx(rows[0]["documents"][0]["score"])}
    assert set(rows[0]["documents"][0]) == {"id", "title", "score"}
    assert "support recall" in out and "any gold in top-k" in out


def test_cli_errors_are_one_line(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["retrieve", "--index", str(tmp_path / "missing"), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: index directory not found") and "\n" not in err
    assert main(["index", "build", "--corpus", str(corpus), "--backend", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "unknown retrieval backend 'nope'" in capsys.readouterr().err
    idx = build_index(corpus, "bm25", tmp_path / "idx")
    assert main(["retrieve", "--index", str(idx), "--k", "0", "x"]) == 2
    assert "--k must be positive" in capsys.readouterr().err
