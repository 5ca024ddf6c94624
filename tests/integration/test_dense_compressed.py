"""Compressed dense indexes end to end with the real MiniLM encoder on a small real corpus: `s3 index build
--target-recall` records its tuned setting, the retriever serves it, encoding resumes from shards, and a bm25 index
written before the id map existed still loads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import numpy as np
import pytest

from s3.cli import main
from s3core.errors import ConfigError
from searcher.config import DenseConfig, RetrieverConfig, ServiceConfig
from searcher.retrieval import build_index, load_retriever, read_manifest
from searcher.retrieval.server import create_retrieve_app, serve_in_thread
from searcher.retrieval.store import IDMAP, DocStore
from searcher.retrieval.vector_index import exact_topk, open_vectors, recall_vs

pytestmark = pytest.mark.integration

FLASHRAG = Path(os.environ.get("S3_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")) / "flashrag_sample" / "sample_data.jsonl"
N = 100


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first N passages of the FlashRAG wiki-18 sample (real Wikipedia text)."""
    if not FLASHRAG.is_file():
        pytest.skip(f"shared data missing: {FLASHRAG}")
    out = tmp_path_factory.mktemp("c") / "corpus.jsonl"
    out.write_text("".join(FLASHRAG.read_text(encoding="utf-8").splitlines(keepends=True)[:N]), encoding="utf-8")
    return out


def test_cli_target_recall_picks_and_records_a_compressed_index(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "idx"
    args = ["index", "build", "--corpus", str(corpus), "--backend", "dense", "--out", str(out), "--target-recall",
            "0.9", "--set", "retriever.dense.tune_samples=24", "--set", "retriever.dense.device=cpu"]
    assert main(args) == 0
    said = capsys.readouterr().out
    m = read_manifest(out)
    tuning = m.params["tuning"]
    chosen = tuning["chosen"]
    assert m.params["index_type"] == chosen["index_type"] != "flat"
    assert m.params["search"] == chosen["settings"] and chosen["tuning_recall"] >= 0.9
    # the least index memory among the candidates that met the target
    met = [c for c in tuning["candidates"] if c["settings"] is not None]
    assert chosen["index_bytes"] == min(c["index_bytes"] for c in met)
    assert f"chose {chosen['index_type']}" in said
    assert (out / "dense.vectors.f32").stat().st_size == N * 384 * 4
    assert not list(tmp_path.glob(".idx.embeddings*"))  # shards removed after a good build
    # served with the recorded setting; its top-10 against the exact top-10 over the same vectors (flat's answer)
    comp = load_retriever(RetrieverConfig(), out)
    assert comp.vindex.settings.as_dict() == m.params["search"]
    qs = ["the history of the roman empire", "a famous american singer", "football club in england",
          "a river in europe", "an american politician"]
    vectors = open_vectors(out / "dense.vectors.f32", 384)
    truth = exact_topk(vectors, comp.encode_queries(qs), 10)
    got = comp.search(qs, 10)
    assert recall_vs(truth, np.array([[comp.store.row(d.id) for d in docs] for docs in got])) >= 0.8
    # rescored scores are exact inner products
    q0 = comp.encode_queries(qs[:1])[0]
    assert got[0][0].score == pytest.approx(float(vectors[comp.store.row(got[0][0].id)] @ q0), abs=1e-4)
    # served over /retrieve: the Search-R1 response shape, the same hits as in-process
    app = create_retrieve_app(comp, ServiceConfig())
    with serve_in_thread(app) as url:
        r = httpx.post(f"{url}/retrieve", json={"queries": qs[:2], "topk": 3, "return_scores": True}, timeout=60)
        bare = httpx.post(f"{url}/retrieve", json={"queries": qs[:1], "topk": 2}, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    result = r.json()["result"]
    assert [[set(h) for h in hits] for hits in result] == [[{"document", "score"}] * 3] * 2
    assert [h["document"]["id"] for h in result[0]] == [d.id for d in got[0][:3]]
    assert result[0][0]["document"] == {"id": got[0][0].id, "contents": got[0][0].contents}
    assert result[0][0]["score"] == pytest.approx(got[0][0].score, abs=1e-5)
    assert [set(h) for h in bare.json()["result"][0]] == [{"id", "contents"}] * 2


def test_cli_rejects_dense_flags_for_bm25_and_bad_targets(corpus: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    base = ["index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "x")]
    assert main([*base, "--backend", "bm25", "--target-recall", "0.9"]) == 2
    assert "--target-recall applies to --backend dense only" in capsys.readouterr().err
    assert main([*base, "--backend", "dense", "--target-recall", "1.5"]) == 2
    assert "--target-recall must be in (0, 1]" in capsys.readouterr().err
    assert main([*base, "--backend", "dense", "--index-type", "lsh"]) == 2
    assert "invalid dense index option" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="needs a target recall"):
        build_index(corpus, "dense", tmp_path / "y", RetrieverConfig(dense=DenseConfig(index_type="auto")))


def test_encoding_resumes_from_shards(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from searcher.retrieval import dense

    cfg = RetrieverConfig(dense=DenseConfig(index_type="sq8", shard_size=60, device="cpu",
                                            embed_cache=str(tmp_path / "shards")))
    calls: list[int] = []
    real = dense.encode

    def failing(model, texts, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt  # the build dies during the second shard
        return real(model, texts, *a, **kw)

    monkeypatch.setattr(dense, "encode", failing)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "dense", tmp_path / "idx", cfg)
    assert sorted(p.name for p in (tmp_path / "shards").glob("shard-*.npy")) == ["shard-000000.npy"]
    assert not (tmp_path / "idx").exists()
    calls.clear()
    monkeypatch.setattr(dense, "encode", lambda model, texts, *a, **kw: calls.append(len(texts)) or real(model, texts, *a, **kw))
    out = build_index(corpus, "dense", tmp_path / "idx", cfg)
    assert calls == [40]  # shard 0 was reused; 100 = 60 + 40
    r = load_retriever(RetrieverConfig(), out)
    assert read_manifest(out).params["search"] == {"rescore": 100}
    assert len(r.search(["american football"], 5)[0]) == 5


def test_bm25_index_built_before_the_id_map_still_loads(corpus: Path, tmp_path: Path) -> None:
    out = build_index(corpus, "bm25", tmp_path / "bm25", RetrieverConfig())
    (out / IDMAP).unlink()  # what an index of the earlier layout holds
    r = load_retriever(RetrieverConfig(), out)
    (hit,) = r.search(["football"], 1)[0]
    assert r.get([hit.id])[0].id == hit.id
    assert isinstance(r.store, DocStore) and len(r) == N
    m = json.loads((out / "index.json").read_text())
    assert m["backend"] == "bm25"
