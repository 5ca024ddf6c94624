"""Retrieval benchmark: one table of throughput (and dense index costs) with ratios to a same-run baseline.

    nice -n 10 .venv/bin/python benchmarks/retrieval.py                       # full: 200k dense vectors
    nice -n 10 .venv/bin/python benchmarks/retrieval.py --vectors 20000 --no-lucene   # quick

Rows:
- bm25: our BM25Retriever.search vs bm25s.BM25.retrieve called directly on the same loaded index, same queries.
- lucene: our LuceneRetriever.search vs pyserini LuceneSearcher.batch_search directly (same index).
- http: POST /retrieve over loopback (uvicorn, N queries per request) vs in-process search of the same batches.
- dense flat / hnsw / ivfpq over `--vectors` vectors of dim 384 (a SYNTHETIC scaling check, kept for comparison
  with earlier runs; the compressed types on 35k real passages and real questions: benchmarks/retrieval_scale.py): build time, bytes on disk, peak extra RSS,
  queries/s, recall@10 relative to flat. The vectors are REAL all-MiniLM-L6-v2 embeddings of hotpotqa paragraphs
  (from `--dense-index`, or encoded here) plus perturbed copies of them (gaussian noise, re-normalised) up to
  `--vectors`; queries are perturbed copies of real vectors. The table says how many were real.
Corpus and questions: hotpotqa_dev500 (4,943 paragraphs, 500 questions), prepared with dataprep (`s3 data prepare`).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"


def _qps(fn: Any, n: int, repeat: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def bench_bm25(work: Path, corpus: Path, queries: list[str], repeat: int) -> list[tuple[str, ...]]:
    import bm25s

    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index, load_retriever

    ours = load_retriever(RetrieverConfig(), build_index(corpus, "bm25", work / "bm25", overwrite=True))
    model = ours.model

    def direct() -> None:
        toks = bm25s.tokenize(queries, stopwords="en", stemmer=ours._stemmer, return_ids=False, show_progress=False)
        model.retrieve(toks, k=10, show_progress=False)

    base = _qps(direct, len(queries), repeat)
    mine = _qps(lambda: ours.search(queries, 10), len(queries), repeat)
    return [("bm25s direct (baseline)", f"{base:,.0f}", "1.00x", ""),
            ("bm25: s3 BM25Retriever", f"{mine:,.0f}", f"{mine / base:.2f}x", "goal >= 0.9x")], ours  # type: ignore[return-value]


def bench_lucene(work: Path, corpus: Path, queries: list[str], repeat: int) -> list[tuple[str, ...]]:
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index, load_retriever

    ours = load_retriever(RetrieverConfig(), build_index(corpus, "lucene", work / "lucene", overwrite=True))
    s = ours.searcher
    qids = [str(i) for i in range(len(queries))]
    base = _qps(lambda: s.batch_search(queries, qids, k=10, threads=ours.threads), len(queries), repeat)
    mine = _qps(lambda: ours.search(queries, 10), len(queries), repeat)
    return [("pyserini batch_search direct (baseline)", f"{base:,.0f}", "1.00x", ""),
            ("lucene: s3 LuceneRetriever", f"{mine:,.0f}", f"{mine / base:.2f}x", "")]


def bench_http(retriever: Any, queries: list[str], per_request: int, repeat: int) -> list[tuple[str, ...]]:
    import httpx

    from searcher.config import ServiceConfig
    from searcher.retrieval.server import create_retrieve_app, serve_in_thread

    batches = [queries[i : i + per_request] for i in range(0, len(queries), per_request)]
    base = _qps(lambda: [retriever.search(b, 10) for b in batches], len(queries), repeat)
    app = create_retrieve_app(retriever, ServiceConfig(batch_window_ms=1.0))
    with serve_in_thread(app) as url, httpx.Client(timeout=60) as client:
        def over_http() -> None:
            for b in batches:
                client.post(f"{url}/retrieve", json={"queries": b, "topk": 10, "return_scores": True}).raise_for_status()

        http = _qps(over_http, len(queries), repeat)
    return [(f"in-process search, {per_request}/call (baseline)", f"{base:,.0f}", "1.00x", ""),
            (f"http /retrieve loopback, {per_request} queries/request", f"{http:,.0f}", f"{http / base:.2f}x", "goal >= 0.8x")]


def _real_vectors(dense_index: Path | None, corpus: Path, n_real: int) -> np.ndarray:
    import faiss

    if dense_index is not None:
        index = faiss.read_index(str(dense_index / "dense.faiss"))
        return index.reconstruct_n(0, index.ntotal).astype(np.float32)
    from s3core.corpus import iter_corpus
    from searcher.retrieval.dense import encode, load_encoder, resolve_encoder

    docs = [d for _, d in zip(range(n_real), iter_corpus(corpus), strict=False)]
    model = load_encoder(resolve_encoder("minilm"), "cpu")
    return encode(model, [f"{d.title}\n{d.text}" for d in docs], 64, True, True)


def _perturb(real: np.ndarray, n: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    src = real[rng.integers(0, real.shape[0], size=n)]
    out = src + rng.normal(0, sigma, size=src.shape).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32)


def _dense_child(kind: str, vectors: np.ndarray, queries: np.ndarray, out: Any) -> None:
    import faiss
    import psutil

    from searcher.config import DenseConfig

    faiss.omp_set_num_threads(2)
    start_rss = psutil.Process().memory_info().rss
    cfg = DenseConfig(index_type=kind)  # type: ignore[arg-type]
    from searcher.retrieval.dense import make_faiss_index

    t = time.perf_counter()
    index, params = make_faiss_index(vectors, cfg)
    build = time.perf_counter() - t
    if kind == "hnsw":
        index.hnsw.efSearch = cfg.hnsw_ef_search
    elif kind == "ivfpq":
        index.nprobe = min(cfg.ivf_nprobe, params["ivf_nlist"])
    with tempfile.TemporaryDirectory() as d:
        faiss.write_index(index, f"{d}/i.faiss")
        size = os.path.getsize(f"{d}/i.faiss")
    index.search(queries[:10], 10)
    t = time.perf_counter()
    _, ids = index.search(queries, 10)
    qps = len(queries) / (time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start_rss
    out.put((kind, build, size, max(peak, 0), qps, ids, params))


def bench_dense(real: np.ndarray, n_vectors: int, n_queries: int) -> list[tuple[str, ...]]:
    rng = np.random.default_rng(0)
    n_real = min(real.shape[0], n_vectors)
    vectors = np.concatenate([real[:n_real], _perturb(real, n_vectors - n_real, 0.05, rng)]) if n_vectors > n_real else real[:n_vectors]
    queries = _perturb(real, n_queries, 0.08, rng)
    ctx = mp.get_context("fork")
    results = {}
    for kind in ("flat", "hnsw", "ivfpq"):
        q: Any = ctx.Queue()
        p = ctx.Process(target=_dense_child, args=(kind, vectors, queries, q))
        p.start()
        results[kind] = q.get()
        p.join()
    flat_ids = results["flat"][5]
    rows: list[tuple[str, ...]] = []
    note = (f"SYNTHETIC scaling check: {n_vectors:,} x {vectors.shape[1]}: {n_real:,} real MiniLM vectors + "
            f"{n_vectors - n_real:,} perturbed copies (real-passage numbers: benchmarks/retrieval_scale.py)")
    for kind in ("flat", "hnsw", "ivfpq"):
        _, build, size, peak, qps, ids, params = results[kind]
        recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), flat_ids.tolist(), strict=True)]))
        extra = {k: v for k, v in params.items() if k not in ("index_type", "dim")}
        rows.append((f"dense {kind} {extra or ''}".strip(), f"{qps:,.0f}", f"{qps / results['flat'][4]:.2f}x",
                     f"build {build:.1f}s, disk {size / 2**20:.1f} MiB, peak +{peak / 2**20:.0f} MiB RSS, "
                     f"recall@10 vs flat {recall:.3f}"))
    rows.append(("  (dense data)", "", "", note))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--vectors", type=int, default=200_000, help="dense vectors (>= 200k for the issue's table)")
    ap.add_argument("--dense-queries", type=int, default=1000)
    ap.add_argument("--dense-index", type=Path, default=None, help="a built dense index to take real vectors from")
    ap.add_argument("--real", type=int, default=1000, help="passages to encode when no --dense-index is given")
    ap.add_argument("--per-request", type=int, default=64, help="queries per /retrieve request (>= 32)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-lucene", action="store_true")
    ap.add_argument("--no-dense", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

    from rich.console import Console
    from rich.table import Table

    from dataprep import prepare
    from s3core.corpus import read_questions

    work = Path(tempfile.mkdtemp(prefix="s3-bench-retrieval-"))
    prepare("hotpotqa", [HOTPOT], work / "hp")
    corpus = work / "hp" / "corpus.jsonl"
    queries = [q.question for q in read_questions(work / "hp" / "questions.jsonl")]

    rows: list[tuple[str, ...]] = []
    bm25_rows, bm25 = bench_bm25(work, corpus, queries, args.repeat)  # type: ignore[misc]
    rows += bm25_rows
    if not args.no_lucene:
        rows += bench_lucene(work, corpus, queries, args.repeat)
    rows += bench_http(bm25, queries, args.per_request, args.repeat)
    if not args.no_dense:
        rows += bench_dense(_real_vectors(args.dense_index, corpus, args.real), args.vectors, args.dense_queries)

    table = Table(title=f"retrieval benchmark (hotpotqa_dev500: {len(queries)} queries, k=10, best of {args.repeat})")
    for col in ("what", "queries/s", "vs baseline", "notes"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
