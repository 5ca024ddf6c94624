"""The title-following searcher on a REAL bm25s index over hotpotqa_dev500's 4,943 paragraphs (../shared/data): it
reproduces the committed heuristic control's documents (benchmarks/results/transfer3/checks/contexts/heuristic.jsonl,
written by the code it replaced) question for question; on the same corpus with its titles removed it is refused,
and run anyway it returns naive RAG's top-3 unchanged; and it answers through the real /search app (uvicorn on
loopback) and the `s3 search` command line. No model anywhere: bm25 only, seconds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_service_http import LiveServer

from dataprep import prepare
from s3core.corpus import iter_corpus, read_questions, write_corpus
from s3core.errors import ConfigError
from s3core.io import read_jsonl, stored
from s3core.types import Document, QAExample
from searcher.build import build_configured_searcher, build_retriever
from searcher.config import RetrieverConfig, SearcherConfig, ServiceConfig
from searcher.retrieval import build_index
from searcher.title_following import TitleFollowingSearcher

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "benchmarks" / "results" / "transfer3" / "checks" / "contexts" / "heuristic.jsonl"  # kept as .gz


def committed_rows(name: str = COMMITTED.name) -> dict[str, dict[str, Any]]:
    """A committed contexts file of the transfer checks by question id: contexts/NAME, or NAME.gz where only that is
    kept (s3core.io `stored`)."""
    return {r["id"]: r for r in read_jsonl(stored(COMMITTED.with_name(name)))}
# the transfer checks' settings (configs/transfer3.toml, experiments/transfer/methods.py title_following): k0 3, k 8 a span, cap 5
CHECKS = SearcherConfig(kind="title_following", k=8, context_cap=5, max_turns=1)


def reading(**settings: object) -> SearcherConfig:
    """The checks' script as the reading searcher, with these [searcher.reading] settings."""
    return CHECKS.model_copy(update={"kind": "reading", "reading": CHECKS.reading.model_copy(update=settings)})


@pytest.fixture(scope="module")
def hotpot(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[QAExample]]:
    raw = shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"
    if not raw.is_file():
        pytest.skip(f"shared data missing: {raw}")
    out = tmp_path_factory.mktemp("hotpot")
    prepare("hotpotqa", [raw], out / "data")
    index = build_index(out / "data" / "corpus.jsonl", "bm25", out / "index")
    return out / "data" / "corpus.jsonl", index, read_questions(out / "data" / "questions.jsonl")


def test_it_reproduces_the_committed_heuristic_contexts(hotpot: tuple[Path, Path, list[QAExample]]) -> None:
    if not stored(COMMITTED).is_file():
        pytest.skip(f"{COMMITTED.relative_to(REPO)} is not in this checkout")
    _, index, qs = hotpot
    committed = {i: [d["id"] for d in r["documents"]] for i, r in committed_rows().items()}
    s = build_configured_searcher(CHECKS, build_retriever(RetrieverConfig(), index), k0=3)
    results = s.search(qs)
    got = {q.id: [d.id for d in r.documents] for q, r in zip(qs, results, strict=True)}
    same = sum(got[i] == committed[i] for i in committed)
    assert len(committed) == 500 and same == 500, f"{same} of {len(committed)} questions match"
    added = sum(len(r.documents) > 3 for r in results)
    assert 250 <= added <= 450  # it adds on most questions (the committed stats: contexts/stats.json)
    assert all(r.steps[0].retrieved_ids == [d.id for d in r.documents[:3]] for r in results)  # D0 kept, in order


