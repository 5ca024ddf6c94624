"""A bm25s index built in bounded memory: the corpus streams through, the score matrix is assembled on disk.

`bm25s.BM25.index` needs every document's token ids in memory and then three arrays of all (document, token) pairs
plus scipy's CSC copy: ~2.1 GB at 1M passages, ~44 GB projected for wiki-18's 21M. This builder writes the same
files (`data/indices/indptr.csc.index.npy`, `vocab.index.json`, `params.index.json`, the non-occurrence array for
BM25L/BM25+), byte-compatible with `bm25s.BM25.load`, in three streaming passes:

1. tokenize each passage once (bm25s's own `Tokenizer`), spill its (token id, term frequency) pairs to disk, count
   document frequencies and keep one length per document;
2. score the spilled pairs block by block with bm25s's own idf / tf formulas (so the numbers are the library's) and
   route them to bucket files by token-id range, each bucket a bounded number of pairs;
3. sort each bucket by token (stable: documents stay ascending in a column, as scipy's CSC has them) and append it
   to the output arrays.

What stays in memory grows with the vocabulary and one length per document (4 bytes), not with the text or the
pairs. The temporary files (~20 bytes a pair) sit under the index folder and go when the build ends.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from s3core.frameworks import import_bm25s

# pairs a bucket holds at most (12 bytes each: token, document, score) -> ~190 MB to sort one bucket
BUCKET_PAIRS = 16_000_000
# documents scored per block in pass 2, and buffered per spill write in pass 1
BLOCK_DOCS = 50_000


# one scored pair in a bucket file: token id, document id, score
_PAIR = np.dtype([("t", "<i4"), ("d", "<i4"), ("s", "<f4")])
_SCORE = np.dtype("float32")  # bm25s's stored dtype
_DOC_ID = np.dtype("int32")  # document ids (< 2**31); indptr is int64, as scipy's CSC has them here


def _write_npy_header(f: BinaryIO, dtype: np.dtype, n: int) -> None:
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                                             "shape": (n,)})


def _spill(texts: Iterable[str], n_docs: int, tok: Any, tmp: Path, progress: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pass 1: tokenize each passage once, append its distinct (token, tf) pairs to tmp/tok.bin + tmp/tf.bin.
    Returns (tokens per document, distinct tokens per document, document frequency per token id)."""
    from tqdm import tqdm

    lengths = np.zeros(n_docs, dtype=np.int32)  # bm25's l_d
    uniques = np.zeros(n_docs, dtype=np.int32)  # the document's pairs
    df = np.zeros(1024, dtype=np.int64)
    seen = 0
    buf_t: list[np.ndarray] = []
    buf_f: list[np.ndarray] = []
    with open(tmp / "tok.bin", "wb") as ft, open(tmp / "tf.bin", "wb") as ff:
        def flush() -> None:
            ft.write(np.concatenate(buf_t).tobytes())
            ff.write(np.concatenate(buf_f).tobytes())
            buf_t.clear()
            buf_f.clear()

        for i, ids in enumerate(tqdm(tok.streaming_tokenize(texts, update_vocab=True), total=n_docs,
                                     desc="bm25 tokenizing", unit="doc", disable=not progress)):
            if i >= n_docs:
                raise ValueError(f"bm25 build: more passages than the {n_docs} announced")
            arr = np.asarray(ids, dtype=np.int32)
            t, c = np.unique(arr, return_counts=True)
            lengths[i], uniques[i] = arr.size, t.size
            if t.size:
                if t[-1] >= df.size:
                    df = np.concatenate([df, np.zeros(max(df.size, int(t[-1]) + 1 - df.size), dtype=np.int64)])
                df[t] += 1
            buf_t.append(t)
            buf_f.append(c.astype(np.int32))
            seen = i + 1
            if len(buf_t) >= BLOCK_DOCS:
                flush()
        if buf_t:
            flush()
    if seen != n_docs:
        raise ValueError(f"bm25 build: {seen} passages streamed, {n_docs} announced")
    return lengths, uniques, df


def _bucket_starts(df: np.ndarray, bucket_pairs: int) -> np.ndarray:
    """First token id of each bucket: at most `bucket_pairs` pairs a bucket (a single larger token is its own)."""
    starts = [0]
    acc = 0
    for t_id, d in enumerate(df.tolist()):
        if acc and acc + d > bucket_pairs:
            starts.append(t_id)
            acc = 0
        acc += d
    return np.asarray(starts, dtype=np.int64)


def _score_into_buckets(tmp: Path, lengths: np.ndarray, uniques: np.ndarray, bounds: np.ndarray,
                        score: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], progress: bool) -> None:
    """Pass 2: the spilled pairs scored block by block, each appended to its token-range bucket file (documents stay
    in ascending order within a bucket)."""
    from tqdm import tqdm

    n_docs = lengths.size
    with contextlib.ExitStack() as stack:
        buckets = [stack.enter_context(open(tmp / f"bucket_{j:05d}.bin", "wb")) for j in range(len(bounds))]
        ft = stack.enter_context(open(tmp / "tok.bin", "rb"))
        ff = stack.enter_context(open(tmp / "tf.bin", "rb"))
        bar = stack.enter_context(tqdm(total=n_docs, desc="bm25 scoring", unit="doc", disable=not progress))
        for d0 in range(0, n_docs, BLOCK_DOCS):
            d1 = min(n_docs, d0 + BLOCK_DOCS)
            per_doc = uniques[d0:d1]
            m = int(per_doc.sum(dtype=np.int64))
            rec = np.empty(m, dtype=_PAIR)
            rec["t"] = np.fromfile(ft, dtype=np.int32, count=m)
            rec["d"] = np.repeat(np.arange(d0, d1, dtype=np.int32), per_doc)
            tfs = np.fromfile(ff, dtype=np.int32, count=m).astype(_SCORE)
            rec["s"] = score(rec["t"], tfs, np.repeat(lengths[d0:d1], per_doc))
            which = np.searchsorted(bounds, rec["t"], side="right") - 1
            order = np.argsort(which, kind="stable")
            rec, which = rec[order], which[order]
            cuts = np.searchsorted(which, np.arange(len(bounds) + 1))
            for j, f in enumerate(buckets):
                if cuts[j + 1] > cuts[j]:
                    f.write(rec[cuts[j] : cuts[j + 1]].tobytes())
            bar.update(d1 - d0)
    (tmp / "tok.bin").unlink()
    (tmp / "tf.bin").unlink()


