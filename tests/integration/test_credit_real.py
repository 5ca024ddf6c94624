"""Teacher-forced answer log-probabilities on the real offline models (llama.cpp): the shared prefix computed once
gives what scoring every prompt from scratch gives (within llama.cpp's batch-size rounding), and the frozen generator's
credit prefers the page that holds the answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3core.types import Document

pytestmark = pytest.mark.integration
pytest.importorskip("llama_cpp")


def _chat(docs: list[str]) -> list[dict[str, str]]:
    ctx = "\n".join(f"Doc {i} (Title: T{i}) {d}" for i, d in enumerate(docs, 1))
    return [{"role": "user", "content": f"Contexts: {ctx}\nQuestion: Where was Ann Lee born?\nAnswer directly."}]


def test_shared_prefix_scores_as_scoring_from_scratch() -> None:
    from s3runtime.llm_score import LocalScorer

    base = ["Ann Lee is a painter.", "Oslo is a city in Norway."]
    chats = [_chat(base), _chat([*base, "Ann Lee was born in Bergen."]), _chat([*base, "Rome is in Italy."])]
    with LocalScorer("smollm2-135m-instruct", threads=1) as shared:
        together = shared.score(chats, "Bergen")
        assert together[1].computed_tokens < together[1].prompt_tokens  # the prefix came from the cache
    alone = []
    for chat in chats:
        with LocalScorer("smollm2-135m-instruct", threads=1) as fresh:
            alone.append(fresh.score([chat], "Bergen")[0])
    for a, b in zip(together, alone, strict=True):
        assert a.tokens == b.tokens and a.prompt_tokens == b.prompt_tokens
        assert a.logprob == pytest.approx(b.logprob, abs=0.1)  # llama.cpp rounds differently by batch size
    assert together[1].logprob > together[2].logprob  # the page with the answer makes it likelier


def test_the_generators_credit_prefers_the_page_with_the_answer() -> None:
    from generator_adapters.config import GeneratorConfig
    from generator_adapters.likelihood import AnswerLikelihood

    lik = AnswerLikelihood(GeneratorConfig(model="local/qwen2.5-coder-0.5b-instruct", cache_path=None), threads=1)
    try:
        start = [Document(id="a", title="Ann Lee", text="Ann Lee is a Norwegian painter of coastal scenes.")]
        cands = [Document(id="r", title="Rome", text="Rome is the capital of Italy."),
                 Document(id="b", title="Ann Lee (painter)", text="Ann Lee was born in Bergen in 1950.")]
        credit = lik.credit("Where was Ann Lee born?", start, cands, ["Bergen"])
    finally:
        lik.close()
    assert credit.base < 0 and credit.answer_tokens >= 1
    assert credit.gains[1] > 1.0 > credit.gains[0]
    assert credit.computed_tokens < credit.prompt_tokens


def test_a_served_generator_without_logprobs_is_refused_with_the_alternative() -> None:
    from generator_adapters.config import GeneratorConfig
    from generator_adapters.likelihood import AnswerLikelihood
    from s3core.errors import ConfigError

    with pytest.raises(ConfigError, match="local/"):
        AnswerLikelihood(GeneratorConfig(model="openai/gpt-4o-mini"))


def test_genacc_credit_from_the_real_generators_answers(tmp_path: Path) -> None:
    """training.reading.credit = 'genacc' through `s3 train`'s credit stage with the offline 0.5B answering for
    real (greedy, as the GBR reward asks it): the page with the answer turns its answer right, a page without does
    not, and the row lands in the store."""
    from s3.config import load_config
    from s3core.types import QAExample
    from training.reading.candidates import Candidates
    from training.reading.trainer import ReadingRun

    cfg = load_config(None, ["searcher.kind=reading", "training.reading.credit=genacc",
                             "generator.model=local/qwen2.5-coder-0.5b-instruct", "generator.cache_path=none",
                             "eval.use_judge=false", f"training.output_dir={tmp_path / 'run'}"])
    run = ReadingRun(cfg, log=lambda m: None)
    q = QAExample(id="q1", question="Where was Ann Lee born?", golden_answers=["Bergen"])
    cands = {"q1": Candidates(
        question=q.question, start=[Document(id="a", title="Ann Lee", text="Ann Lee is a Norwegian painter of coastal scenes.")],
        candidates=[Document(id="r", title="Rome", text="Rome is the capital of Italy."),
                    Document(id="b", title="Ann Lee (painter)", text="Ann Lee was born in Bergen in 1950.")],
        ranks=[4, 5], titled=True)}
    store = run.credit([q], cands)
    row = store["q1"]
    assert row["base"] == 0.0 and row["gains"] == [0.0, 1.0], row