def test_reading_further_reproduces_the_committed_links_ranker_contexts(hotpot: tuple[Path, Path, list[QAExample]]
                                                                       ) -> None:
    """searcher.reading.read_last = 16 with the shipped links-hotpotqa ranker (no model) adds, on every question, the page
    the transfer checks' heuristic_plus_links1 added (written by `benchmarks/transfer_checks.py read`, which fitted the
    ranker and wrote the shipped file): the product searcher is the measured one, all 500 questions."""
    committed = COMMITTED.with_name("heuristic_plus_links1.jsonl")
    if not stored(committed).is_file():
        pytest.skip(f"{committed.relative_to(REPO)} is not in this checkout")
    _, index, qs = hotpot
    rows = committed_rows(committed.name)
    s = build_configured_searcher(reading(read_last=16, ranker="links-hotpotqa"),
                                  build_retriever(RetrieverConfig(), index), k0=3)
    results = s.search(qs)
    got = {q.id: [d.id for d in r.documents] for q, r in zip(qs, results, strict=True)}
    same = sum(got[i] == [d["id"] for d in rows[i]["documents"]] for i in rows)
    assert len(rows) == 500 and same == 500, f"{same} of {len(rows)} questions match"
    read = [(q.question, r.steps[-1], rows[q.id]["added"]) for q, r in zip(qs, results, strict=True)]
    # every question's last step is the read (its own list, the question as the query), after the spans' turn or D0
    assert all(step.query == text and step.selected_ids == added and added for text, step, added in read)
    assert sum(step.turn == 2 for _, step, _ in read) > 250
    assert s.last_stats.retrieval_calls == 3  # D0, the spans, the read: one batched call each


