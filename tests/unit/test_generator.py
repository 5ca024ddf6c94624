"""Generator / Judge logic: the s3 prompts (Figures 12-13), prompt configuration, batching, yes/no parsing."""

from __future__ import annotations

import asyncio

import pytest

from generator_adapters import Generator, GeneratorConfig, Judge, JudgeConfig, parse_yes_no
from generator_adapters.prompts import prompt_hash
from s3core.errors import ConfigError, S3Error
from s3core.types import Document

DOCS = [Document(id="a", title="Earthship", text="A passive solar house."), Document(id="b", title="Garbage Warrior", text="A 2007 film.")]


class Echo:
    """Completion function returning a scripted reply per call, recording the prompts it saw."""

    def __init__(self, reply=lambda prompt: "ok") -> None:
        self.reply = reply
        self.prompts: list[str] = []

    async def __call__(self, **kwargs):
        import litellm

        prompt = kwargs["messages"][0]["content"]
        self.prompts.append(prompt)
        text = self.reply(prompt)
        if isinstance(text, Exception):
            raise text
        return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": text}}])


def _gen(**over) -> tuple[Generator, Echo]:
    fn = Echo(lambda p: "2007")
    return Generator(GeneratorConfig(model="openai/fake", cache_path=None, **over), completion_fn=fn), fn


def test_s3_answer_prompt_is_figure_12() -> None:
    gen, _ = _gen()
    assert gen.prompt("When was the film made?", DOCS) == (
        "Use the following contexts (some might be irrelevant) on demand:\n"
        "Contexts: Doc 1 (Title: Earthship) A passive solar house.\n"
        "Doc 2 (Title: Garbage Warrior) A 2007 film.\n"
        "Question: When was the film made?\n"
        "Important: You MUST directly answer the question without any other text."
    )
    assert gen.prompt("When?", None) == (
        "Question: When?\nImportant: You MUST directly answer the question without any other text."
    )


def test_custom_templates_and_hash() -> None:
    gen, _ = _gen()
    custom, _ = _gen(prompt="Docs:\n{context}\nQ: {question}\nA:")
    assert custom.prompt("Q?", DOCS[:1]) == "Docs:\nDoc 1 (Title: Earthship) A passive solar house.\nQ: Q?\nA:"
    assert gen.prompt_hash() != custom.prompt_hash()
    assert gen.prompt_hash() == _gen()[0].prompt_hash() == prompt_hash(gen.template, gen.template_no_context)
    with pytest.raises(ConfigError, match="neither a known name"):
        _gen(prompt="s3_answr")
    with pytest.raises(ConfigError, match=r"must use the fields \['context', 'question'\]"):
        _gen(prompt="Q: {question} {contxt}")
    with pytest.raises(ConfigError, match="not a valid format string"):
        _gen(prompt="Q: {question")


def test_answer_batches_in_order_and_validates_input() -> None:
    fn = Echo(lambda p: p.rsplit("Question: ", 1)[1].split("\n")[0].upper())
    gen = Generator(GeneratorConfig(model="openai/fake", cache_path=None), completion_fn=fn)
    qs = [f"q{i}" for i in range(10)]
    answers = gen.answer_sync(qs, [DOCS] * 10)
    assert [a.text for a in answers] == [q.upper() for q in qs]
    assert all(a.ok and a.model == "openai/fake" for a in answers)
    with pytest.raises(S3Error, match="10 questions but 2 context lists"):
        gen.answer_sync(qs, [DOCS, DOCS])
    with pytest.raises(S3Error, match="list of questions"):
        gen.answer_sync("one string")  # type: ignore[arg-type]