def _assemble(tmp: Path, out_dir: Path, n_buckets: int, nnz: int, progress: bool) -> None:
    """Pass 3: each bucket sorted by token (stable: documents stay ascending) and appended to the CSC arrays."""
    from tqdm import tqdm

    with open(out_dir / "data.csc.index.npy", "wb") as fd, open(out_dir / "indices.csc.index.npy", "wb") as fi:
        _write_npy_header(fd, _SCORE, nnz)
        _write_npy_header(fi, _DOC_ID, nnz)
        for j in tqdm(range(n_buckets), desc="bm25 assembling", unit="bucket", disable=not progress):
            path = tmp / f"bucket_{j:05d}.bin"
            rec = np.fromfile(path, dtype=_PAIR)
            path.unlink()
            rec = rec[np.argsort(rec["t"], kind="stable")]
            fd.write(rec["s"].tobytes())
            fi.write(rec["d"].tobytes())


def build_streaming(texts: Iterable[str], n_docs: int, out_dir: Path, *, method: str, k1: float, b: float,
                    delta: float = 0.5, stopwords: str | list[str] | None = None, stemmer: Any = None,
                    progress: bool = False, bucket_pairs: int = BUCKET_PAIRS) -> None:
    """Index `texts` (exactly `n_docs` of them) into `out_dir` in bm25s's saved format."""
    bm25s = import_bm25s()
    from bm25s import scoring
    from bm25s.tokenization import Tokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "_build"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        tok = Tokenizer(stopwords=stopwords or [], stemmer=stemmer)
        lengths, uniques, df = _spill(texts, n_docs, tok, tmp, progress)
        vocab: dict[str, int] = dict(tok.get_vocab_dict())
        n_vocab = len(vocab)  # the matrix's columns: the tokenizer's ids (bm25s adds "" after, as a column-less id)
        df = df[:n_vocab] if df.size >= n_vocab else np.concatenate([df, np.zeros(n_vocab - df.size, np.int64)])
        avg_len = lengths.mean() if n_docs else 0.0  # float64, as bm25s computes it

        # bm25s's own formulas, so the numbers are the library's
        doc_freqs = dict(enumerate(df.tolist()))
        idf_fn, tfc_fn = scoring._select_idf_scorer(method), scoring._select_tfc_scorer(method)
        idf = scoring._build_idf_array(doc_frequencies=doc_freqs, n_docs=n_docs, compute_idf_fn=idf_fn,
                                       dtype="float32")
        nonocc = None
        if method in ("bm25l", "bm25+"):
            nonocc = scoring._build_nonoccurrence_array(
                doc_frequencies=doc_freqs, n_docs=n_docs, compute_idf_fn=idf_fn, calculate_tfc_fn=tfc_fn,
                l_d=avg_len, l_avg=avg_len, k1=k1, b=b, delta=delta, dtype="float32")

        def score(toks: np.ndarray, tfs: np.ndarray, l_d: np.ndarray) -> np.ndarray:
            # per element the same float64 operations bm25s runs per document, then float32 as it stores them
            s = idf[toks] * tfc_fn(tf_array=tfs, l_d=l_d, l_avg=avg_len, k1=k1, b=b, delta=delta)
            if nonocc is not None:
                s -= nonocc[toks]
            return s.astype(_SCORE)  # type: ignore[no-any-return]

        bounds = _bucket_starts(df, bucket_pairs)
        _score_into_buckets(tmp, lengths, uniques, bounds, score, progress)
        _assemble(tmp, out_dir, len(bounds), int(uniques.sum(dtype=np.int64)), progress)
        indptr = np.zeros(n_vocab + 1, dtype=np.int64)
        indptr[1:] = np.cumsum(df)
        np.save(out_dir / "indptr.csc.index.npy", indptr)
        if nonocc is not None:
            np.save(out_dir / "nonoccurrence_array.index.npy", nonocc)

        if "" not in vocab:  # bm25s.BM25.index(create_empty_token=True)
            vocab[""] = max(vocab.values(), default=-1) + 1
        (out_dir / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        model = bm25s.BM25(method=method, k1=k1, b=b, delta=delta)
        params = dict(k1=model.k1, b=model.b, delta=model.delta, method=model.method, idf_method=model.idf_method,
                      dtype=model.dtype, int_dtype=model.int_dtype, num_docs=n_docs, version=bm25s.__version__,
                      backend=model.backend)
        (out_dir / "params.index.json").write_text(json.dumps(params, indent=4))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
