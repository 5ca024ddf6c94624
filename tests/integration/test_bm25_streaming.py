"""The streaming bm25 build writes the index bm25s itself writes: same arrays, same vocabulary, same scores.

Real passages (HotpotQA dev's paragraphs), real bm25s + PyStemmer; buckets and blocks made small so every pass runs
many times (several token-range buckets, several scoring blocks, a partial last block)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import searcher.retrieval.bm25_build as bm25_build


def _passages(shared_data: Path, n: int) -> list[str]:
    out: list[str] = []
    with open(shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            for title, sents in zip(row["context"]["title"], row["context"]["sentences"], strict=True):
                out.append(f"{title}\n{''.join(sents)}")
                if len(out) == n:
                    return out
    return out


@pytest.mark.parametrize(("method", "stemmed"), [("lucene", True), ("robertson", True), ("atire", True),
                                               ("bm25l", True), ("bm25+", True), ("lucene", False)])
def test_streaming_build_equals_bm25s_index(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            method: str, stemmed: bool) -> None:
    import bm25s
    import Stemmer
    from bm25s.tokenization import Tokenizer

    texts = [*_passages(shared_data, 1_500), ""]  # an empty passage too
    stem = Stemmer.Stemmer("english") if stemmed else None  # without a stemmer the ids are word ids

    tok = Tokenizer(stopwords="en", stemmer=stem)
    ids = [np.asarray(x, dtype=np.int32) for x in tok.streaming_tokenize(iter(texts), update_vocab=True)]
    ref = bm25s.BM25(method=method)
    ref.index((ids, tok.get_vocab_dict()), show_progress=False)
    ref.save(str(tmp_path / "ref"), show_progress=False)

    monkeypatch.setattr(bm25_build, "BLOCK_DOCS", 400)  # 4 scoring blocks, the last one partial
    bm25_build.build_streaming(iter(texts), len(texts), tmp_path / "new", method=method, k1=1.5, b=0.75,
                               stopwords="en", stemmer=stem, bucket_pairs=5_000)

    for name in ("data", "indices", "indptr"):
        a = np.load(tmp_path / "ref" / f"{name}.csc.index.npy")
        b = np.load(tmp_path / "new" / f"{name}.csc.index.npy")
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), name  # bit for bit: the library's formulas, in the library's precision
    if method in ("bm25l", "bm25+"):
        assert np.array_equal(np.load(tmp_path / "ref" / "nonoccurrence_array.index.npy"),
                              np.load(tmp_path / "new" / "nonoccurrence_array.index.npy"))
    for name in ("vocab.index.json", "params.index.json"):
        assert json.loads((tmp_path / "ref" / name).read_text()) == json.loads((tmp_path / "new" / name).read_text())
    assert not (tmp_path / "new" / "_build").exists()  # the spill and bucket files are gone

    loaded = bm25s.BM25.load(str(tmp_path / "new"), mmap=True)
    q = loaded.get_tokens_ids(bm25s.tokenize(["Shirley Temple film"], stopwords="en", stemmer=stem,
                                             return_ids=False, show_progress=False)[0])
    assert np.array_equal(loaded.get_scores_from_ids(q), ref.get_scores_from_ids(q))


def test_streaming_build_names_a_short_stream(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2 passages streamed, 3 announced"):
        bm25_build.build_streaming(iter(["a cat sat", "a dog ran"]), 3, tmp_path / "x", method="lucene", k1=1.5,
                                   b=0.75)
