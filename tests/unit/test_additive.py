"""The additive searcher (searcher.additive, issue 45 step 2): D0 = naive RAG's top-k stays in D_s3, the policy can
only add to it up to the document cap; the setting travels in a trained policy's searcher.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3core.corpus import write_corpus
from s3core.types import Document
from searcher.agent import S3Searcher
from searcher.build import build_retriever, trained_settings
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.policy import ScriptedPolicy
from searcher.retrieval import build_index
from searcher.trained import RECORD_FILE, find_record, make_record, write_record

TOPICS = ["earthship", "garbage", "warrior", "film", "director", "reynolds"]
DOCS = [Document(id=f"d{i}-{t}", title=f"{t.title()} {i}", text=f"{t} " * (i % 3 + 1) + f"passage {i} about {t}")
        for i, t in enumerate(TOPICS * 3)]
QUESTIONS = ["Who directed the earthship film Garbage Warrior?", "Which director filmed the warrior?"]
PICK_SECOND = "<important_info>[2]</important_info><search_complete>True</search_complete>"


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> object:
    root = tmp_path_factory.mktemp("additive")
    write_corpus(root / "corpus.jsonl", DOCS)
    build_index(root / "corpus.jsonl", "bm25", root / "index", RetrieverConfig(), overwrite=True)
    return build_retriever(RetrieverConfig(), root / "index")


def test_where_nothing_is_added_d_s3_is_naive_rag_top_k(bm25: object) -> None:
    # a real BM25 index; the policy keeps only D0's second document and stops: the paper's loop drops the other two,
    # the additive one keeps naive RAG's top-3 exactly (same ids, same order)
    naive = [[d.id for d in docs] for docs in bm25.search(QUESTIONS, 3)]  # type: ignore[attr-defined]
    cfg = SearcherConfig(k=4, max_select=2, max_turns=1, context_cap=5)
    dropped = S3Searcher(ScriptedPolicy(lambda p, i: PICK_SECOND), bm25, cfg, k0=3).search(QUESTIONS)  # type: ignore[arg-type]
    assert [[d.id for d in r.documents] for r in dropped] == [ids[1:2] for ids in naive]
    kept = S3Searcher(ScriptedPolicy(lambda p, i: PICK_SECOND), bm25,  # type: ignore[arg-type]
                      cfg.model_copy(update={"additive": True}), k0=3).search(QUESTIONS)
    assert [[d.id for d in r.documents] for r in kept] == naive
    assert all(len(ids) == 3 for ids in naive)


def test_searcher_json_records_additive_and_serving_applies_it(tmp_path: Path) -> None:
    trained = SearcherConfig(k=3, max_turns=1, max_select=2, context_cap=5, additive=True)
    policy = tmp_path / "policy"
    policy.mkdir()
    write_record(make_record(trained, RetrieverConfig(), None, policy), policy)
    assert json.loads((policy / RECORD_FILE).read_text())["searcher"]["additive"] is True
    found = find_record(policy)
    assert found is not None and found[0].searcher["additive"] is True
    # what `s3 search --policy`, `s3 serve` and `s3 mcp` build with (searcher/build.py trained_settings)
    served, _, _ = trained_settings(policy, SearcherConfig(), RetrieverConfig())
    assert served.additive and served.context_cap == 5
    # an explicit setting of the user's still wins; a record written before the setting existed serves as configured
    mine, _, _ = trained_settings(policy, SearcherConfig(additive=False), RetrieverConfig(),
                                  explicit={"searcher.additive"})
    assert not mine.additive
    record = json.loads((policy / RECORD_FILE).read_text())
    del record["searcher"]["additive"]
    (policy / RECORD_FILE).write_text(json.dumps(record))
    assert not trained_settings(policy, SearcherConfig(), RetrieverConfig())[0].additive
