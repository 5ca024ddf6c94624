"""`s3 prepare-training` on the real HotpotQA training slice, with the generator behind a REAL loopback
OpenAI-compatible server (through litellm): the naive-RAG baseline and the gold-context accuracy of
training.data.keep_answerable are computed once, cached, and the filter keeps exactly the answerable training questions
while the held-out questions stay as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator_adapters.testing import FakeLLMServer
from s3core.errors import ConfigError

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("training_data")]

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "train_hotpotqa_musique100" / "hotpotqa_train.json"


def test_keep_answerable_drops_questions_the_generator_fails_even_with_gold_paragraphs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataprep import load
    from s3.config import load_config
    from training.prep import data as prep_data
    from training.prep.data import prepare_training

    built: list[Path] = []  # the real retriever, counted: one preparation loads its index once for every step
    real_build = prep_data.build_retriever

    def counted(cfg, index_dir):  # type: ignore[no-untyped-def]
        built.append(index_dir)
        return real_build(cfg, index_dir)

    monkeypatch.setattr(prep_data, "build_retriever", counted)

    corpus, questions = load("hotpotqa", [DATA])
    questions = [q for q in questions if q.golden_answers[0].lower() not in ("yes", "no")][:10]
    title_of = {d.id: d.title for d in corpus}
    # the generator "knows" the answer of every other question, and only when a gold paragraph is in its context
    knows = {q.question: (q.golden_answers[0], [title_of[i] for i in q.supporting_ids]) for q in questions[::2]}

    def reply(prompt: str) -> str:
        for question, (answer, titles) in knows.items():
            if f"Question: {question}\n" in prompt and any(f"(Title: {t})" in prompt for t in titles):
                return answer
        return "I do not know."

    with FakeLLMServer(reply=reply) as srv:
        over = [
            "generator.model=openai/fake", f"generator.api_base={srv.api_base}", "generator.cache_path=null",
            f"training.data.sources={json.dumps([f'hotpotqa:{DATA}'])}", f"training.data.dir={tmp_path / 'data'}",
            "training.data.max_questions=12", "training.heldout.questions=3", "training.data.keep_baseline_zero=false",
            "training.data.keep_answerable=true", "training.reward=acc_plus_gbr", "eval.metric=span",
        ]
        cfg = load_config(None, over)
        manifest = prepare_training(cfg, log=lambda s: None)
        calls = srv.stats()["requests"]
        assert calls > 0
        assert built == [tmp_path / "data" / "index"]  # the baseline's top-k and the gold paragraphs: one retriever
        kept = [json.loads(line) for line in (tmp_path / "data" / "train.jsonl").read_text().splitlines()]
        loaded = [json.loads(line) for line in (tmp_path / "data" / "questions.jsonl").read_text().splitlines()]
        usable = [q for q in loaded if q["golden_answers"][0].lower() not in ("yes", "no")]
        pool, held = usable[:-3], usable[-3:]
        # training part: exactly the questions answered from their gold paragraphs; held-out part: untouched
        assert [q["id"] for q in kept[:-3]] == [q["id"] for q in pool if q["question"] in knows]
        assert [q["id"] for q in kept[-3:]] == [q["id"] for q in held]
        c = manifest["counts"]
        assert c["after_keep_answerable"] == len(kept) < c["after_keep_baseline_zero"]
        a = manifest["answerable"]
        assert a["judged"] == len(pool) and a["heldout_unfiltered"] == 3 and a["failed_dropped"] == 0
        assert a["gold_acc_mean"] == pytest.approx(sum(q["question"] in knows for q in pool) / len(pool))
        # a second preparation reads both caches: no generator call at all
        (tmp_path / "data" / "train.jsonl").unlink()
        again = prepare_training(cfg, log=lambda s: None)
        assert again["counts"] == manifest["counts"] and again["baseline_cache"]["hit_rate"] == 1.0
        assert srv.stats()["requests"] == calls
        # a fresh clone: the directory elsewhere with its caches only (baseline.jsonl, gold.jsonl, manifest): the
        # corpus and the index are rebuilt, the rebuilt index has the same fingerprint, so no generator call either
        import shutil

        moved = tmp_path / "clone" / "data"
        shutil.copytree(tmp_path / "data", moved)
        shutil.rmtree(tmp_path / "data")
        for name in ("corpus.jsonl", "questions.jsonl", "train.jsonl", "index"):
            shutil.rmtree(moved / name) if (moved / name).is_dir() else (moved / name).unlink()
        cfg2 = load_config(None, [*(o for o in over if not o.startswith("training.data.dir=")),
                                  f"training.data.dir={moved}"])
        third = prepare_training(cfg2, log=lambda s: None)
        assert third["counts"] == manifest["counts"] and third["baseline_cache"]["hit_rate"] == 1.0
        assert srv.stats()["requests"] == calls and third["index"] == "index"  # relative: the directory can move
        # the sources too: relative to the directory, so a committed one stays the same file in a clone elsewhere
        assert [(moved / s["path"]).resolve() for s in third["sources"]] == [Path(DATA).resolve()]
        assert json.loads((moved / "sources.json").read_text()) == third["sources"]
        from training.prep.data import load_training_set

        assert load_training_set(cfg2).index_dir == moved / "index"
        # the cache key is the fingerprint of what the index is, nothing else: rows under another key (here the one
        # caches carried before fingerprints left out path and time, the sha256 of index.json's bytes) are recomputed
        from s3core.io import file_sha256
        from training.prep.data import _key_hash

        old = _key_hash({**third["baseline_key"], "index": file_sha256(moved / "index" / "index.json")[:16]})
        rows = [json.loads(line) for line in (moved / "baseline.jsonl").read_text().splitlines()]
        (moved / "baseline.jsonl").write_text("".join(json.dumps({**r, "key": old}) + "\n" for r in rows))
        fourth = prepare_training(cfg2, log=lambda s: None)
        assert fourth["baseline_cache"]["hit_rate"] == 0.0 and srv.stats()["requests"] == calls + len(rows)
        assert fourth["counts"] == manifest["counts"]
        ts = load_training_set(cfg2)  # the recomputed rows are the cache now
        assert {e.id for e in ts.examples} <= set(ts.baseline)
        # an index rebuilt under another fingerprint with the same retrieval (index.json described differently): rows
        # of the previous manifest's key are carried over where their top-k ids are today's, the others recomputed
        m = json.loads((moved / "manifest.json").read_text())
        prev = {**m["baseline_key"], "index": "0123456789abcdef"}
        (moved / "manifest.json").write_text(json.dumps({**m, "baseline_key": prev}))
        rows = [json.loads(line) for line in (moved / "baseline.jsonl").read_text().splitlines()]
        rows = [{**r, "key": _key_hash(prev)} for r in rows if r["key"] == fourth["baseline_key_hash"]]
        rows[0]["doc_ids"] = list(reversed(rows[0]["doc_ids"]))  # another top-k than today's: stale
        (moved / "baseline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        before = srv.stats()["requests"]
        fifth = prepare_training(cfg2, log=lambda s: None)
        assert fifth["baseline_cache"]["rekeyed_same_doc_ids"] == len(rows) - 1
        assert fifth["baseline_cache"]["computed"] == 1 and srv.stats()["requests"] == before + 1
        assert fifth["counts"] == manifest["counts"]
        assert {e.id for e in load_training_set(cfg2).examples} <= set(load_training_set(cfg2).baseline)


def test_keep_baseline_zero_filters_the_training_part_and_leaves_the_heldout_mix(tmp_path: Path) -> None:
    """s3's filter (only questions naive RAG fails) applies to the questions trained on; the held-out ones, on which
    checkpoints are chosen, keep the natural mix of questions naive RAG gets right and wrong."""
    from dataprep import load
    from s3.config import load_config
    from training.prep.data import load_training_set, prepare_training

    _corpus, questions = load("hotpotqa", [DATA])
    answer_of = {q.question: q.golden_answers[0] for q in questions}

    def reply(prompt: str) -> str:  # right on every other question (by the question's length), whatever the context
        q = prompt.split("Question: ", 1)[-1].split("\n", 1)[0]
        return answer_of.get(q, "no idea") if len(q) % 2 else "no idea"

    with FakeLLMServer(reply=reply) as srv:
        cfg = load_config(None, [
            "generator.model=openai/fake", f"generator.api_base={srv.api_base}", "generator.cache_path=null",
            f"training.data.sources={json.dumps([f'hotpotqa:{DATA}'])}", f"training.data.dir={tmp_path / 'data'}",
            "training.data.max_questions=16", "training.heldout.questions=4", "training.data.keep_baseline_zero=true",
            "training.reward=acc_plus_gbr", "eval.metric=span",
        ])
        manifest = prepare_training(cfg, log=lambda s: None)
    ts = load_training_set(cfg)
    loaded = [json.loads(line) for line in (tmp_path / "data" / "questions.jsonl").read_text().splitlines()]
    usable = [q["id"] for q in loaded if q["golden_answers"][0].lower() not in ("yes", "no", "true", "false")]
    ids = [e.id for e in ts.examples]
    assert ids[-4:] == usable[-4:]  # the held-out part, untouched
    assert ids[:-4] == [i for i in usable[:-4] if ts.baseline[i] == 0.0]  # the training part: naive RAG fails
    assert 0 < len(ids) - 4 < len(usable) - 4 and manifest["counts"]["after_keep_baseline_zero"] == len(ids)


def _hotpot(qid: str, question: str, answer: str, paras: list[tuple[str, str]], gold: list[str]) -> dict[str, object]:
    return {"_id": qid, "question": question, "answer": answer, "type": "bridge", "level": "easy",
            "supporting_facts": [[t, 0] for t in gold], "context": [[t, [text]] for t, text in paras]}


def test_exclude_sources_removes_shared_paragraphs_and_the_questions_that_needed_them(tmp_path: Path) -> None:
    from s3.config import load_config
    from training.prep.data import prepare_training

    shared = ("Shared Title", "A paragraph that the evaluation slice has too.")
    train = [
        _hotpot("t1", "Who wrote A?", "Ann", [("A", "A was written by Ann."), shared], ["A"]),
        _hotpot("t2", "Where is B?", "Bern", [("B", "B is in Bern."), ("C", "C is elsewhere.")], ["B"]),
        _hotpot("t3", "What is shared?", "it", [("D", "D is a letter."), shared], ["Shared Title", "D"]),
        _hotpot("t4", "When was E?", "1900", [("E", "E happened in 1900."), ("F", "F did not.")], ["E"]),
    ]
    dev = [_hotpot("d1", "Dev question?", "x", [shared, ("G", "G is only in dev.")], ["G"])]
    (tmp_path / "train.json").write_text(json.dumps(train))
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    train_file, dev_file = tmp_path / "train.json", tmp_path / "dev.json"
    over = [
        f"training.data.sources={json.dumps([f'hotpotqa:{train_file}'])}",
        f"training.data.exclude_sources={json.dumps([f'hotpotqa:{dev_file}'])}",
        f"training.data.dir={tmp_path / 'data'}", "training.data.shuffle_seed=3", "training.reward=em",
        "training.data.keep_baseline_zero=false", "generator.cache_path=null",
    ]
    manifest = prepare_training(load_config(None, over), log=lambda s: None)
    corpus = [json.loads(line) for line in (tmp_path / "data" / "corpus.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (tmp_path / "data" / "questions.jsonl").read_text().splitlines()]
    kept = [r["id"] for r in rows]
    assert not any("Shared Title" in d["contents"] for d in corpus) and len(corpus) == 6
    assert sorted(r["question"] for r in rows) == ["When was E?", "Where is B?", "Who wrote A?"]  # t3 needed it
    c = manifest["counts"]
    assert (c["loaded_questions"], c["loaded_paragraphs"], c["excluded_paragraphs"], c["dropped_gold_excluded"],
            c["loaded"]) == (4, 7, 1, 1, 3)
    # the same seed gives the same order
    again = prepare_training(load_config(None, [*over[:2], f"training.data.dir={tmp_path / 'again'}", *over[3:]]),
                             log=lambda s: None)
    assert again["counts"] == c
    assert [json.loads(x)["id"] for x in (tmp_path / "again" / "questions.jsonl").read_text().splitlines()] == kept


def test_the_preparation_stage_prepares_what_is_missing_once_and_logs_it(tmp_path: Path) -> None:
    """`s3 train`'s preparation stage (training/prep/data.py's prepared_training_set): a missing directory is prepared, with
    a log line saying so; a prepared one is loaded as it is; other filters prepare again. A keep_answerable filter
    without a baseline (reward em) is counted in the manifest like the one after it."""
    from s3.config import load_config
    from training.prep.data import prepared_training_set

    train = [
        _hotpot("t1", "Who wrote A?", "Ann", [("A", "A was written by Ann."), ("B", "B is a letter.")], ["A"]),
        _hotpot("t2", "Is B a letter?", "yes", [("B", "B is a letter."), ("C", "C is elsewhere.")], ["B"]),
        _hotpot("t3", "Where is C?", "Chur", [("C", "C is in Chur."), ("D", "D is not.")], ["C"]),
    ]
    train_file = tmp_path / "train.json"
    train_file.write_text(json.dumps(train))

    def reply(prompt: str) -> str:  # answers from the gold paragraph of t1 only
        return "Ann" if "A was written by Ann." in prompt else "I do not know."

    with FakeLLMServer(reply=reply) as srv:
        over = [
            f"training.data.sources={json.dumps([f'hotpotqa:{train_file}'])}",
            f"training.data.dir={tmp_path / 'data'}", "training.reward=em", "training.data.keep_baseline_zero=false",
            "training.heldout.questions=0", "generator.model=openai/fake", f"generator.api_base={srv.api_base}",
            "generator.cache_path=null", "eval.metric=span",
        ]
        logs: list[str] = []
        data = prepared_training_set(load_config(None, over), log=logs.append)
        assert [e.id for e in data.examples] == ["t1", "t3"] and "preparing the training data" in logs[0]
        assert data.manifest["baseline"].startswith("skipped") and "after_keep_answerable" not in data.manifest["counts"]
        logs.clear()
        assert [e.id for e in prepared_training_set(load_config(None, over), log=logs.append).examples] == ["t1", "t3"]
        assert len(logs) == 1 and "is prepared (2 training questions)" in logs[0]  # loaded, nothing prepared
        logs.clear()
        strict = prepared_training_set(load_config(None, [*over, "training.data.keep_answerable=true"]), log=logs.append)
        assert "filters" in logs[0] and srv.stats()["requests"] == 2  # the gold context of t1 and t3, asked once
        assert [e.id for e in strict.examples] == ["t1"]
        assert strict.manifest["counts"]["after_keep_answerable"] == 1 and strict.manifest["answerable"]["judged"] == 2


def test_keep_copyable_keeps_the_questions_whose_missing_gold_title_is_visible(tmp_path: Path) -> None:
    """training.data.keep_copyable (issue 45's curriculum) on a real bm25 index, no generator: a training question is
    kept where naive RAG's top-k lacks a gold paragraph whose title the question or a top-k document shows; the
    held-out questions stay; the filter is recorded, and a directory prepared without it is not re-prepared."""
    from s3.config import load_config
    from training.prep.data import data_filters, prepare_training

    train = [  # retriever.k = 1: the question's top-1 is its first paragraph (the words it shares)
        _hotpot("t1", "Which river flows through the capital of Veldor?", "Sarn",
                [("Veldor", "Veldor is a country whose capital is Ostmark."), ("Ostmark", "Ostmark lies on the Sarn.")],
                ["Veldor", "Ostmark"]),  # Ostmark missing from the top-1 and named in it: copyable
        _hotpot("t2", "Which river flows through the capital of Quill?", "Tarn",
                [("Quill", "Quill is a country in the north."), ("Brede", "Brede lies on the Tarn.")],
                ["Quill", "Brede"]),  # Brede missing and named nowhere it can see: not copyable
        _hotpot("t3", "Where is the lighthouse of Harrow?", "Harrow Point",
                [("Harrow lighthouse", "The lighthouse of Harrow is on Harrow Point.")], ["Harrow lighthouse"]),
        _hotpot("t5", "Which river flows through Dunmore, the capital of Arlen?", "Wye",
                [("Arlen", "Arlen is a country whose capital is Dunmore."), ("Dunmore", "Dunmore lies on the Wye.")],
                ["Arlen", "Dunmore"]),  # Dunmore missing from the top-1 and named in the question: copyable
        _hotpot("t4", "Which river flows through the capital of Mirel?", "Lune",
                [("Mirel", "Mirel is a country."), ("Pell", "Pell lies on the Lune.")], ["Mirel", "Pell"]),  # held out
    ]
    train_file = tmp_path / "train.json"
    train_file.write_text(json.dumps(train))
    over = [f"training.data.sources={json.dumps([f'hotpotqa:{train_file}'])}", f"training.data.dir={tmp_path / 'd'}",
            "training.reward=retrieval_gain", "training.data.keep_baseline_zero=false", "training.heldout.questions=1",
            "training.data.drop_yes_no=false", "retriever.k=1", "training.data.keep_copyable=true"]
    cfg = load_config(None, over)
    manifest = prepare_training(cfg, log=lambda s: None)
    kept = [json.loads(line)["id"] for line in (tmp_path / "d" / "train.jsonl").read_text().splitlines()]
    assert kept == ["t1", "t5", "t4"]  # t1, t5 copyable; t2 not; t3's top-1 holds its gold; t4 held out, untouched
    assert manifest["copyable"] == {"pool": 4, "kept": 2, "heldout_unfiltered": 1, "places": {
        "none missing": 1, "question": 1, "documents": 1, "unseen": 1}}
    assert manifest["counts"]["after_keep_copyable"] == 3 and manifest["filters"]["keep_copyable"] is True
    assert "keep_copyable" not in data_filters(load_config(None, over[:-1]))  # old directories' filters still match
    assert "copyable_places" not in manifest["filters"]  # the default is not recorded: phase 1d's directory matches
    # copyable_places = ["documents"]: only the title a retrieved document shows (the bridge), not the question's
    narrow = [f"training.data.dir={tmp_path / 'd2'}" if o.startswith("training.data.dir=") else o for o in over]
    narrow.append('training.data.copyable_places=["documents"]')
    manifest = prepare_training(load_config(None, narrow), log=lambda s: None)
    kept = [json.loads(line)["id"] for line in (tmp_path / "d2" / "train.jsonl").read_text().splitlines()]
    assert kept == ["t1", "t4"] and manifest["filters"]["copyable_places"] == ["documents"]
    with pytest.raises(ConfigError, match=r"copyable_places narrows training\.data\.keep_copyable, which is off"):
        load_config(None, [*over[:-1], 'training.data.copyable_places=["documents"]'])  # no effect: an error


def test_with_the_title_following_start_the_baseline_sees_the_scripts_documents(tmp_path: Path) -> None:
    """searcher.start = 'title_following' (issue 60 build step 3): GBR's baseline is the generator with the
    searcher's D0, the script's documents, under a key of its own; naive RAG's key (and every cache written under
    it) is unchanged by the setting's existence."""
    from s3.config import load_config
    from searcher.build import build_retriever
    from searcher.title_following import TitleFollowingSearcher, corpus_titles
    from training.prep.data import baseline_key, load_training_set, prepare_training

    with FakeLLMServer(reply=lambda prompt: "no idea") as srv:
        common = ["generator.model=openai/fake", f"generator.api_base={srv.api_base}", "generator.cache_path=null",
                  f"training.data.sources={json.dumps([f'hotpotqa:{DATA}'])}", "training.data.max_questions=8",
                  "training.heldout.questions=2", "training.reward=acc_plus_gbr", "eval.metric=span"]
        plain = load_config(None, [*common, f"training.data.dir={tmp_path / 'plain'}"])
        start = load_config(None, [*common, f"training.data.dir={tmp_path / 'start'}", "searcher.start=title_following",
                                   "searcher.additive=true", "searcher.context_cap=6"])
        assert "start" not in baseline_key(plain, "fp") and baseline_key(plain, "fp") == {
            k: v for k, v in baseline_key(start, "fp").items() if k != "start"}
        assert baseline_key(start, "fp")["start"] == {"start": "title_following", "start_cap": 5, "k": 8}
        prepare_training(plain, log=lambda s: None)
        prepare_training(start, log=lambda s: None)
    rows = {name: {r["id"]: r["doc_ids"] for r in map(json.loads, (tmp_path / name / "baseline.jsonl").read_text(
        encoding="utf-8").splitlines())} for name in ("plain", "start")}
    ts = load_training_set(start)
    r = build_retriever(start.retriever, ts.index_dir)
    script = TitleFollowingSearcher(r, start.searcher.model_copy(update={"kind": "title_following", "context_cap": 5,
                                                                        "max_turns": 1}), k0=3, titles=corpus_titles(r))
    qs = {e.id: e.question for e in ts.examples}
    found, _ = script.follow(list(qs.values()))
    assert rows["start"] == {i: [d.id for d in f.documents] for i, f in zip(qs, found, strict=True)}
    assert all(len(v) == 3 for v in rows["plain"].values())  # naive RAG's top-3
    assert any(len(v) > 3 for v in rows["start"].values()), "the script added pages on some question"
