"""A trained searcher carries what it was trained with (searcher/trained.py) and is served that way (s3/build.py)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from s3.build import trained_config
from s3.config import load_config
from s3core.corpus import write_corpus
from s3core.errors import ConfigError, S3Error
from s3core.types import Document
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.retrieval import build_index
from searcher.trained import RECORD_FILE, apply_record, find_record, make_record, write_record

DOCS = [Document(id=f"d{i}", title=f"T{i}", text=f"alpha beta {i} gamma") for i in range(6)]


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory laid out as the trainer lays it out: data/{corpus.jsonl,index}, checkpoints/step_N/policy."""
    run = tmp_path / "run"
    corpus = run / "data" / "corpus.jsonl"
    corpus.parent.mkdir(parents=True)
    write_corpus(corpus, DOCS)
    index = build_index(corpus, "bm25", run / "data" / "index", RetrieverConfig(), overwrite=True)
    trained = SearcherConfig(k=3, max_turns=1, max_select=2, doc_token_budget=40, max_new_tokens=48)
    retr = RetrieverConfig(k=2)
    write_record(make_record(trained, retr, index, run, base_model="smollm2-135m-instruct", corpus=corpus), run)
    policy = run / "checkpoints" / "step_000003" / "policy"
    policy.mkdir(parents=True)
    write_record(make_record(trained, retr, index, policy, corpus=corpus), policy)
    return run, policy


def test_the_record_says_what_the_searcher_was_trained_with(tmp_path: Path) -> None:
    run, policy = _run(tmp_path)
    rec = json.loads((run / RECORD_FILE).read_text())
    assert rec["searcher"]["max_turns"] == 1 and rec["searcher"]["k"] == 3 and rec["searcher"]["doc_token_budget"] == 40
    assert rec["retriever"]["index"] == "data/index" and rec["retriever"]["k"] == 2
    assert rec["retriever"]["rebuild"] == "s3 index build --corpus data/corpus.jsonl --backend bm25 --out data/index"
    assert len(rec["prompt_sha256"]) == 64 and len(rec["retriever"]["index_fingerprint"]) == 64
    assert json.loads((policy / RECORD_FILE).read_text())["retriever"]["index"] == "../../../data/index"
    # found from the run dir, a checkpoint, or its policy folder
    for where in (run, run / "checkpoints" / "step_000003", policy):
        found = find_record(where)
        assert found is not None and found[0].searcher["max_turns"] == 1


def test_recorded_settings_apply_and_explicit_ones_win(tmp_path: Path) -> None:
    run, _ = _run(tmp_path)
    record, folder = find_record(run) or pytest.fail("no record")
    s, r, index = apply_record(record, folder, SearcherConfig(), RetrieverConfig())
    assert (s.k, s.max_turns, s.max_select, s.doc_token_budget, r.k) == (3, 1, 2, 40, 2)
    assert index == (run / "data" / "index").resolve()
    s, r, index = apply_record(record, folder, SearcherConfig(max_turns=3), RetrieverConfig(k=5),
                               explicit={"searcher.max_turns", "retriever.k"}, index=tmp_path / "other")
    assert (s.max_turns, s.k, r.k, index) == (3, 3, 5, tmp_path / "other")


def test_a_rebuilt_or_missing_index_is_a_clear_error(tmp_path: Path) -> None:
    run, _ = _run(tmp_path)
    record, folder = find_record(run) or pytest.fail("no record")
    write_corpus(run / "data" / "corpus.jsonl", DOCS[:3])  # another corpus, rebuilt in place
    build_index(run / "data" / "corpus.jsonl", "bm25", run / "data" / "index", RetrieverConfig(), overwrite=True)
    with pytest.raises(ConfigError, match=r"not the one the searcher was trained with.*s3 index build --corpus"):
        apply_record(record, folder, SearcherConfig(), RetrieverConfig())
    apply_record(record, folder, SearcherConfig(), RetrieverConfig(), index=run / "data" / "index")  # on purpose: fine
    import shutil

    shutil.rmtree(run / "data" / "index")
    with pytest.raises(ConfigError, match="which is missing"):
        apply_record(record, folder, SearcherConfig(), RetrieverConfig())


