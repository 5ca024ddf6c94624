"""The copyable teacher (training/prep/oracle.py, teacher="copyable"; issue 45, step 4): it queries a missing gold title
only where the question or a document shown so far shows it, through the real s3 parser, prompt builder and loop."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from s3core.types import Document, QAExample, SearchResult
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.protocol import build_s3_prompt, information_observation, parse_s3_reply, render_information
from training.prep.oracle import (
    contains_phrase,
    first_words,
    norm,
    oracle_script,
    query_is_visible,
    title_variants,
)

Q = "Who directed the film about the inventor of the Earthship?"
GOLD = {Q: ["Garbage Warrior", "Oliver Hodge (director)"]}


def _window(*docs: tuple[str, str]) -> str:
    return render_information([Document(id=t, title=t, text=x) for t, x in docs], None)


def _reply(prompt: str, window_size: int, **kw: object) -> tuple[tuple[int, ...] | None, bool | None, str | None]:
    act = parse_s3_reply(oracle_script(GOLD, 3, 3, **kw)(prompt, 0), window_size=window_size)  # type: ignore[arg-type]
    assert act.invalid_reason is None
    return act.selected, act.search_complete, act.query


def test_a_missing_gold_title_is_asked_only_where_the_prompt_shows_it() -> None:
    hidden = build_s3_prompt(Q, _window(("Earthship", "An Earthship is a house."), ("Garbage Warrior", "A 2007 film.")))
    # the old teacher asks for the title nobody showed; the copyable one selects the gold it has and stops
    assert _reply(hidden, 2) == ((2,), False, "Oliver Hodge (director)")
    assert _reply(hidden, 2, teacher="copyable") == ((2,), True, None)
    assert not query_is_visible("Oliver Hodge (director)", hidden)
    # shown in a document's text without its parenthetical: asked as it is shown
    shown = build_s3_prompt(Q, _window(("Garbage Warrior", "A 2007 film by Oliver Hodge about Michael Reynolds.")))
    assert _reply(shown, 1, teacher="copyable") == ((1,), False, "Oliver Hodge")
    assert query_is_visible("Oliver Hodge", shown) and not query_is_visible("Oliver Hodge (director)", shown)


def test_later_turns_read_what_earlier_turns_retrieved_and_never_ask_twice() -> None:
    gold = {Q: ["Michael Reynolds", "Oliver Hodge (director)"]}
    prompt = build_s3_prompt(Q, _window(("Earthship", "An Earthship is a house designed by Michael Reynolds.")))
    script = oracle_script(gold, 3, 3, teacher="copyable")
    assert parse_s3_reply(script(prompt, 0), window_size=1).query == "Michael Reynolds"
    # the search brought a document that names the director: the next turn may copy him from it
    prompt += script(prompt, 0) + information_observation(
        _window(("Michael Reynolds", "Reynolds is an architect."), ("Garbage Warrior", "A film by Oliver Hodge.")))
    act = parse_s3_reply(script(prompt, 0), window_size=2)
    assert (act.selected, act.query) == ((1,), "Oliver Hodge")
    # the query came back without the gold paragraph: it is not asked again, nothing else is copyable: stop
    prompt += script(prompt, 0) + information_observation(_window(("Oliver Hodge", "An English footballer.")))
    act = parse_s3_reply(script(prompt, 0), window_size=1)
    assert (act.selected, act.search_complete, act.query) == ((), True, None)


def test_only_the_first_visible_words_of_a_document_count() -> None:
    late = " ".join(["word"] * 80) + " Oliver Hodge"
    prompt = build_s3_prompt(Q, _window(("Garbage Warrior", late)))
    assert _reply(prompt, 1, teacher="copyable")[1:] == (True, None)
    assert _reply(prompt, 1, teacher="copyable", visible_words=90)[2] == "Oliver Hodge"
    with pytest.raises(ValueError, match="teacher"):
        oracle_script(GOLD, 3, 3, teacher="psychic")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ the real loop


def _visible_before(result: SearchResult, turn: int, question: str, text_of: dict[str, Document]) -> list[str]:
    """An independent account of what the searcher had seen when it wrote the query searched at `turn`: the question
    and the title + first 70 words of every document retrieved at an earlier turn."""
    segs = [question]
    for s in result.steps:
        if s.turn < turn:
            segs += [f"{text_of[i].title}. {first_words(text_of[i].text, 70)}" for i in s.retrieved_ids]
    return [norm(x) for x in segs]


@pytest.fixture(scope="module")
def hotpot_slice(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[QAExample], Path, Path]:
    """The first 40 hotpotqa_dev500 questions with their 400 distractor-setting paragraphs as the corpus, prepared and
    indexed (bm25) like any dataset."""
    from dataprep.prepare import load_prepared, prepare
    from searcher.retrieval import build_index

    root = tmp_path_factory.mktemp("hotpot40")
    raw = root / "hotpot40.jsonl"
    with (shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl").open(encoding="utf-8") as f:
        raw.write_text("".join(itertools.islice(f, 40)), encoding="utf-8")
    prepare("hotpotqa", [raw], root / "data")
    corpus, examples = load_prepared(root / "data")
    assert corpus is not None
    build_index(corpus, "bm25", root / "index", RetrieverConfig(), overwrite=True)
    return examples, corpus, root / "index"


def test_on_real_questions_every_copyable_query_names_what_the_searcher_saw(hotpot_slice: tuple) -> None:
    """Property, on 40 real HotpotQA questions through the real loop (bm25, 8:3:3, D0 = top-3, additive, cap 5): no
    query of the copyable teacher names a title absent from what it saw; the old teacher's do, on the same data."""
    from s3core.corpus import iter_corpus
    from searcher.build import build_searcher
    from searcher.policy.scripted import ScriptedPolicy
    from searcher.retrieval import load_retriever
    from training.prep.oracle import gold_titles

    examples, corpus, index = hotpot_slice
    text_of = {d.id: d for d in iter_corpus(corpus)}
    gold = gold_titles(examples, corpus)
    retriever = load_retriever(RetrieverConfig(), index)
    cfg = SearcherConfig(k=8, max_turns=3, max_select=3, additive=True, context_cap=5)
    unseen: dict[str, int] = {}
    queries: dict[str, int] = {}
    for teacher in ("copyable", "gold_title"):
        policy = ScriptedPolicy(oracle_script(gold, 3, 3, teacher=teacher))  # type: ignore[arg-type]
        results = build_searcher(cfg, retriever, policy, k0=3).search(examples)
        unseen[teacher] = queries[teacher] = 0
        for e, r in zip(examples, results, strict=True):
            for s in r.steps:
                if s.turn > 0 and s.query:
                    queries[teacher] += 1
                    seen = _visible_before(r, s.turn, e.question, text_of)
                    q = norm(s.query)
                    unseen[teacher] += not any(contains_phrase(x, q) for x in seen)
                    if teacher == "copyable":  # and it asks a gold title, as shown (a variant of one)
                        assert any(q in title_variants(t) for t in gold[e.question.strip()])
    # measured: 19 copyable queries, none unseen; the old teacher 8 of 25 unseen
    assert queries["copyable"] >= 15 and unseen["copyable"] == 0
    assert unseen["gold_title"] >= 5, "the old teacher names unseen titles on this slice: the check can fail"


