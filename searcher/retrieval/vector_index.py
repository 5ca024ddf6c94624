"""Dense vector indexes with a memory / recall dial: a first stage (faiss) + rescoring on full vectors kept on disk.

Index types (`retriever.dense.index_type`), resident bytes per vector for d-dimensional float32 vectors:

    flat        IndexFlatIP: exact, 4*d                                  (the reference every recall is measured on)
    hnsw        IndexHNSWFlat: 4*d + the graph (~8*M)                    (fast, more memory than flat)
    ivfpq       IVF + PQ: pq_m + 8 (the list ids)                        (+ rescoring)
    opq_ivfpq   OPQ rotation + IVF + PQ: pq_m + 8                        (+ rescoring)
    sq8 / sq4   scalar quantiser, 8 / 4 bits a dimension: d, d/2         (+ rescoring)
    hnsw_sq     HNSW graph over 8-bit codes: d + ~8*M                    (+ rescoring)
    binary      sign bits against per-dimension medians (faiss IndexLSH, `binary_bits` bits, default d): d/8
                (+ rescoring: Hamming distance alone ranks poorly; the full vectors put the top-k back in order)

Rescoring: the first stage returns `rescore` candidates per query; their float32 vectors are read from
`dense.vectors.f32` (row-major, n x d) with one `pread` each, and ranked by the exact inner product. The vectors
stay on disk (in the OS page cache when hot), so the searching process holds only the compressed codes: a
memory-mapped file would be as fast but every page it touches counts in the process's resident set.

`tune()` picks, for a recall target measured against the exact top-k on held-out tuning queries, the cheapest
setting of each type (nprobe / efSearch / rescoring depth) and the type with the least resident memory.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from s3core.errors import ConfigError, IndexDirError
from s3core.io import ReadOnlyFile
from searcher.config import DenseConfig

INDEX_FILE = "dense.faiss"
VECTORS_FILE = "dense.vectors.f32"
FLOAT_TYPES = ("flat", "hnsw")
COMPRESSED_TYPES = ("binary", "sq4", "sq8", "ivfpq", "opq_ivfpq", "hnsw_sq")
INDEX_TYPES = FLOAT_TYPES + COMPRESSED_TYPES
# Compressed types tried by `index_type = "auto"`, cheapest codes first.
AUTO_CANDIDATES = ("binary", "opq_ivfpq", "sq4", "sq8")
# Knob ladders the tuner walks (cheapest first).
RESCORE_LADDER = (0, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 1000)
NPROBE_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EF_LADDER = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
# Vectors added per faiss call while building (bounds the build's transient memory).
ADD_CHUNK = 65_536


@dataclass
class SearchSettings:
    """Query-time knobs of one index (recorded in the manifest by the tuner)."""

    nprobe: int | None = None
    ef_search: int | None = None
    rescore: int = 0

    def as_dict(self) -> dict[str, int]:
        out = {"rescore": int(self.rescore)}
        if self.nprobe is not None:
            out["nprobe"] = int(self.nprobe)
        if self.ef_search is not None:
            out["ef_search"] = int(self.ef_search)
        return out


def _faiss() -> Any:
    import faiss

    return faiss


def index_factory_string(kind: str, d: int, n: int, nlist: int, pq_m: int, pq_nbits: int, hnsw_m: int) -> tuple[str, dict[str, Any]]:
    """The faiss factory string of `kind` for n vectors of dimension d, and the effective parameters.

    Small corpora get fewer IVF lists / PQ bits (faiss wants ~39 training points a centroid; recorded)."""
    params: dict[str, Any] = {}
    if kind == "flat":
        return "Flat", params
    if kind == "hnsw":
        params["hnsw_m"] = hnsw_m
        return f"HNSW{hnsw_m},Flat", params
    if kind == "sq8":
        return "SQ8", params
    if kind == "sq4":
        return "SQ4", params
    if kind == "hnsw_sq":
        params["hnsw_m"] = hnsw_m
        return f"HNSW{hnsw_m},SQ8", params
    if kind in ("ivfpq", "opq_ivfpq"):
        if d % pq_m:
            raise ConfigError(f"retriever.dense.pq_m={pq_m} must divide the embedding dimension {d}")
        if kind == "opq_ivfpq" and n < 256:
            raise ConfigError(f"opq_ivfpq needs at least 256 vectors to train its rotation (got {n})")
        nl = max(1, min(nlist, n // 39))
        nbits = max(1, min(pq_nbits, int(math.log2(max(n // 39, 2)))))  # 39 training points a centroid
        params.update(ivf_nlist=nl, pq_m=pq_m, pq_nbits=nbits)
        head = f"OPQ{pq_m}," if kind == "opq_ivfpq" else ""
        return f"{head}IVF{nl},PQ{pq_m}x{nbits}", params
    raise ConfigError(f"unknown dense index type {kind!r}; choose one of: {', '.join(INDEX_TYPES)}")


def new_index(kind: str, d: int, n: int, cfg: DenseConfig) -> tuple[Any, dict[str, Any]]:
    """An empty faiss index of `kind` for n vectors of dim d (inner product); `cfg` is a DenseConfig."""
    faiss = _faiss()
    if kind == "binary":
        nbits = int(cfg.binary_bits or d)
        if nbits % 8:
            raise ConfigError(f"retriever.dense.binary_bits={nbits} must be a multiple of 8")
        # rotate only when asked for more (or fewer) bits than dimensions; thresholds = per-dimension medians
        index = faiss.IndexLSH(d, nbits, nbits != d, True)
        return index, {"binary_bits": nbits}
    spec, params = index_factory_string(kind, d, n, cfg.ivf_nlist, cfg.pq_m, cfg.pq_nbits, cfg.hnsw_m)
    index = faiss.index_factory(d, spec, faiss.METRIC_INNER_PRODUCT)
    if kind == "opq_ivfpq":  # faiss's defaults (50 rotations x PQ re-trainings) take minutes on 2 cores for ~no gain
        opq = faiss.downcast_VectorTransform(index.chain.at(0))
        opq.niter, opq.niter_pq_0, opq.max_train_points = 12, 12, 32_768
        params.update(opq_niter=12)
    if kind in ("hnsw", "hnsw_sq"):
        hnsw = faiss.downcast_index(index).hnsw
        hnsw.efConstruction = max(40, 2 * cfg.hnsw_m)
        params["ef_construction"] = hnsw.efConstruction
    params["factory"] = spec
    return index, params


def train_sample(vectors: np.ndarray, want: int, seed: int = 0) -> np.ndarray:
    """Up to `want` rows drawn evenly at random from a (possibly memory-mapped) array, in memory."""
    n = vectors.shape[0]
    if n <= want:
        return np.ascontiguousarray(vectors[:], dtype=np.float32)
    rows = np.sort(np.random.default_rng(seed).choice(n, size=want, replace=False))
    return np.ascontiguousarray(vectors[rows], dtype=np.float32)


def build_faiss(kind: str, vectors: np.ndarray, cfg: DenseConfig, progress: bool = False) -> tuple[Any, dict[str, Any]]:
    """Train (on a sample) and fill an index of `kind` from `vectors`, `ADD_CHUNK` rows at a time."""
    n, d = vectors.shape
    index, params = new_index(kind, d, n, cfg)
    if not index.is_trained:
        want = max(65_536, 64 * int(params.get("ivf_nlist", 1)))
        index.train(train_sample(vectors, want))
    from tqdm import tqdm

    with tqdm(total=n, desc=f"adding to {kind} index", unit="vec", disable=not progress) as bar:
        for start in range(0, n, ADD_CHUNK):
            chunk = np.ascontiguousarray(vectors[start : start + ADD_CHUNK], dtype=np.float32)
            index.add(chunk)
            bar.update(chunk.shape[0])
    params.update(index_type=kind, dim=int(d))
    return index, params


def apply_settings(index: Any, kind: str, s: SearchSettings) -> None:
    faiss = _faiss()
    if s.nprobe is not None and kind in ("ivfpq", "opq_ivfpq"):
        faiss.extract_index_ivf(index).nprobe = int(s.nprobe)
    if s.ef_search is not None and kind in ("hnsw", "hnsw_sq"):
        base = faiss.downcast_index(index)
        base.hnsw.efSearch = int(s.ef_search)


def index_bytes(index: Any) -> int:
    """Bytes of the serialised index: what reading it back keeps in memory (codes, ids, graph, centroids)."""
    faiss = _faiss()
    return int(faiss.serialize_index(index).nbytes)


class VectorFile(ReadOnlyFile):
    """Row-major float32 vectors on disk (`dense.vectors.f32`), read per row with pread (nothing stays resident)."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path = path
        self.dim = dim
        self.row_bytes = 4 * dim
        size = path.stat().st_size
        if size % self.row_bytes:
            raise IndexDirError(f"{path}: {size} bytes is not a whole number of {dim}-d float32 rows")
        self.n = size // self.row_bytes
        super().__init__(path)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of `rows` (any order, repeats allowed) as an (len(rows), dim) array."""
        if self._fd is None:
            raise IndexDirError(f"{self.path} is closed")
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        buf = memoryview(out.data).cast("B")
        rb = self.row_bytes
        fd = self._fd
        for i, r in enumerate(rows.tolist()):
            if os.preadv(fd, [buf[i * rb : (i + 1) * rb]], r * rb) != rb:
                raise IndexDirError(f"{self.path}: short read at row {r}")
        return out



def write_vectors(chunks: Iterable[np.ndarray], path: Path) -> int:
    """Append float32 chunks to a raw vectors file; returns the row count."""
    n = 0
    with path.open("wb") as fh:
        for c in chunks:
            fh.write(np.ascontiguousarray(c, dtype=np.float32).tobytes())
            n += c.shape[0]
    return n


def open_vectors(path: Path, dim: int) -> np.ndarray:
    """The vectors file as a read-only memory map (for building and tuning, not for serving)."""
    size = path.stat().st_size
    if size % (4 * dim):
        raise IndexDirError(f"{path}: {size} bytes is not a whole number of {dim}-d float32 rows")
    return np.memmap(path, dtype=np.float32, mode="r", shape=(size // (4 * dim), dim))


class VectorIndex:
    """A faiss first stage + optional rescoring: `search(queries, k) -> (scores, rows)` like faiss, rows -1 padded."""

    def __init__(self, index: Any, kind: str, settings: SearchSettings, vectors: VectorFile | None) -> None:
        self.index = index
        self.kind = kind
        self.settings = settings
        self.vectors = vectors
        if settings.rescore and kind in COMPRESSED_TYPES and vectors is None:
            raise IndexDirError(f"the {kind} index rescores on {VECTORS_FILE}, which is missing; rebuild the index")
        apply_settings(index, kind, settings)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def set(self, settings: SearchSettings) -> None:
        self.settings = settings
        apply_settings(self.index, self.kind, settings)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        n = self.ntotal
        k = min(k, n)
        depth = self.settings.rescore if self.kind in COMPRESSED_TYPES else 0
        if not depth or self.vectors is None:
            scores, rows = self.index.search(queries, k)
            if self.kind == "binary":  # Hamming distances: smaller is better; report a similarity
                scores = -scores
            return scores, rows
        depth = min(max(depth, k), n)
        _, cand = self.index.search(queries, depth)
        out_s = np.full((queries.shape[0], k), -np.inf, dtype=np.float32)
        out_r = np.full((queries.shape[0], k), -1, dtype=np.int64)
        for i, q in enumerate(queries):
            c = cand[i][cand[i] >= 0]
            if c.size == 0:
                continue
            exact = self.vectors.rows(c) @ q
            top = np.lexsort((c, -exact))[:k]
            out_s[i, : top.size] = exact[top]
            out_r[i, : top.size] = c[top]
        return out_s, out_r


def exact_topk(vectors: np.ndarray, queries: np.ndarray, k: int, chunk: int = ADD_CHUNK) -> np.ndarray:
    """Exact inner-product top-k rows per query, streaming over (memory-mapped) vectors; ties by row."""
    nq = queries.shape[0]
    best_s = np.full((nq, 0), -np.inf, dtype=np.float32)
    best_r = np.zeros((nq, 0), dtype=np.int64)
    for start in range(0, vectors.shape[0], chunk):
        block = np.asarray(vectors[start : start + chunk], dtype=np.float32)
        s = queries @ block.T
        r = np.broadcast_to(np.arange(start, start + block.shape[0]), s.shape)
        s = np.concatenate([best_s, s], axis=1)
        r = np.concatenate([best_r, r], axis=1)
        kk = min(k, s.shape[1])
        part = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
        best_s = np.take_along_axis(s, part, axis=1)
        best_r = np.take_along_axis(r, part, axis=1)
    order = np.lexsort((best_r, -best_s), axis=1)
    return np.take_along_axis(best_r, order, axis=1)


def recall_vs(truth: np.ndarray, rows: np.ndarray) -> float:
    """Mean overlap of each row of `rows` with the same row of `truth` (recall@k against the exact top-k)."""
    k = truth.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(truth, rows[:, :k], strict=True)]))


def settings_ladder(kind: str, n: int, nlist: int | None) -> list[SearchSettings]:
    """Settings of `kind` to try, roughly cheapest first."""
    rescore = [r for r in RESCORE_LADDER if r <= n]
    if kind == "flat":
        return [SearchSettings()]
    if kind == "hnsw":
        return [SearchSettings(ef_search=e) for e in EF_LADDER]
    if kind in ("ivfpq", "opq_ivfpq"):
        probes = [p for p in NPROBE_LADDER if p <= (nlist or 1)] or [1]
        combos = [SearchSettings(nprobe=p, rescore=r) for p in probes for r in rescore]
        # cost ~ lists scanned + rescored vectors read
        return sorted(combos, key=lambda s: ((s.nprobe or 1) / max(nlist or 1, 1) * n * 0.05 + s.rescore * 4, s.rescore))
    if kind == "hnsw_sq":
        combos = [SearchSettings(ef_search=e, rescore=r) for e in EF_LADDER for r in rescore]
        return sorted(combos, key=lambda s: ((s.ef_search or 0) + s.rescore * 4, s.rescore))
    return [SearchSettings(rescore=r) for r in rescore]  # binary, sq4, sq8


@dataclass
class TuneResult:
    kind: str
    settings: SearchSettings | None
    recall: float
    index_bytes: int
    build_s: float
    qps: float
    tried: list[dict[str, Any]] = field(default_factory=list)

    @property
    def met(self) -> bool:
        return self.settings is not None

    def as_dict(self) -> dict[str, Any]:
        skipped = self.tried[0].get("skipped") if self.tried else None
        return {
            "index_type": self.kind,
            **({"skipped": skipped} if skipped else {}),
            "settings": self.settings.as_dict() if self.settings else None,
            "tuning_recall": round(self.recall, 4),
            "index_bytes": self.index_bytes,
            "build_s": round(self.build_s, 2),
            "tuning_qps": round(self.qps, 1),
        }


def tune_settings(
    vi: VectorIndex, nlist: int | None, queries: np.ndarray, truth: np.ndarray, target: float, k: int
) -> tuple[SearchSettings | None, float, float, list[dict[str, Any]], SearchSettings]:
    """The cheapest setting of `vi`'s ladder with recall@k >= target on `queries` (None if none reaches it), its
    recall and queries/s, every point tried, and the best setting seen (the one reaching the target, else the one
    with the highest recall). Rescoring depths that cannot help (below k) are skipped."""
    tried: list[dict[str, Any]] = []
    best: tuple[float, float, SearchSettings] = (-1.0, 0.0, SearchSettings())
    for s in settings_ladder(vi.kind, vi.ntotal, nlist):
        if 0 < s.rescore < k:
            continue
        vi.set(s)
        t = time.perf_counter()
        _, rows = vi.search(queries, k)
        secs = time.perf_counter() - t
        r = recall_vs(truth, rows)
        qps = queries.shape[0] / max(secs, 1e-9)
        tried.append({**s.as_dict(), "recall": round(r, 4), "qps": round(qps, 1)})
        if r > best[0]:
            best = (r, qps, s)
        if r >= target:
            return s, r, qps, tried, s
    vi.set(best[2])
    return None, max(best[0], 0.0), best[1], tried, best[2]


def estimate_bytes(kind: str, n: int, d: int, cfg: DenseConfig) -> int:
    """Resident bytes an index of `kind` will need for n vectors of dim d (codes, ids, graph, centroids): lets the
    tuner skip types that cannot beat one already found."""
    nlist = max(1, min(int(cfg.ivf_nlist), n // 39))
    graph = 2 * int(cfg.hnsw_m) * 4
    per = {
        "flat": 4 * d, "hnsw": 4 * d + graph, "sq8": d, "sq4": d // 2, "hnsw_sq": d + graph,
        "binary": int(cfg.binary_bits or d) // 8, "ivfpq": int(cfg.pq_m) + 8, "opq_ivfpq": int(cfg.pq_m) + 8,
    }[kind]
    extra = nlist * d * 4 if kind in ("ivfpq", "opq_ivfpq") else 0
    if kind == "opq_ivfpq":
        extra += d * d * 4
    return n * per + extra


def tune(
    kinds: Sequence[str],
    vectors: np.ndarray,
    vectors_file: Path,
    queries: np.ndarray,
    target: float,
    cfg: DenseConfig,
    k: int = 10,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[TuneResult], dict[str, tuple[Any, dict[str, Any]]]]:
    """Build each index type in `kinds` over `vectors` (smallest expected memory first) and find its cheapest setting
    reaching recall@k >= target (vs the exact top-k) on `queries`; a type whose codes alone exceed an index that already
    met the target is skipped. Returns the results (met first, least index memory first) and the built indexes."""
    truth = exact_topk(vectors, queries, k)
    vf = VectorFile(vectors_file, vectors.shape[1])
    results: list[TuneResult] = []
    built: dict[str, tuple[Any, dict[str, Any]]] = {}
    n, d = vectors.shape
    try:
        for kind in sorted(kinds, key=lambda k: estimate_bytes(k, n, d, cfg)):
            met = [r.index_bytes for r in results if r.met]
            if met and estimate_bytes(kind, n, d, cfg) > min(met):
                why = f"its codes alone (~{estimate_bytes(kind, n, d, cfg):,} bytes) exceed an index that met the target"
                results.append(TuneResult(kind, None, 0.0, 0, 0.0, 0.0, [{"skipped": why}]))
                continue
            if progress:
                progress(f"tuning {kind}")
            t = time.perf_counter()
            try:
                index, params = build_faiss(kind, vectors, cfg)
            except ConfigError as e:  # a type this corpus cannot train (too small): skipped, said in the report
                results.append(TuneResult(kind, None, 0.0, 0, 0.0, 0.0, [{"skipped": str(e)}]))
                continue
            build_s = time.perf_counter() - t
            vi = VectorIndex(index, kind, SearchSettings(), vf)
            s, r, qps, tried, _ = tune_settings(vi, params.get("ivf_nlist"), queries, truth, target, k)
            results.append(TuneResult(kind, s, r, index_bytes(index), build_s, qps, tried))
            built[kind] = (index, params)
    finally:
        vf.close()
    results.sort(key=lambda x: (not x.met, x.index_bytes if x.met else 0, -x.recall))
    return results, built