def test_trained_config_reads_explicit_keys_from_the_config(tmp_path: Path) -> None:
    run, policy = _run(tmp_path)
    given = load_config([], ["searcher.min_turns=0", "searcher.max_turns=2"])
    cfg, index = trained_config(given, policy)
    assert given.searcher.policy_path is None and given.searcher.k != 3  # a new config: the loaded one is left alone
    assert cfg.searcher.max_turns == 2 and cfg.searcher.k == 3  # --set wins, the rest is the record's
    assert cfg.searcher.policy == "transformers" and cfg.searcher.policy_path == str(policy.resolve())
    assert index == (run / "data" / "index").resolve()
    vllm, _ = trained_config(load_config([], ["searcher.policy=vllm"]), run)
    assert vllm.searcher.policy == "vllm"


def test_build_searcher_without_an_index_says_so_and_nothing_else_warns() -> None:
    from s3 import build_searcher

    with warnings.catch_warnings(record=True) as caught, pytest.raises(S3Error, match="no index"):
        warnings.simplefilter("always")
        build_searcher(load_config([], ["retriever.backend=bm25"]))
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_the_index_fingerprint_is_what_the_index_is_not_where_or_when_it_was_built(tmp_path: Path) -> None:
    """A fresh clone rebuilds an index from the same corpus elsewhere, later: same fingerprint (a cached baseline and a
    trained searcher's record still match); another corpus or other parameters: another fingerprint."""
    import time

    from searcher.trained import index_fingerprint

    def build(where: str, docs: list[Document], cfg: RetrieverConfig | None = None) -> Path:
        corpus = tmp_path / where / "corpus.jsonl"
        corpus.parent.mkdir(parents=True)
        write_corpus(corpus, docs)
        return build_index(corpus, "bm25", tmp_path / where / "index", cfg or RetrieverConfig(), overwrite=True)

    first = index_fingerprint(build("a", DOCS))
    time.sleep(1.1)  # index.json's `created` has one-second resolution
    again = build("b", DOCS)
    assert json.loads((again / "index.json").read_text())["corpus"]["path"] != str(tmp_path / "a" / "corpus.jsonl")
    assert index_fingerprint(again) == first
    assert index_fingerprint(build("c", DOCS[:-1])) != first
    assert index_fingerprint(build("d", DOCS, RetrieverConfig.model_validate({"bm25": {"k1": 1.2}}))) != first


def test_a_copied_policy_folder_keeps_finding_its_index(tmp_path: Path) -> None:
    """`relocate_record`: an exported checkpoint (searcher/policies/smollm2-135m-hotpotqa) re-bases the record's paths,
    which are relative to the record, so `s3 search --policy COPY` still finds (and can rebuild) the training index."""
    from searcher.trained import relocate_record

    run, policy = _run(tmp_path)
    copy = tmp_path / "results" / "transfer" / "policy"
    shutil.copytree(policy, copy)
    stale = json.loads((copy / RECORD_FILE).read_text())["retriever"]["index"]
    assert not (copy / stale).resolve().is_dir()  # the plain copy points nowhere
    assert relocate_record(policy, copy) == copy / RECORD_FILE
    rec = json.loads((copy / RECORD_FILE).read_text())["retriever"]
    assert (copy / rec["index"]).resolve() == (run / "data" / "index").resolve()
    assert rec["rebuild"] == (f"s3 index build --corpus {rec['index'][: -len('index')]}corpus.jsonl --backend bm25 "
                              f"--out {rec['index']}")
    found = find_record(copy)
    assert found is not None and found[1] == copy.resolve()
    assert relocate_record(tmp_path / "nothing", copy) is None


def test_a_searcher_trained_from_the_title_following_start_is_served_from_it(tmp_path: Path) -> None:
    """searcher.start is part of the loop: a policy trained from the script's documents (issue 60 build step 3) is
    served from them, not from naive RAG's top-k, unless the user says otherwise."""
    run = tmp_path / "run"
    corpus = run / "data" / "corpus.jsonl"
    corpus.parent.mkdir(parents=True)
    write_corpus(corpus, DOCS)
    index = build_index(corpus, "bm25", run / "data" / "index", RetrieverConfig(), overwrite=True)
    trained = SearcherConfig(start="title_following", start_cap=4, additive=True, context_cap=6)
    write_record(make_record(trained, RetrieverConfig(), index, run, corpus=corpus), run)
    record, folder = find_record(run) or pytest.fail("no record")
    s, _, _ = apply_record(record, folder, SearcherConfig(), RetrieverConfig())
    assert (s.start, s.start_cap, s.context_cap) == ("title_following", 4, 6)
    s, _, _ = apply_record(record, folder, SearcherConfig(), RetrieverConfig(), explicit={"searcher.start"})
    assert s.start == "top_k"