def test_the_retrieval_check_keeps_the_trajectories_that_add_gold(hotpot_slice: tuple, tmp_path: Path) -> None:
    """training/prep/distill.py's retrieval check (no generator call) on the copyable teacher's real trajectories."""
    import json

    from s3.config import load_config
    from searcher.build import build_searcher
    from searcher.policy.scripted import ScriptedPolicy
    from searcher.retrieval import load_retriever
    from training.prep.distill import candidate_order, retrieval_sample
    from training.prep.oracle import gold_titles

    examples, corpus, index = hotpot_slice
    cfg = load_config(None, ["training.sft.candidates=30"])
    loop = SearcherConfig(k=8, max_turns=3, max_select=3, additive=True, context_cap=5)
    oracle = build_searcher(loop, load_retriever(RetrieverConfig(), index),
                            ScriptedPolicy(oracle_script(gold_titles(examples, corpus), 3, 3, teacher="copyable")), k0=3)
    pool = retrieval_sample(cfg, examples, oracle, tmp_path, log=lambda _m: None, batch=7)
    # independently: the first 30 of the seeded order whose trajectory's documents hold gold the top-3 lacked
    results = oracle.search(examples)
    expected = [i for i in candidate_order(len(examples), cfg.training.seed)[:30]
                if ({d.id for d in results[i].documents} - set(results[i].steps[0].retrieved_ids))
                & set(examples[i].supporting_ids)]
    assert pool == expected and 0 < len(pool) < 30
    summary = json.loads((tmp_path / "distill_summary.json").read_text())
    assert (summary["check"], summary["candidates"], summary["kept"]) == ("gold_added", 30, len(pool))
