"""Compressed dense indexes (real faiss, tiny hand-checkable data): each type, rescoring, the recall tuner, and
indexes written before rescoring existed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from s3core.errors import ConfigError, IndexDirError
from searcher.config import DenseConfig
from searcher.retrieval import vector_index
from searcher.retrieval.dense import default_settings, open_vector_index
from searcher.retrieval.vector_index import (
    INDEX_FILE,
    INDEX_TYPES,
    VECTORS_FILE,
    SearchSettings,
    VectorFile,
    VectorIndex,
    build_faiss,
    estimate_bytes,
    exact_topk,
    index_bytes,
    recall_vs,
    tune,
    write_vectors,
)

faiss = pytest.importorskip("faiss")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, np.ndarray, Path]:
    """600 clustered 32-d unit vectors (so IVF / PQ have structure to learn) and 40 queries near them."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(12, 32))
    vecs = _unit(centres[rng.integers(0, 12, 600)] + 0.35 * rng.normal(size=(600, 32)))
    queries = _unit(vecs[rng.integers(0, 600, 40)] + 0.2 * rng.normal(size=(40, 32)))
    path = tmp_path_factory.mktemp("vec") / VECTORS_FILE
    write_vectors([vecs[:250], vecs[250:]], path)
    return vecs, queries, path


def _cfg(**kw: object) -> DenseConfig:
    return DenseConfig.model_validate({"ivf_nlist": 8, "pq_m": 8, "pq_nbits": 5, "hnsw_m": 8, **kw})


def test_exact_topk_matches_brute_force_and_breaks_ties_by_row() -> None:
    v = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], dtype=np.float32)
    q = np.array([[1, 0]], dtype=np.float32)
    assert exact_topk(v, q, 3, chunk=2).tolist() == [[0, 2, 3]]  # rows 0 and 2 tie: corpus order
    assert recall_vs(np.array([[0, 2, 3]]), np.array([[2, 0, 1]])) == pytest.approx(2 / 3)