def test_identical_calls_in_a_batch_are_made_once_when_answers_are_interchangeable() -> None:
    """A GRPO group's rollouts often end with the same context: greedy decoding makes one call for them."""
    import litellm

    fn = Echo(lambda p: p.rsplit("Question: ", 1)[1].split("\n")[0].upper())
    gen = Generator(GeneratorConfig(model="openai/fake", cache_path=None), completion_fn=fn)
    answers = gen.answer_sync(["q1", "q2", "q1", "q1", "q3"], [DOCS, DOCS, DOCS, DOCS[:1], DOCS])
    assert [a.text for a in answers] == ["Q1", "Q2", "Q1", "Q1", "Q3"]
    assert len(fn.prompts) == 4  # (q1, DOCS) asked once; (q1, DOCS[:1]) is another call
    assert [a.cached for a in answers] == [False, False, True, False, False]
    assert answers[2].attempts == 0 and answers[0].attempts == 1
    st = gen.stats()
    assert (st["requests"], st["provider_calls"], st["succeeded"], st["deduplicated"]) == (5, 4, 5, 1)
    # sampling without a cache: every call is its own sample
    fn2 = Echo(lambda p: "x")
    sampled = Generator(GeneratorConfig(model="openai/fake", cache_path=None, temperature=0.7), completion_fn=fn2)
    sampled.answer_sync(["q", "q"], [DOCS, DOCS])
    assert len(fn2.prompts) == 2 and sampled.stats()["deduplicated"] == 0
    # a failed call is missing for every copy, never an answer
    bad = Echo(lambda p: litellm.AuthenticationError(message="bad key", llm_provider="openai", model="fake"))
    failing = Generator(GeneratorConfig(model="openai/fake", cache_path=None), completion_fn=bad)
    out = failing.answer_sync(["q", "q"], [DOCS, DOCS])
    assert [a.ok for a in out] == [False, False] and all(a.error_type == "AuthError" for a in out)
    assert failing.stats()["failed"] == 2 and not out[1].cached


def test_answer_sync_works_inside_a_running_loop() -> None:
    gen, _ = _gen()

    async def inside() -> list:
        return gen.answer_sync(["q"], None)

    assert asyncio.run(inside())[0].text == "2007"


def test_failed_call_is_missing_not_empty() -> None:
    import litellm

    fn = Echo(lambda p: litellm.AuthenticationError(message="bad key", llm_provider="openai", model="fake"))
    gen = Generator(GeneratorConfig(model="openai/fake", cache_path=None), completion_fn=fn)
    [a] = gen.answer_sync(["q"], None)
    assert a.text is None and not a.ok and a.error_type == "AuthError"


def test_fingerprint_has_model_prompt_and_decoding() -> None:
    gen = Generator(GeneratorConfig(model="local/qwen2.5-coder-0.5b-instruct", cache_path=None), completion_fn=Echo())
    fp = gen.fingerprint()
    assert fp["model"] == "local/qwen2.5-coder-0.5b-instruct" and len(fp["gguf_sha256"]) == 64
    assert fp["prompt_hash"] == gen.prompt_hash() and fp["decoding"] == {"temperature": 0.0, "max_tokens": 64}


def test_judge_prompt_is_figure_13_and_verdicts() -> None:
    replies = {"Paris is the capital.": "Yes.", "It is Marseille.": "No", "Hmm": "I cannot tell"}
    fn = Echo(lambda p: next(v for k, v in replies.items() if k in p))
    judge = Judge(JudgeConfig(model="openai/fake", cache_path=None), completion_fn=fn)
    got = judge.check(["Paris is the capital.", "It is Marseille.", "Hmm", None], [["Paris"], ["Paris"], ["x"], ["y"]])
    assert got == [True, False, None, None]  # unparseable and no-response are None (missing), never False
    assert len(fn.prompts) == 3  # nothing to judge for a missing response: no call
    assert fn.prompts[0] == (
        "Please check if any of the golden answers is contained in the following response: Paris is the capital.\n"
        "Golden answers: ['Paris']\n"
        "Please directly answer with 'yes' or 'no'."
    )
    assert asyncio.run(judge.acheck(["Paris is the capital."], [["Paris"]])) == [True]
    assert judge.check_sync == judge.check
    with pytest.raises(S3Error, match="must be a list of strings"):
        judge.check(["a"], ["Paris"])  # type: ignore[list-item]
    with pytest.raises(S3Error, match="1 responses but 2"):
        judge.check(["a"], [["a"], ["b"]])


@pytest.mark.parametrize(
    ("text", "verdict"),
    [("yes", True), ("No.", False), ("**Yes**", True), ('"no"', False), ("Yes, the response contains it.", True),
     ("The answer is: no", False), ("", None), ("unsure", None), ("yes and no", None), ("YES!", True)],
)
def test_parse_yes_no(text: str, verdict: bool | None) -> None:
    assert parse_yes_no(text) is verdict
