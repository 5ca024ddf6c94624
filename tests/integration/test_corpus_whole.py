"""Issue 79: a RAG engineer's documents come back whole, under their own ids.

The real path: `s3 data prepare` and `s3 index build` through the CLI, a bm25s index in a tmp folder, the s3 loop
(begin-with-search; a scripted policy, so no model) behind the real LangChain retriever, in process and over the
/search server.

- An untitled multi-line chunk ({"id", "contents"} without the quoted "Title" line) is served whole, with no title;
  the title-following searcher refuses such an index. An index built under the old rule (its first line taken for
  the title) is named on opening, with the command that rebuilds it.
- `s3 data prepare` keeps the corpus's own ids; the ones it must change are mapped in its manifest, and the served
  Document carries the original.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from s3.cli import main
from s3core.errors import ConfigError, IndexDirError
from searcher.config import SearcherConfig
from searcher.retrieval import load_retriever

pytestmark = pytest.mark.integration

CHUNKS = [
    {"id": "c1", "contents": "To clean the filter, remove it and rinse it under warm water.\n"
                             "Let it dry for a day before putting it back."},
    {"id": "c2", "contents": "Error E12 means the battery temperature is too high.\n"
                             "Move the vacuum to a cooler room and wait 30 minutes."},
    {"id": "c3", "contents": "The charging dock light blinks green while charging.\n"
                             "A steady green light means the battery is full."},
]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _index(corpus: Path, out: Path) -> Path:
    assert main(["index", "build", "--corpus", str(corpus), "--backend", "bm25", "--out", str(out)]) == 0
    return out


def _searcher(index: Path) -> Any:
    """The s3 loop on `index`: begin-with-search only (max_turns 0), a scripted policy (no model)."""
    from searcher.agent import S3Searcher
    from searcher.policy import ScriptedPolicy

    policy = ScriptedPolicy(lambda prompt, i: "<search_complete>True</search_complete>")
    return S3Searcher(policy, load_retriever(index_dir=index), SearcherConfig.model_validate({"max_turns": 0}))


def _langchain(index: Path) -> Any:
    """The LangChain retriever over `_searcher(index)`, in process."""
    from searcher.integrations.langchain import S3Retriever

    return S3Retriever(searcher=_searcher(index), max_turns=0)


def test_an_untitled_chunk_comes_back_whole_through_langchain(tmp_path: Path) -> None:
    index = _index(_jsonl(tmp_path / "chunks.jsonl", CHUNKS), tmp_path / "idx")
    docs = _langchain(index).invoke("What does error E12 mean?")
    assert docs[0].metadata["id"] == "c2"
    assert docs[0].page_content == CHUNKS[1]["contents"]  # both lines: the answer is in the first
    assert docs[0].metadata["title"] == ""
    # an index without titles: the title-following searcher refuses it rather than return naive RAG's top-k
    from searcher.build import build_configured_searcher

    with pytest.raises(ConfigError, match="needs titled documents"):
        build_configured_searcher(SearcherConfig.model_validate({"kind": "title_following"}),
                                  load_retriever(index_dir=index), k0=3)


def _as_built_before_the_rule(index: Path) -> None:
    """index.json as an index built before the title rule has it: no `title_rule`."""
    path = index / "index.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.pop("title_rule", None)
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def test_an_index_built_under_the_old_title_rule_is_named_with_its_rebuild(tmp_path: Path) -> None:
    from searcher.trained import index_fingerprint

    corpus = _jsonl(tmp_path / "chunks.jsonl", CHUNKS)
    index = _index(corpus, tmp_path / "old")
    _as_built_before_the_rule(index)
    with pytest.raises(IndexDirError) as err:
        load_retriever(index_dir=index)
    rebuild = f"s3 index build --corpus {corpus} --backend bm25 --out {index} --overwrite"
    assert str(index) in str(err.value) and "3 of its 3 passages" in str(err.value) and "'c1'" in str(err.value)
    assert str(err.value).endswith(f"rebuild it: {rebuild}")
    # the command it gives repairs it
    assert main(shlex.split(rebuild)[1:]) == 0
    assert _langchain(index).invoke("What does error E12 mean?")[0].page_content == CHUNKS[1]["contents"]

    # an old index whose corpus reads the same under both rules opens, and keeps its fingerprint
    titled = _jsonl(tmp_path / "titled.jsonl", [{"id": "t1", "contents": '"Battery"\nError E12 means too hot.'},
                                                {"id": "t2", "title": "Dock", "text": "Green means charging."}])
    fine = _index(titled, tmp_path / "fine")
    before = index_fingerprint(fine)
    _as_built_before_the_rule(fine)
    assert index_fingerprint(fine) == before
    assert [d.title for d in load_retriever(index_dir=fine).search(["E12"], 1)[0]] == ["Battery"]


def test_an_index_of_a_corpus_prepared_under_the_old_rule_is_named(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "chunks.jsonl", CHUNKS)
    questions = _jsonl(tmp_path / "q.jsonl", [{"id": "q1", "question": "What does E12 mean?", "golden_answers": ["hot"]}])
    prepared = tmp_path / "prepared"
    assert main(["data", "prepare", "flashrag", "--input", str(questions), str(source), "--out", str(prepared)]) == 0
    index = _index(prepared / "corpus.jsonl", tmp_path / "idx")
    assert load_retriever(index_dir=index).get(["c2"])[0].text == CHUNKS[1]["contents"]
    # as `s3 data prepare` and `s3 index build` wrote them before the rule: the prepared corpus held the first lines
    # as quoted titles (its own lines read alike under both rules), its manifest had no renamed_ids
    mpath = prepared / "manifest.json"
    m = json.loads(mpath.read_text(encoding="utf-8"))
    del m["renamed_ids"]
    mpath.write_text(json.dumps(m), encoding="utf-8")
    _as_built_before_the_rule(index)
    with pytest.raises(IndexDirError, match=r"which `s3 data prepare` wrote before the title rule") as err:
        load_retriever(index_dir=index)
    assert f"s3 data prepare flashrag --input {questions} {source} --out {prepared} && s3 index build" in str(err.value)


SHARD_A: list[dict[str, Any]] = [
    {"id": "r7-18", "title": "Battery", "text": "Error E12 means the battery temperature is too high."},
    {"id": "r7-19", "contents": '"Dock"\nThe charging dock light blinks green while charging.'},
    {"id": 20, "contents": "Rinse the filter under warm water."},
]
SHARD_B: list[dict[str, Any]] = [
    {"id": "r7-18", "title": "Wheels", "text": "The wheels lift off when the vacuum is picked up."},  # id taken
    {"id": "copy-of-19", "contents": '"Dock"\nThe charging dock light blinks green while charging.'},  # same passage
]


def test_data_prepare_keeps_the_users_ids_and_maps_the_ones_it_must_change(tmp_path: Path) -> None:
    questions = _jsonl(tmp_path / "q.jsonl", [
        {"id": "q1", "question": "What does error E12 mean?", "golden_answers": ["too high"],
         "metadata": {"supporting_ids": ["r7-18"]}},
    ])
    a, b = _jsonl(tmp_path / "shard_a.jsonl", SHARD_A), _jsonl(tmp_path / "shard_b.jsonl", SHARD_B)
    prepared = tmp_path / "prepared"
    assert main(["data", "prepare", "flashrag", "--input", str(questions), str(a), str(b), "--out", str(prepared)]) == 0
    corpus = [json.loads(line) for line in (prepared / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in corpus] == ["r7-18", "r7-19", "20", "shard_b:r7-18"]
    assert corpus[3]["original_id"] == "r7-18" and all("original_id" not in r for r in corpus[:3])
    manifest = json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))
    assert [(r["original_id"], r["id"], r["reason"]) for r in manifest["renamed_ids"]] == [
        ("copy-of-19", "r7-19", "same passage as r7-19"),
        ("r7-18", "shard_b:r7-18", "duplicate id"),
    ]
    assert (manifest["counts"]["corpus_ids_kept"], manifest["counts"]["corpus_ids_renamed"]) == (3, 2)
    q = json.loads((prepared / "questions.jsonl").read_text(encoding="utf-8"))
    assert q["metadata"]["supporting_ids"] == ["r7-18"]  # still names the user's passage

    from test_service_http import LiveServer

    from searcher.config import ServiceConfig
    from searcher.integrations.langchain import S3Retriever
    from searcher.service import create_search_app

    searcher = _searcher(_index(prepared / "corpus.jsonl", tmp_path / "idx"))
    with LiveServer(create_search_app(searcher, searcher.retriever, ServiceConfig())) as server:
        for retriever in (S3Retriever(searcher=searcher, max_turns=0), S3Retriever(url=server.url, max_turns=0)):
            kept = retriever.invoke("What does error E12 mean?")[0]
            assert kept.metadata["id"] == "r7-18" and "original_id" not in kept.metadata
            renamed = retriever.invoke("Do the wheels lift off?")[0]
            assert renamed.metadata["id"] == "shard_b:r7-18" and renamed.metadata["original_id"] == "r7-18"
            assert renamed.page_content == SHARD_B[0]["text"]
