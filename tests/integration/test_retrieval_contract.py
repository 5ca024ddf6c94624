"""One contract every retriever passes: bm25s, Lucene (pyserini), dense (MiniLM + faiss flat) and remote (HTTP
client against our real /retrieve server on loopback, serving the bm25 index).

Tiny corpus, hand-derived answers: every document contains "article", so a query for it matches all six;
d4 and d5 are identical passages (exact ties, to be ordered by corpus order).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3core.errors import RetrievalError
from searcher.config import RetrieverConfig
from searcher.retrieval import build_index, load_retriever

pytestmark = pytest.mark.integration

CORPUS = [
    {"id": "d0", "title": "Paris", "text": "This article is about Paris, the capital of France."},
    {"id": "d1", "title": "Berlin", "text": "This article is about Berlin, the capital of Germany."},
    {"id": "d2", "title": "Tokyo", "text": "This article is about Tokyo, the capital of Japan. Japan is an island country."},
    {"id": "d3", "title": "Banana", "text": "This article is about the banana, a long yellow fruit."},
    {"id": "d4", "title": "Chromodynamics", "text": "This article is about quantum chromodynamics and quarks."},
    {"id": "d5", "title": "Chromodynamics", "text": "This article is about quantum chromodynamics and quarks."},
]
# (query, expected best document) - unambiguous for any sensible lexical or semantic retriever
HAND_DERIVED = [("banana yellow fruit", "d3"), ("capital of Germany", "d1"), ("Japan island", "d2"), ("Paris France", "d0")]
BACKENDS = ["bm25", "lucene", "dense", "remote"]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("corpus") / "tiny.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in CORPUS), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def index_dirs(corpus_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {}


def _build(backend: str, corpus_file: Path, cache: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if backend not in cache:
        cache[backend] = build_index(corpus_file, backend, tmp_path_factory.mktemp(backend) / "index", RetrieverConfig())
    return cache[backend]


@pytest.fixture(scope="module")
def bm25_server(corpus_file: Path, index_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from searcher.retrieval.server import create_retrieve_app, serve_in_thread

    retriever = load_retriever(RetrieverConfig(), _build("bm25", corpus_file, index_dirs, tmp_path_factory))
    with serve_in_thread(create_retrieve_app(retriever)) as url:
        yield url


@pytest.fixture(scope="module", params=BACKENDS)
def retriever(request: pytest.FixtureRequest, corpus_file: Path, index_dirs: dict[str, Path],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    backend = request.param
    if backend == "remote":
        url = request.getfixturevalue("bm25_server")
        cfg = RetrieverConfig.model_validate({"backend": "remote", "remote": {"url": url, "max_retries": 0}})
        # closed here, not left to the collector: its pooled loopback socket was reaped (ResourceWarning) in
        # whichever later test happened to be running (test_service_faults in CI)
        with load_retriever(cfg) as remote:
            yield remote
        return
    yield load_retriever(RetrieverConfig(), _build(backend, corpus_file, index_dirs, tmp_path_factory))


def ids(docs: list) -> list[str]:  # type: ignore[type-arg]
    return [d.id for d in docs]


def test_hand_derived_best_documents(retriever) -> None:  # type: ignore[no-untyped-def]
    results = retriever.search([q for q, _ in HAND_DERIVED], 2)
    assert [r[0].id for r in results] == [want for _, want in HAND_DERIVED]
    for r in results:
        assert [d.score for d in r] == sorted((d.score for d in r), reverse=True)


def test_batch_equals_one_by_one(retriever) -> None:  # type: ignore[no-untyped-def]
    queries = [q for q, _ in HAND_DERIVED]
    batched = retriever.search(queries, 3)
    single = [retriever.search([q], 3)[0] for q in queries]
    assert [ids(r) for r in batched] == [ids(r) for r in single]
    for a, b in zip(batched, single, strict=True):
        assert [d.score for d in a] == pytest.approx([d.score for d in b], rel=1e-5)


def test_ties_follow_corpus_order(retriever) -> None:  # type: ignore[no-untyped-def]
    (docs,) = retriever.search(["quantum chromodynamics quarks"], 2)
    assert ids(docs) == ["d4", "d5"]
    assert docs[0].score == pytest.approx(docs[1].score, abs=1e-5)
    (one,) = retriever.search(["quantum chromodynamics quarks"], 1)
    assert ids(one) == ["d4"]


def test_k_larger_than_corpus_returns_every_document(retriever) -> None:  # type: ignore[no-untyped-def]
    (docs,) = retriever.search(["article"], 50)
    assert sorted(ids(docs)) == [r["id"] for r in CORPUS]
    assert len(retriever) == len(CORPUS)


def test_documents_carry_title_text_and_match_get(retriever) -> None:  # type: ignore[no-untyped-def]
    (docs,) = retriever.search(["banana yellow fruit"], 1)
    assert docs[0].title == "Banana" and docs[0].text == CORPUS[3]["text"]
    got = retriever.get(["d3", "d0"])
    assert [(d.id, d.title, d.text) for d in got] == [("d3", "Banana", CORPUS[3]["text"]), ("d0", "Paris", CORPUS[0]["text"])]
    with pytest.raises(RetrievalError, match="nope"):
        retriever.get(["nope"])


@pytest.mark.parametrize(("queries", "k", "msg"), [([], 3, "empty query list"), ([""], 3, "query 0 is empty"),
                                                   (["ok"], 0, "positive integer"), (["ok"], -2, "positive integer"),
                                                   ("ok", 3, "single string")])
def test_bad_input_is_one_clear_error(retriever, queries, k, msg) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RetrievalError, match=msg):
        retriever.search(queries, k)


def test_save_and_load_round_trip(retriever, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    queries = [q for q, _ in HAND_DERIVED] + ["article"]
    before = retriever.search(queries, 4)
    saved = retriever.save(tmp_path / "copy")
    again = load_retriever(RetrieverConfig(), saved)  # no flag: the manifest says what it is
    assert again.backend == retriever.backend
    try:
        after = again.search(queries, 4)
    finally:
        close = getattr(again, "close", None)  # the remote copy holds a pooled loopback connection
        if close is not None:
            close()
    assert [ids(r) for r in after] == [ids(r) for r in before]
    for a, b in zip(after, before, strict=True):
        assert [d.score for d in a] == pytest.approx([d.score for d in b], rel=1e-5)


def test_bm25_scores_match_the_formula_by_hand(retriever) -> None:  # type: ignore[no-untyped-def]
    """Lucene-variant BM25 computed by hand from token counts: idf = ln(1 + (N - df + .5) / (df + .5)),
    tf part = tf / (tf + k1 (1 - b + b dl / avgdl)) (Lucene >= 8 dropped the constant (k1 + 1) factor)."""
    if retriever.backend != "bm25":
        pytest.skip("formula check is for the bm25s backend")
    import bm25s
    import Stemmer

    toks = bm25s.tokenize([f"{r['title']}\n{r['text']}" for r in CORPUS], stopwords="en",
                          stemmer=Stemmer.Stemmer("english"), return_ids=False, show_progress=False)
    n, avgdl, k1, b = len(CORPUS), sum(len(t) for t in toks) / len(CORPUS), 1.5, 0.75
    term = "japan"
    df = sum(term in t for t in toks)
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    tf = Counter(toks[2])[term]
    expected = idf * tf / (tf + k1 * (1 - b + b * len(toks[2]) / avgdl))
    (docs,) = retriever.search(["Japan"], 5)
    assert ids(docs) == ["d2"]  # lexical: only the matching document
    assert docs[0].score == pytest.approx(expected, rel=1e-5)
