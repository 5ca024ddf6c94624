"""eval/accuracy.py: Acc(G(Q, D)) through a real Generator and Judge, each behind a loopback OpenAI-compatible server
(generator_adapters.testing.FakeLLMServer, through litellm): a failed generation is missing under every metric, the
judge is asked only about answers whose span check fails, and the builder makes a judge only where the metric uses one.
"""

from __future__ import annotations

import ast
import asyncio
import re
from collections.abc import Iterator

import pytest

from eval.accuracy import Accuracy, Metric
from eval.build import build_accuracy
from eval.config import EvalConfig
from generator_adapters import GeneratorConfig, JudgeConfig
from generator_adapters.testing import FakeLLMServer
from s3core.errors import S3Error
from s3core.types import Document

DOCS = [Document(id="d1", title="Paris", text="Paris is the capital of France.")]
# question -> what the generator answers; every gold answer is "25"
REPLIES = {"exact?": "25", "paraphrase?": "twenty-five", "wrong?": "Marseille"}
_RESPONSE = re.compile(r"following response: (.*)\nGolden answers:", re.S)


class JudgeServer(FakeLLMServer):
    """A judge that reads numbers spelled out and negations: "yes" when a golden answer is in the response
    ("twenty-five" counts as "25") and the response does not start with "not ", "maybe" (no verdict) for the response
    "unsure", else "no". It records every response it is asked about."""

    def __init__(self) -> None:
        super().__init__(reply=self._verdict)
        self.asked: list[str] = []

    def _verdict(self, prompt: str) -> str:
        m = _RESPONSE.search(prompt)
        assert m is not None, prompt
        response, golden = m.group(1), ast.literal_eval(prompt[m.end() :].splitlines()[0].strip())
        self.asked.append(response)
        if response == "unsure":
            return "maybe"
        found = any(g in response.replace("twenty-five", "25") for g in golden)
        return "yes" if found and not response.startswith("not ") else "no"


def _answer(prompt: str) -> str:
    question = next(line.removeprefix("Question: ") for line in prompt.splitlines() if line.startswith("Question: "))
    return REPLIES.get(question, question)


def _served(srv: FakeLLMServer) -> dict[str, object]:
    return {"model": "openai/fake", "api_base": srv.api_base, "cache_path": None, "max_retries": 0, "timeout_s": 5.0}


@pytest.fixture(scope="module")
def generator_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(reply=_answer) as srv:
        yield srv


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    with JudgeServer() as srv:
        yield srv


def _accuracy(gen: FakeLLMServer, judge: JudgeServer, metric: Metric, use_judge: bool = True) -> Accuracy:
    return build_accuracy(GeneratorConfig.model_validate(_served(gen)), JudgeConfig.model_validate(_served(judge)),
                          EvalConfig(metric=metric, use_judge=use_judge))


@pytest.mark.parametrize("metric", ["genacc", "span", "em", "judge"])
def test_a_failed_generation_is_missing_whatever_the_metric(metric: Metric, judge_server: JudgeServer) -> None:
    questions = [f"question {i}?" for i in range(12)]
    with FakeLLMServer(failure_rate=0.5, failure_kind="500", reply=_answer) as failing:
        accuracy = _accuracy(failing, judge_server, metric)
        failed = {i for i, q in enumerate(questions) if failing.fails(accuracy.generator.prompt(q, DOCS))}  # type: ignore[union-attr]
        assert 0 < len(failed) < len(questions)
        # the generator echoes the question, which is also the gold answer: every answer that came back is right
        acc = asyncio.run(accuracy(questions, [DOCS] * len(questions), [[q] for q in questions]))
        accuracy.close()
    assert [i for i, a in enumerate(acc) if a is None] == sorted(failed)  # missing, never 0
    assert all(a == 1.0 for i, a in enumerate(acc) if i not in failed)
    if metric == "judge":  # judge-only: every answer that came back was judged, no failed one
        assert len(judge_server.asked) == len(questions) - len(failed)
    else:  # every span check passed: the judge had nothing to decide
        assert judge_server.asked == []


def test_the_judge_is_asked_only_when_the_span_check_fails(generator_server: FakeLLMServer, judge_server: JudgeServer) -> None:
    questions = list(REPLIES)
    golden = [["25"]] * len(questions)
    accuracy = _accuracy(generator_server, judge_server, "genacc")
    assert asyncio.run(accuracy(questions, [DOCS] * 3, golden)) == [1.0, 1.0, 0.0]
    assert judge_server.asked == ["twenty-five", "Marseille"]  # "25" passed the span check: not judged
    scores = asyncio.run(accuracy.score(["25", "twenty-five", "unsure", None], [*golden, ["25"]]))
    assert [s.genacc for s in scores] == [1.0, 1.0, None, None]
    assert [s.judge for s in scores] == [None, 1.0, None, None]
    assert scores[2].error == "judge: no verdict (call failed)" and scores[2].span == 0.0  # measured, GenAcc missing
    assert scores[3].error == "generator: no answer"
    # a multiple-choice item is judge-only: a span match is not enough
    judge_server.asked.clear()
    plain, mc = asyncio.run(accuracy.score(["not 25", "not 25"], [["25"], ["25"]], multiple_choice=[False, True]))
    assert judge_server.asked == ["not 25"] and plain.genacc == 1.0 and mc.genacc == 0.0
    accuracy.close()
    # without the judge (span, em; or genacc with eval.use_judge = false) the same answers are scored without a call
    judge_server.asked.clear()
    for metric, use_judge, want in [("span", True, [1.0, 0.0, 0.0]), ("em", True, [1.0, 0.0, 0.0]),
                                    ("genacc", False, [1.0, 0.0, 0.0])]:
        plain = _accuracy(generator_server, judge_server, metric, use_judge)  # type: ignore[arg-type]
        assert plain.judge is None
        assert asyncio.run(plain(questions, [DOCS] * 3, golden)) == want
        plain.close()
    assert judge_server.asked == []


def test_builder_makes_a_judge_only_where_the_metric_uses_one() -> None:
    base = "http://127.0.0.1:9/v1"  # a server of one's own: no key needed (a provider's own endpoint needs one)
    gen = GeneratorConfig(model="openai/fake", api_base=base, cache_path=None)
    judge = JudgeConfig(model="openai/fake", api_base=base, cache_path=None)
    made = {
        (metric, use_judge, only): build_accuracy(gen, judge, EvalConfig(metric=metric, use_judge=use_judge), judge_only=only)
        for metric in ("genacc", "span", "em", "judge") for use_judge in (True, False) for only in (True, False)
    }
    for (metric, use_judge, only), acc in made.items():
        assert (acc.judge is not None) == (only or metric == "judge" or (metric == "genacc" and use_judge))
        assert acc.judge_only == (only or metric == "judge")
        acc.close()
    scorer_only = build_accuracy(None, judge, EvalConfig())
    assert scorer_only.generator is None and scorer_only.cache_stats() == {}
    with pytest.raises(S3Error, match="no generator"):
        asyncio.run(scorer_only.answer(["q?"], None))


def test_training_uses_the_same_accuracy() -> None:
    from s3.config import load_config
    from training.prep.data import make_accuracy

    cfg = load_config(None, ["generator.model=openai/fake", "generator.api_base=http://127.0.0.1:9/v1",
                             "generator.cache_path=null", "eval.metric=em"])
    acc = make_accuracy(cfg)
    assert isinstance(acc, Accuracy) and acc.metric == "em" and acc.judge is None
    assert acc.generator is not None and acc.generator.cfg.model == "openai/fake"
    acc.close()