def test_without_titles_it_is_refused_and_would_be_naive_rag(hotpot: tuple[Path, Path, list[QAExample]],
                                                              tmp_path: Path) -> None:
    corpus, _, qs = hotpot
    write_corpus(tmp_path / "corpus.jsonl", (Document(id=d.id, title="", text=d.text) for d in iter_corpus(corpus)))
    bm25 = build_retriever(RetrieverConfig(), build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index"))
    with pytest.raises(ConfigError, match="needs titled documents"):
        build_configured_searcher(CHECKS, bm25, k0=3)
    results = TitleFollowingSearcher(bm25, CHECKS, k0=3).search(qs)
    top3 = bm25.search([q.question for q in qs], 3)
    assert [[d.id for d in r.documents] for r in results] == [[d.id for d in t] for t in top3]  # all 500
    assert sum(bool(r.steps[-1].queries or r.steps[-1].query) for r in results) > 400  # it searched, found no title


def test_the_reading_searcher_starts_from_top_k_without_titles(hotpot: tuple[Path, Path, list[QAExample]],
                                                                tmp_path: Path) -> None:
    """On an untitled index the reading searcher (start 'auto') adds its pages to naive top-3 instead of refusing;
    asked for the script's start it refuses, naming the setting."""
    corpus, _, qs = hotpot
    write_corpus(tmp_path / "corpus.jsonl", (Document(id=d.id, title="", text=d.text) for d in iter_corpus(corpus)))
    bm25 = build_retriever(RetrieverConfig(), build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index"))
    cfg = reading(ranker="links-hotpotqa", pages=2)
    results = build_configured_searcher(cfg, bm25, k0=3).search(qs[:20])
    top = bm25.search([q.question for q in qs[:20]], 16)
    for r, t in zip(results, top, strict=True):
        ids = [d.id for d in r.documents]
        assert ids[:3] == [d.id for d in t[:3]] and len(ids) == 5  # naive top-3, then two of ranks 4-16
        assert set(ids[3:]) <= {d.id for d in t[3:16]}
    with pytest.raises(ConfigError, match="needs titled documents"):
        build_configured_searcher(reading(ranker="links-hotpotqa", start="title_following"), bm25, k0=3)


def test_through_the_real_search_app_and_the_command_line(hotpot: tuple[Path, Path, list[QAExample]],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import main
    from searcher.service import create_search_app

    _, index, qs = hotpot
    q = next(x for x in qs if x.id == "5a8c7595554299585d9e36b6")  # Kiss and Tell -> Shirley Temple (a bridge title)
    retriever = build_retriever(RetrieverConfig(), index)
    searcher = build_configured_searcher(CHECKS, retriever, k0=3)
    app = create_search_app(searcher, retriever, ServiceConfig(batch_window_ms=50), searcher_cfg=CHECKS)
    with LiveServer(app) as srv:
        health = httpx.get(f"{srv.url}/health", timeout=30).json()
        assert health["kind"] == "title_following" and health["model"] is None and health["corpus_size"] == 4943
        assert health["searcher"]["kind"] == "title_following" and health["searcher"]["settings"]["context_cap"] == 5
        r = httpx.post(f"{srv.url}/search", json={"question": q.question}, timeout=60)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        titles = [d["title"] for d in body["documents"]]
        assert "Shirley Temple" in titles and [d["turn"] for d in body["documents"]][:3] == [0, 0, 0]
        assert body["cost"]["policy_calls"] == 0 and body["trajectory"]["stop"] == "search_complete"
        assert "Shirley Temple" in body["trajectory"]["queries"] and not body["degraded"]
    sets = ["--set", "searcher.kind=title_following", "--set", "searcher.context_cap=5", "--set", "searcher.k=8"]
    assert main(["search", q.question, "--index", str(index), *sets, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [d["title"] for d in out["documents"]] == titles
    # reading one page further (the reading searcher with the shipped no-model ranker): the same pages, then one more
    reads = ["--set", "searcher.kind=reading", "--set", "searcher.reading.ranker=links-hotpotqa"]
    assert main(["search", q.question, "--index", str(index), *sets[2:], *reads, "--json"]) == 0
    read = json.loads(capsys.readouterr().out)
    assert [d["title"] for d in read["documents"]][:-1] == titles and len(read["documents"]) == len(titles) + 1
    assert read["documents"][-1]["turn"] == read["trajectory"]["turns"] == 2


def test_s3_eval_runs_it_as_a_method_and_the_leaderboard_takes_it_as_the_baseline(
        hotpot: tuple[Path, Path, list[QAExample]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`s3 eval --method title_following` (the real SmolLM2 generator, 2 questions): its rows are the script's
    documents, its contexts.jsonl its trajectories; `s3 leaderboard --baseline title_following` pairs naive RAG
    against it."""
    from eval.rundir import RESULTS_FILE, read_results
    from s3.cli import main

    corpus, index, qs = hotpot
    monkeypatch.setenv("S3_LLAMA_THREADS", "1")
    data = corpus.parent
    common = ["--dataset", str(data), "--index", str(index), "--limit", "2", "--no-progress",
              "--generator", "local/smollm2-135m-instruct", "--set", "eval.use_judge=false",
              "--set", "generator.max_tokens=16", "--set", f"generator.cache_path={tmp_path / 'c.sqlite'}"]
    tf, rag = tmp_path / "title_following", tmp_path / "naive_rag"
    assert main(["eval", "--method", "title_following", "--out", str(tf), *common,
                 "--set", "searcher.context_cap=5", "--set", "searcher.k=8"]) == 0
    assert main(["eval", "--method", "naive_rag", "--out", str(rag), *common]) == 0
    rows = read_results(tf / RESULTS_FILE)
    summary = json.loads((tf / "summary.json").read_text())
    assert summary["config"]["searcher"] == {"class": "TitleFollowingSearcher", "kind": "title_following", "k": 8,
                                             "max_turns": 1, "context_cap": 5}
    expect = build_configured_searcher(CHECKS, build_retriever(RetrieverConfig(), index), k0=3).search(qs[:2])
    assert [rows[q.id]["context_ids"] for q in qs[:2]] == [[d.id for d in r.documents] for r in expect]
    traj = [json.loads(line) for line in (tf / "contexts.jsonl").read_text().splitlines()]
    assert [t["id"] for t in traj] == [q.id for q in qs[:2]] and all(t["steps"][0]["turn"] == 0 for t in traj)
    assert main(["leaderboard", str(tf), str(rag), "--baseline", "title_following", "--out", str(tmp_path / "lb")]) == 0
    board = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "| Title-following script |" in board and "GBR (naive RAG - title-following)" in board


def test_the_s3_loop_can_start_where_the_script_ends(hotpot: tuple[Path, Path, list[QAExample]]) -> None:
    """searcher.start = 'title_following' (issue 60 build step 3): the loop's D0 is the script's documents, shown in
    the first prompt and kept (additive), and the policy adds beyond them. The policy is scripted (the loop's logic
    under test); the index, the script and the retrieval are the real ones."""
    from searcher.build import build_searcher
    from searcher.policy import ScriptedPolicy

    if not stored(COMMITTED).is_file():
        pytest.skip(f"{COMMITTED.relative_to(REPO)} is not in this checkout")
    _, index, qs = hotpot
    qs = qs[:40]
    committed = {i: [d["id"] for d in r["documents"]] for i, r in committed_rows().items()}
    retriever = build_retriever(RetrieverConfig(), index)
    prompts: list[str] = []

    def stop(prompt: str, i: int) -> str:
        prompts.append(prompt)
        return "<search_complete>True</search_complete>"

    cfg = SearcherConfig(start="title_following", start_cap=5, k=8, additive=True, context_cap=6, max_turns=1)
    results = build_searcher(cfg, retriever, ScriptedPolicy(stop), k0=3).search(qs)
    assert [[d.id for d in r.documents] for r in results] == [committed[q.id] for q in qs], "D0 = the script's"
    assert all(r.steps[0].retrieved_ids == committed[q.id] for q, r in zip(qs, results, strict=True))
    grown = [i for i, q in enumerate(qs) if len(committed[q.id]) > 3]
    assert grown and all(f"(Title: {results[i].documents[-1].title})" in prompts[i] for i in grown), \
        "the first prompt shows the script's additions"

    seen: dict[str, int] = {}

    def add_one(prompt: str, i: int) -> str:  # one search turn, then the new window's first document kept
        q = next(q.question for q in qs[:10] if q.question in prompt)
        seen[q] = seen.get(q, 0) + 1
        if seen[q] > 1:
            return "<important_info>[1]</important_info><search_complete>True</search_complete>"
        return '<search_complete>False</search_complete><query>{"query": "film director"}</query>'

    more = build_searcher(cfg, retriever, ScriptedPolicy(add_one), k0=3).search(qs[:10])
    for q, r in zip(qs[:10], more, strict=True):
        ids = [d.id for d in r.documents]
        assert ids[: len(committed[q.id])] == committed[q.id]  # the script's documents kept, in order
        assert len(ids) <= 6
    assert any(len(r.documents) > len(committed[q.id]) for q, r in zip(qs[:10], more, strict=True))
    with pytest.raises(ConfigError, match="context_cap >= 5"):
        build_searcher(cfg.model_copy(update={"context_cap": 4}), retriever, ScriptedPolicy(stop), k0=3)


def test_a_ranker_over_a_real_reader_scores_as_the_probe_trains_it(hotpot: tuple[Path, Path, list[QAExample]],
                                                                  tmp_path: Path) -> None:
    """searcher.reader with a real transformers causal LM (the base smollm2-135m-instruct, an untrained reader): the
    product's reader scores each page as the selection probe's training student does (the same prompt, the same
    logits); the searcher adds the candidate the ranker scores highest with those scores; a peft LoRA adapter, as the
    probe trains one, loads as a reader too (merged) and scores as the unmerged adapter does."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from experiments.selection_probe import PointwiseStudent
    from searcher.policy.transformers_policy import resolve_checkpoint
    from searcher.title_following.reader import PointwiseReader, reader_identity, yes_no_token_ids

    base = str(resolve_checkpoint("smollm2-135m-instruct"))
    _, index, qs = hotpot
    retriever = build_retriever(RetrieverConfig(), index)
    reader = PointwiseReader.load(base)
    tok = reader.tokenizer

    def student(model: Any) -> PointwiseStudent:
        return PointwiseStudent(model, lambda x: tok.encode(x, add_special_tokens=False), yes_no_token_ids(tok),
                                pad_id=reader.pad_id)

    q = qs[0].question
    pages = retriever.search([q], 8)[0][3:]
    assert reader.scores(q, pages) == pytest.approx(student(reader.model).pair_scores(q, pages), abs=1e-4)
    ranker = tmp_path / "reader_only.json"
    ranker.write_text(json.dumps({"weights": {"reader": 1.0, "bias": 0.0}}))
    s = build_configured_searcher(reading(read_last=8, ranker=str(ranker), reader=base), retriever, k0=3)
    for ex, res in zip(qs[:3], s.search(qs[:3]), strict=True):
        read = res.steps[-1]
        by_id = {d.id: d for d in retriever.search([ex.question], 8)[0]}
        scores = reader.scores(ex.question, [by_id[i] for i in read.retrieved_ids])
        assert read.selected_ids == [read.retrieved_ids[max(range(len(scores)), key=lambda i: (scores[i], -i))]]
        assert res.documents[-1].id == read.selected_ids[0]
    # a LoRA adapter (its B weights moved off zero, so it differs from the base) saved as the probe saves one
    torch.manual_seed(0)
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    peft.eval()
    peft.save_pretrained(tmp_path / "adapter")
    adapted = PointwiseReader.load(str(tmp_path / "adapter"))
    want = student(peft).pair_scores(q, pages)
    assert adapted.scores(q, pages) == pytest.approx(want, abs=2e-3)
    assert max(abs(a - b) for a, b in zip(want, reader.scores(q, pages), strict=True)) > 0.05
    with pytest.raises(ConfigError, match=r"searcher.reading.reader = .*cannot load"):
        PointwiseReader.load(str(tmp_path / "no-reader"))
    broken = tmp_path / "broken"  # a truncated weights file: a ConfigError that names the setting, no traceback
    shutil.copytree(tmp_path / "adapter", broken)
    weights = broken / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ConfigError, match=r"searcher.reading.reader = .*cannot load"):
        PointwiseReader.load(str(broken))
    # a run's identity: the prompt, and a hash over the weights (an adapter's with its base's)
    ident = reader_identity(base)
    assert ident["words"] == 60 and ident["tail"].endswith("yes or no:") and len(ident["weights_sha256"]) == 64
    assert reader_identity(str(tmp_path / "adapter"))["weights_sha256"] not in (ident["weights_sha256"],
                                                                                reader_identity(str(broken))["weights_sha256"])


TRAINED_READER = REPO / "runs" / "selection_probe" / "readers" / "smollm2-135m-instruct-pointwise"


@pytest.mark.skipif(not TRAINED_READER.is_dir(), reason="the trained 135M reader is built by benchmarks/"
                    "selection_probe.py (517 MB, not committed)")
def test_the_ranker_over_the_trained_reader_reproduces_the_committed_ranker1_contexts(
        hotpot: tuple[Path, Path, list[QAExample]]) -> None:
    """Where the trained reader is (this machine), the live searcher with the committed ranker file
    (benchmarks/results/transfer3/checks/rankers/heuristic_plus_ranker1.json) adds the page heuristic_plus_ranker1
    added (the +0.034 row of docs/transfer.md), on the first 20 questions (~1.6 s a question on a quiet CPU; 5.5-6.4 s with 1 thread beside one 2-thread job)."""
    rows = committed_rows("heuristic_plus_ranker1.jsonl")
    _, index, qs = hotpot
    ranker = REPO / "benchmarks" / "results" / "transfer3" / "checks" / "rankers" / "heuristic_plus_ranker1.json"
    s = build_configured_searcher(reading(read_last=16, ranker=str(ranker), reader=str(TRAINED_READER)),
                                  build_retriever(RetrieverConfig(), index), k0=3)
    got = s.search(qs[:20])
    assert [[d.id for d in r.documents] for r in got] == [[d["id"] for d in rows[q.id]["documents"]] for q in qs[:20]]


def test_the_shipped_ranker_reads_with_the_shipped_reader_and_reproduces_its_committed_contexts(
        hotpot: tuple[Path, Path, list[QAExample]]) -> None:
    """searcher.ranker = 'links-reader-hotpotqa' and nothing else: the ranker loads the LoRA reader that ships beside
    it (searcher/policies/reader-smollm2-135m-hotpotqa, float16, on the offline SmolLM2-135M) and the live searcher adds
    the page the measured control heuristic_plus_ranker1_shipped added (`benchmarks/transfer_checks.py read
    --ship-reader`, docs/transfer.md), on the first 10 questions; its run identity names the shipped reader."""
    from searcher.title_following.links import LinkRanker

    rows = committed_rows("heuristic_plus_ranker1_shipped.jsonl")
    ranker = LinkRanker.load("links-reader-hotpotqa")
    assert ranker.reads and ranker.reader_for(None) == str(REPO / "searcher" / "policies" / ranker.reader)
    _, index, qs = hotpot
    s = build_configured_searcher(reading(), build_retriever(RetrieverConfig(), index), k0=3)  # its defaults: the best
    got = s.search(qs[:10])
    assert [[d.id for d in r.documents] for r in got] == [[d["id"] for d in rows[q.id]["documents"]] for q in qs[:10]]
    assert all(r.steps[-1].selected_ids == rows[q.id]["added"] for q, r in zip(qs[:10], got, strict=True))
