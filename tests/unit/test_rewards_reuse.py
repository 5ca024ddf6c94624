"""Where a rollout's documents are naive RAG's top-k (an additive searcher that added nothing), Acc(G(Q, D_s3)) is the
cached naive-RAG Acc: the training scorer makes no generator call (issue 45, step 2), and evaluation sends the
generator naive RAG's exact prompt (the response cache answers it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import training.rewards as rw
from eval.contexts import ContextFn, ContextOut
from s3core.types import Document, QAExample, SearchResult, SearchStep


def _ex(i: int) -> QAExample:
    return QAExample(id=f"q{i}", question=f"question {i}?", golden_answers=["a"], metadata={"supporting_ids": ["g"]})


def _res(top: list[str], docs: list[str]) -> SearchResult:
    steps = [SearchStep(turn=0, query="q", retrieved_ids=top), SearchStep(turn=1, query="more")]
    return SearchResult(question="q", documents=[Document(id=d, text=d) for d in docs], steps=steps)


class CountingAccuracy:
    """A fake Acc(G(Q, D)): 1.0 when document 'g' is in D; records every (question, document ids) it is asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str]]] = []

    async def __call__(self, qs: list[str], docs: list[list[Document]], golden: list[list[str]]) -> list[float | None]:
        self.asked += [(q, [d.id for d in ds]) for q, ds in zip(qs, docs, strict=True)]
        return [float(any(d.id == "g" for d in ds)) for ds in docs]


@pytest.mark.parametrize("reward", ["gbr", "acc_plus_gbr"])
def test_naive_rags_documents_are_scored_from_the_cached_baseline_without_a_call(reward: str) -> None:
    ex = [_ex(0), _ex(1), _ex(2), _ex(3)]
    baseline = {"q0": 1.0, "q1": 0.0, "q2": 0.0, "q3": 0.0}
    res = [
        _res(["a", "b", "c"], ["a", "b", "c"]),  # nothing added: naive RAG's prompt, its cached Acc (1.0, not the fake's 0)
        _res(["a", "b", "c"], ["a", "b", "c", "g"]),  # added gold: the generator is asked
        _res(["a", "b", "c"], ["b", "a", "c"]),  # the same documents in another order: another prompt, asked
        _res(["a", "b", "c"], ["a", "b"]),  # pruned (a non-additive searcher): asked
    ]
    acc = CountingAccuracy()
    scorer = rw.RewardScorer(reward, accuracy=acc, baseline=baseline)
    out = asyncio.run(scorer.score(res, ex))
    assert [q for q, _ in acc.asked] == ["question 1?", "question 2?", "question 3?"]
    assert out.acc_s3 == [1.0, 1.0, 0.0, 0.0] and out.reused_baseline == 1
    assert out.rewards[0] == (0.0 if reward == "gbr" else 1.0)  # GBR = 0 by definition where nothing was added
    assert out.rewards[1] == (1.0 if reward == "gbr" else 2.0)
    asyncio.run(scorer.score(res[:1] * 3, ex[:1] * 3))
    assert len(acc.asked) == 3 and scorer.counts() == {"reused_baseline": 4.0}


def test_without_a_cached_baseline_the_generator_is_asked() -> None:
    # r1_searcher_stage2 in s3 mode reads no baseline: a rollout equal to the top-k is still scored by a call
    acc = CountingAccuracy()
    out = asyncio.run(rw.RewardScorer("r1_searcher_stage2", accuracy=acc).score([_res(["g"], ["g"])], [_ex(0)]))
    assert len(acc.asked) == 1 and out.reused_baseline == 0 and out.acc_s3 == [1.0]
    # with the question's baseline cached, the same rollout is scored from it
    acc2 = CountingAccuracy()
    out = asyncio.run(rw.RewardScorer("r1_searcher_stage2", accuracy=acc2, baseline={"q0": 0.0})
                      .score([_res(["g"], ["g"])], [_ex(0)]))
    assert acc2.asked == [] and out.reused_baseline == 1 and out.acc_s3 == [0.0]


# ------------------------------------------------------------------------------------------------ real components


def _run(source: ContextFn, qs: list[QAExample]) -> list[ContextOut]:
    async def go() -> list[ContextOut]:
        return await source(qs)

    return asyncio.run(go())


def test_an_additive_searcher_that_adds_nothing_sends_naive_rags_exact_prompt(tmp_path: Path) -> None:
    """Real bm25 index, the real additive loop, eval's naive-RAG and searcher context sources (live and from a
    contexts file), a real Generator with its sqlite response cache over a loopback LLM server: the searcher's prompt
    is byte-identical to naive RAG's, so evaluation's call is a cache hit (the server is asked once per question)."""
    from eval.contexts import (
        agent_contexts,
        fixed_contexts,
        lookup_documents,
        read_contexts_file,
        retriever_contexts,
    )
    from generator_adapters.cache import ResponseCache
    from generator_adapters.config import GeneratorConfig
    from generator_adapters.generator import Generator
    from generator_adapters.testing import FakeLLMServer
    from s3core.corpus import write_corpus
    from searcher.build import build_searcher
    from searcher.config import RetrieverConfig, SearcherConfig
    from searcher.policy.scripted import ScriptedPolicy
    from searcher.retrieval import build_index, load_retriever

    docs = [Document(id=f"d{i}", title=f"Title {i}", text=f"Paragraph {i} about earthships and film number {i}.")
            for i in range(6)]
    write_corpus(tmp_path / "corpus.jsonl", docs)
    build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "index", RetrieverConfig(), overwrite=True)
    bm25 = load_retriever(RetrieverConfig(), tmp_path / "index")
    qs = [QAExample(id="a", question="Which film about earthships?", golden_answers=["x"]),
          QAExample(id="b", question="Paragraph 3 number?", golden_answers=["y"])]
    naive = _run(retriever_contexts(bm25, 3), qs)
    stop = ScriptedPolicy(lambda _p, _i: "<important_info>[2]</important_info>\n<search_complete>True</search_complete>")
    agent = build_searcher(SearcherConfig(additive=True, context_cap=5), bm25, stop, k0=3)
    live = _run(agent_contexts(agent, own_answer=False, trajectories=tmp_path / "contexts.jsonl"), qs)
    assert [[d.id for d in c.documents] for c in live] == [[d.id for d in c.documents] for c in naive]

    with FakeLLMServer() as srv:
        gen = Generator(GeneratorConfig(model="openai/fake", api_base=srv.api_base, max_retries=0),
                        cache=ResponseCache(tmp_path / "cache.sqlite"))
        for c_naive, c_live, q in zip(naive, live, qs, strict=True):
            assert gen.messages(q.question, c_live.documents) == gen.messages(q.question, c_naive.documents)
        gen.answer_sync([q.question for q in qs], [c.documents for c in naive])
        answers = gen.answer_sync([q.question for q in qs], [c.documents for c in live])
        assert all(a.cached for a in answers) and srv.stats()["requests"] == len(qs)
        # `s3 eval --contexts FILE` replaying the searcher's trajectories (texts looked up in the index by id, as
        # eval/build.py does): the same prompt again
        raw = read_contexts_file(tmp_path / "contexts.jsonl", [q.id for q in qs])
        texts = lookup_documents({str(d["id"]) for ds in raw.values() for d in ds}, None, bm25.get)
        replay = _run(fixed_contexts({q: [texts[str(d["id"])] for d in ds] for q, ds in raw.items()}), qs)
        for c_naive, c_file, q in zip(naive, replay, qs, strict=True):
            assert gen.messages(q.question, c_file.documents) == gen.messages(q.question, c_naive.documents)
        gen.close()