def test_vector_file_reads_rows_in_any_order(data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    vecs, _, path = data
    vf = VectorFile(path, 32)
    assert vf.n == 600
    np.testing.assert_array_equal(vf.rows(np.array([599, 3, 3, 0])), vecs[[599, 3, 3, 0]])
    vf.close()
    bad = path.parent / "bad.f32"
    bad.write_bytes(b"\0" * 130)
    with pytest.raises(IndexDirError, match="whole number"):
        VectorFile(bad, 32)


@pytest.mark.parametrize("kind", INDEX_TYPES)
def test_each_type_builds_and_full_rescoring_is_exact(kind: str, data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    """Rescoring every vector (depth = n) must give exactly flat's top-10, whatever the first stage."""
    vecs, queries, path = data
    index, params = build_faiss(kind, vecs, _cfg())
    assert index.ntotal == 600 and params["index_type"] == kind and params["dim"] == 32
    truth = exact_topk(vecs, queries, 10)
    vf = VectorFile(path, 32)
    settings = SearchSettings(nprobe=params.get("ivf_nlist"), ef_search=600, rescore=600)
    scores, rows = VectorIndex(index, kind, settings, vf).search(queries, 10)
    if kind not in ("hnsw", "hnsw_sq"):
        assert rows.tolist() == truth.tolist()
        np.testing.assert_allclose(scores[:, 0], np.einsum("ij,ij->i", queries, vecs[rows[:, 0]]), rtol=1e-5)
    else:  # a graph may not reach every point even with a wide efSearch
        assert recall_vs(truth, rows) >= 0.99
    vf.close()


def test_compressed_codes_are_smaller_than_flat(data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    vecs = data[0]
    sizes = {k: index_bytes(build_faiss(k, vecs, _cfg())[0]) for k in ("flat", "sq8", "sq4", "binary")}
    # flat holds 4*d bytes a vector; sq8 d; sq4 d/2; binary d/8 (+ small headers / thresholds)
    assert sizes["flat"] >= 600 * 128
    assert sizes["sq8"] < sizes["flat"] / 3.5
    assert sizes["sq4"] < sizes["sq8"] / 1.8
    assert sizes["binary"] < sizes["flat"] / 20


def test_rescoring_lifts_binary_recall(data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    vecs, queries, path = data
    index, _ = build_faiss("binary", vecs, _cfg())
    truth = exact_topk(vecs, queries, 10)
    vi = VectorIndex(index, "binary", SearchSettings(rescore=0), VectorFile(path, 32))
    r0 = recall_vs(truth, vi.search(queries, 10)[1])
    vi.set(SearchSettings(rescore=200))
    r200 = recall_vs(truth, vi.search(queries, 10)[1])
    assert r200 > r0 and r200 >= 0.9


def test_rescoring_without_vectors_is_a_clear_error(data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    index, _ = build_faiss("sq8", data[0], _cfg())
    with pytest.raises(IndexDirError, match=r"rescores on dense\.vectors\.f32"):
        VectorIndex(index, "sq8", SearchSettings(rescore=50), None)


def test_tuner_meets_the_target_with_the_least_memory(data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    vecs, queries, path = data
    results, built = tune(("sq8", "binary", "flat"), vecs, path, queries, 0.95, _cfg(), k=10)
    assert results[0].kind == "binary" and results[0].met  # the smallest codes that reach the target
    # the others cannot beat it: skipped without being built, saying why
    assert {r.kind for r in results[1:]} == {"sq8", "flat"} and not any(r.met for r in results[1:])
    assert all("exceed an index that met the target" in r.tried[0]["skipped"] for r in results[1:])
    assert set(built) == {"binary"}
    best = results[0]
    assert best.recall >= 0.95 and best.settings is not None
    # the recorded setting really gives that recall, and the step below it (if any) did not
    vi = VectorIndex(built["binary"][0], "binary", best.settings, VectorFile(path, 32))
    assert recall_vs(exact_topk(vecs, queries, 10), vi.search(queries, 10)[1]) == pytest.approx(best.recall)
    assert all(t["recall"] < 0.95 for t in best.tried[:-1])
    assert best.as_dict()["settings"] == best.settings.as_dict()


def test_tuner_builds_every_type_until_one_meets_the_target(
    data: tuple[np.ndarray, np.ndarray, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    vecs, queries, path = data
    monkeypatch.setattr(vector_index, "RESCORE_LADDER", (0, 10, 20))
    cfg = _cfg(binary_bits=8)  # 8 bits a vector: far too coarse for recall 0.99 with 20 candidates rescored
    results, built = tune(("sq8", "binary"), vecs[:300], path, queries, 0.99, cfg, k=10)
    assert set(built) == {"binary", "sq8"}
    assert results[0].kind == "sq8" and results[0].met and not results[1].met
    assert estimate_bytes("binary", 300, 32, cfg) < estimate_bytes("sq8", 300, 32, cfg)


def test_tuner_reports_an_unreachable_target(data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    vecs, queries, path = data
    cfg = _cfg()
    results, _ = tune(("sq4",), vecs, path, queries, 1.0, cfg, k=10)
    # full rescoring reaches 1.0 exactly, so the tuner finds it; a ladder capped below n cannot
    assert results[0].met
    small = vecs[:20]
    write_vectors([small], path.parent / "small.f32")
    res, _ = tune(("binary",), small, path.parent / "small.f32", queries, 1.01, cfg, k=10)
    assert not res[0].met and res[0].settings is None and res[0].recall == pytest.approx(1.0)


def test_unknown_type_and_bad_pq_m() -> None:
    v = np.zeros((50, 30), dtype=np.float32)
    with pytest.raises(ConfigError, match="pq_m=8 must divide"):
        build_faiss("ivfpq", v, _cfg())
    with pytest.raises(ConfigError, match="unknown dense index type"):
        build_faiss("lsh", v, _cfg())
    with pytest.raises(ConfigError, match="binary_bits=12 must be a multiple of 8"):
        build_faiss("binary", v, _cfg(binary_bits=12))


def test_index_written_before_rescoring_still_loads(tmp_path: Path, data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    """An IVF-PQ index from the earlier code path (IndexIVFPQ built directly, no vectors file, no 'search' in the
    manifest): opened with the config's nprobe and no rescoring."""
    vecs, queries, _ = data
    quantizer = faiss.IndexFlatIP(32)
    old = faiss.IndexIVFPQ(quantizer, 32, 8, 8, 6, faiss.METRIC_INNER_PRODUCT)
    old.train(vecs)
    old.add(vecs)
    faiss.write_index(old, str(tmp_path / INDEX_FILE))
    params = {"index_type": "ivfpq", "dim": 32, "ivf_nlist": 8, "pq_m": 8, "pq_nbits": 6, "normalize": True}
    vi = open_vector_index(tmp_path, params, _cfg(ivf_nprobe=4), 600)
    assert vi.settings == SearchSettings(nprobe=4, rescore=0) and vi.vectors is None
    assert faiss.extract_index_ivf(vi.index).nprobe == 4
    rows = vi.search(queries, 10)[1]
    assert recall_vs(exact_topk(vecs, queries, 10), rows) > 0.3
    with pytest.raises(IndexDirError, match="600 vectors for 7 documents"):
        open_vector_index(tmp_path, params, _cfg(), 7)
    assert default_settings("hnsw", {}, _cfg(hnsw_ef_search=77)) == SearchSettings(ef_search=77)


def test_recorded_settings_win_over_the_config(tmp_path: Path, data: tuple[np.ndarray, np.ndarray, Path]) -> None:
    vecs, _, path = data
    index, params = build_faiss("opq_ivfpq", vecs, _cfg())
    faiss.write_index(index, str(tmp_path / INDEX_FILE))
    (tmp_path / VECTORS_FILE).symlink_to(path)
    params["search"] = {"nprobe": 3, "rescore": 40}
    vi = open_vector_index(tmp_path, params, _cfg(ivf_nprobe=8, rescore=7), 600)
    assert vi.settings == SearchSettings(nprobe=3, rescore=40)
    assert faiss.extract_index_ivf(vi.index).nprobe == 3
