"""Retrieval: one batched protocol, four backends, self-describing index directories.

    from searcher.retrieval import build_index, load_retriever
    index_dir = build_index("corpus.jsonl", "bm25", "indexes/bm25", cfg.retriever)
    retriever = load_retriever(cfg.retriever, index_dir)
    retriever.search(["who wrote hamlet?"], k=3)  # -> list[list[Document]], scores set

Backends: `bm25` (bm25s + PyStemmer, the embedded default), `lucene` (pyserini), `dense` (sentence-transformers +
faiss flat / HNSW, or compressed codes + rescoring on vectors on disk, tuned to a recall target), `remote` (HTTP client of the Search-R1 /retrieve contract).
Heavy dependencies are imported only when their backend is used.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from s3core.corpus import TITLE_RULE, iter_corpus
from s3core.errors import ConfigError, IndexDirError
from s3core.io import file_sha256
from searcher.config import RetrieverConfig
from searcher.retrieval.base import Retriever, check_k, check_queries, top_k_rows
from searcher.retrieval.metrics import RecallAtK, recall_at_k, support_recall
from searcher.retrieval.store import (
    MANIFEST,
    CorpusInfo,
    DocStore,
    IndexManifest,
    open_docstore,
    read_manifest,
    write_docstore,
)
from searcher.retrieval.title_rule import check_title_rule

BACKENDS = ("bm25", "lucene", "dense", "remote")
INDEX_BACKENDS = ("bm25", "lucene", "dense")

__all__ = [
    "BACKENDS",
    "DocStore",
    "IndexManifest",
    "RecallAtK",
    "Retriever",
    "build_index",
    "check_k",
    "check_queries",
    "check_title_rule",
    "load_retriever",
    "read_manifest",
    "rebuild_command",
    "recall_at_k",
    "support_recall",
    "top_k_rows",
]


def _progress(items: Iterable[Any], on: bool, desc: str) -> Iterable[Any]:
    if not on:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="doc")


def _check_backend(backend: str, allowed: tuple[str, ...]) -> None:
    if backend not in allowed:
        raise ConfigError(f"unknown retrieval backend {backend!r}; choose one of: {', '.join(allowed)}")


def build_index(
    corpus_path: str | Path,
    backend: str,
    out_dir: str | Path,
    cfg: RetrieverConfig | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Build a self-describing index directory from a corpus jsonl; returns `out_dir`.

    The directory is built beside `out_dir` and moved into place at the end, so a failed build leaves nothing
    half-written. Malformed corpus lines and duplicate ids are DataFormatErrors naming the line.
    """
    _check_backend(backend, INDEX_BACKENDS)
    cfg = cfg or RetrieverConfig()
    corpus = Path(corpus_path)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise IndexDirError(f"{out} already exists and is not empty (pass --overwrite to replace it)")
        if out.is_dir() and not (out / MANIFEST).is_file():
            raise IndexDirError(f"refusing to overwrite {out}: it is not an s3 index directory")
    corpus_sha = file_sha256(corpus) if corpus.is_file() else ""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        count, store_info = write_docstore(_progress(iter_corpus(corpus), progress, "writing doc store"), tmp)
        if count == 0:
            raise IndexDirError(f"{corpus}: the corpus has no documents")
        manifest = IndexManifest(
            backend=backend,
            corpus=CorpusInfo(path=str(corpus), sha256=corpus_sha, bytes=corpus.stat().st_size, docs=count),
            title_rule=TITLE_RULE,
            docstore=store_info,
            doc_count=count,
        )
        store = open_docstore(tmp, manifest)
        try:
            if backend == "bm25":
                from searcher.retrieval.bm25 import build_bm25

                manifest.params = build_bm25(store, tmp, cfg.bm25, progress=progress)
            elif backend == "lucene":
                from searcher.retrieval.lucene import build_lucene

                manifest.params = build_lucene(store, tmp, cfg.lucene)
            else:
                from searcher.retrieval.dense import build_dense

                shards = Path(cfg.dense.embed_cache) if cfg.dense.embed_cache else out.parent / f".{out.name}.embeddings"
                manifest.params, manifest.encoder = build_dense(
                    store, tmp, cfg.dense, progress=progress, shard_dir=shards, docstore_sha=store_info.sha256,
                    keep_shards=cfg.dense.embed_cache is not None,
                )
        finally:
            store.close()
        manifest.write(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_retriever(
    cfg: RetrieverConfig | None = None,
    index_dir: str | Path | None = None,
    expect_corpus: str | Path | None = None,
) -> Any:
    """Open a retriever. The backend and its build parameters come from the index's manifest.

    - `index_dir` (or `cfg.index`) names an index built by `build_index`; `cfg` supplies query-time settings
      (dense device / threads / efSearch / nprobe, Lucene k1 / b / threads).
    - `cfg.backend == "remote"` needs no index: it talks to `cfg.remote.url`.
    - `cfg.backend == "lucene"` with `cfg.lucene.prebuilt_index` opens a pyserini prebuilt index.
    - `expect_corpus`: when given, the index must have been built from a file with the same sha256.
    """
    cfg = cfg or RetrieverConfig()
    _check_backend(cfg.backend, BACKENDS)
    if index_dir is None and cfg.index is not None:
        index_dir = cfg.index
    if index_dir is None:
        if cfg.backend == "remote":
            from searcher.retrieval.remote import RemoteRetriever

            return RemoteRetriever(cfg.remote)
        if cfg.backend == "lucene" and cfg.lucene.prebuilt_index:
            from searcher.retrieval.lucene import LuceneRetriever

            return LuceneRetriever.prebuilt(cfg.lucene)
        raise IndexDirError("no index directory given (set retriever.index or pass --index)")
    d = Path(index_dir)
    manifest = read_manifest(d)
    _check_backend(manifest.backend, BACKENDS)
    if manifest.backend == "remote":
        from searcher.retrieval.remote import RemoteRetriever

        remote = cfg.remote.model_copy(update={"url": manifest.params.get("url")})
        return RemoteRetriever(remote)
    if expect_corpus is not None:
        want = file_sha256(expect_corpus)
        have = manifest.corpus.sha256 if manifest.corpus else None
        if want != have:
            raise IndexDirError(
                f"{d} was built from a different corpus ({manifest.corpus.path if manifest.corpus else '?'}, "
                f"sha256 {str(have)[:12]}...) than {expect_corpus} (sha256 {want[:12]}...); rebuild the index"
            )
    check_title_rule(d, manifest, rebuild_command(d, manifest))
    store = open_docstore(d, manifest)
    try:
        return _open_backend(d, store, manifest, cfg)
    except (OSError, ValueError, KeyError, EOFError) as e:  # a backend file missing, truncated or not what it says
        what = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else f"{type(e).__name__}: {e}"
        raise IndexDirError(
            f"{d}: the {manifest.backend} index files are missing or damaged ({what}); rebuild the index: "
            f"{rebuild_command(d, manifest)}"
        ) from None


def rebuild_command(index_dir: Path, manifest: IndexManifest) -> str:
    """The `s3 index build` command that builds `index_dir` again from the corpus its manifest names, with the recorded
    build settings that differ from the defaults as `--set`s (the dense encoder's name included)."""
    backend = manifest.backend
    corpus = manifest.corpus.path if manifest.corpus else "CORPUS"
    words = ["s3", "index", "build", "--corpus", corpus, "--backend", backend, "--out", str(index_dir), "--overwrite"]
    section = getattr(RetrieverConfig(), backend, None)
    if isinstance(section, BaseModel):
        recorded = dict(manifest.params)
        if manifest.encoder and "name" in manifest.encoder:
            recorded["encoder"] = manifest.encoder["name"]
        for key, default in section.model_dump(mode="json").items():
            value = recorded.get(key, default)
            if value != default and (value is None or isinstance(value, str | int | float | bool)):
                shown = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
                words += ["--set", f"retriever.{backend}.{key}={shown}"]
    return shlex.join(words)


def _open_backend(d: Path, store: Any, manifest: Any, cfg: RetrieverConfig) -> Any:
    if manifest.backend == "bm25":
        from searcher.retrieval.bm25 import BM25Retriever

        return BM25Retriever(d, store, manifest)
    if manifest.backend == "lucene":
        from searcher.retrieval.lucene import LuceneRetriever

        return LuceneRetriever.load(d, store, manifest, cfg.lucene)
    from searcher.retrieval.dense import DenseRetriever

    return DenseRetriever(d, store, manifest, cfg.dense)
