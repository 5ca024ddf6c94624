"""Acc(G(Q, D)): the frozen generator G answers a question Q from documents D, and its answer is scored.

One implementation wherever the s3 paper's Acc appears: every row of an evaluation run (GenAcc, span, EM, F1), the
naive-RAG baseline Acc(G(Q, D_RAG)) that `s3 prepare-training` caches, and the training rewards that compare the
searcher's documents with it (GBR = Acc(G(Q, D_s3)) - Acc(G(Q, D_RAG))). `eval.build.build_accuracy` makes one from
the [generator], [judge] and [eval] sections:

    accuracy = build_accuracy(cfg.generator_resolved, cfg.judge_resolved, cfg.eval)
    await accuracy(questions, documents, golden)  # -> [1.0, 0.0, None, ...] under eval.metric

- `answer`: G(Q, D) for a batch (concurrent, cached by the generator); `documents=None` = the no-context prompt.
- `score`: span check, EM, F1 and GenAcc = span check OR judge. The judge is asked, in one batched call, only about
  the answers whose span check failed; judge-only items (eval.metric = "judge", a multiple-choice set, or a question
  flagged multiple-choice) skip the span check. `Scores.acc(metric)` is the value eval.metric names.
- calling it: both, reduced to the configured metric.

A failed generator call is None (missing) whatever the metric, never 0; so is a failed judge call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from eval import metrics
from generator_adapters.client import Answer, LLMClient
from generator_adapters.generator import Generator
from generator_adapters.judge import Judge
from s3core.errors import ConfigError, S3Error
from s3core.types import Document

Metric = Literal["genacc", "span", "em", "judge"]
METRIC_KEYS = ("genacc", "span", "em", "f1")


@dataclass
class Prediction:
    """One answer from the frozen generator (or an end-to-end agent). `text is None` with `error` = failed.

    An end-to-end agent that ran fine but wrote no `<answer>` gave a *wrong* answer, not a missing one: its text is
    "" (scored 0, like upstream Search-R1) and `note` says why."""

    text: str | None
    error: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    note: str | None = None

    @classmethod
    def from_answer(cls, answer: Answer) -> Prediction:
        """The generator's Answer: a failed call keeps its error and has no text."""
        return cls(
            text=None if answer.error is not None else answer.text,
            error=answer.error,
            latency_s=answer.latency_s,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            cost_usd=answer.cost_usd or 0.0,
            cached=answer.cached,
        )


@dataclass
class Scores:
    """The metrics of one answer. `genacc is None` with `error` set = missing: the judge failed, there was no answer,
    or no gold answer survives normalisation. `judge` is the judge's verdict where it was asked."""

    genacc: float | None
    span: float | None
    em: float | None
    f1: float | None
    judge: float | None = None
    error: str | None = None

    def acc(self, metric: Metric) -> float | None:
        """The value eval.metric names: span, EM, or GenAcc (judge-only GenAcc for "judge")."""
        if metric == "span":
            return self.span
        if metric == "em":
            return self.em
        return self.genacc


# generator calls and failures, then the spend of the generator and the judge together (LLMClient.usage(): paid
# answers, their tokens and dollars, answers of unknown price, cache hits and the dollars they saved)
USAGE_KEYS = ("generator_calls", "generator_failures", "paid_calls", "prompt_tokens", "completion_tokens", "cost_usd",
              "unknown_cost_calls", "cache_hits", "saved_usd")


class Accuracy:
    """Acc(G(Q, D)) with one frozen generator, a judge where the metric uses one, and the configured metric.

    `generator=None` scores answers made elsewhere (the Search-R1 agent answers itself): only `score` is used.
    `judge_only` scores every item by the judge alone (multiple-choice sets); eval.metric = "judge" implies it."""

    def __init__(
        self, generator: Generator | None, judge: Judge | None = None, metric: Metric = "genacc", *, judge_only: bool = False
    ) -> None:
        self.generator = generator
        self.judge = judge
        self.metric = metric
        self.judge_only = judge_only or metric == "judge"
        self._usage: dict[str, float] = dict.fromkeys(("generator_calls", "generator_failures"), 0.0)

    async def __call__(
        self, questions: Sequence[str], documents: Sequence[Sequence[Document]], golden: Sequence[Sequence[str]]
    ) -> list[float | None]:
        """Acc(G(Q, D)) per question under the configured metric; None where the generator or the judge failed."""
        predictions = await self.answer(questions, documents)
        scores = await self.score([p.text for p in predictions], golden)
        return [s.acc(self.metric) for s in scores]

    async def answer(self, questions: Sequence[str], documents: Sequence[Sequence[Document]] | None) -> list[Prediction]:
        """G(Q, D), one Prediction per question in order; `documents=None` asks without retrieval."""
        if self.generator is None:
            raise S3Error("this Accuracy has no generator: it only scores answers given to it")
        preds = [Prediction.from_answer(a) for a in await self.generator.answer(questions, documents)]
        u = self._usage
        u["generator_calls"] += len(preds)
        u["generator_failures"] += sum(p.error is not None for p in preds)
        return preds

    def clients(self) -> dict[str, LLMClient]:
        """The LLM clients this Accuracy calls, by config section (for prices and budgets)."""
        return {name: llm.client for name, llm in (("generator", self.generator), ("judge", self.judge))
                if llm is not None}

    def project(
        self, questions: Sequence[str], documents: Sequence[Sequence[Document]] | None,
        golden: Sequence[Sequence[str]], *, answers: bool = True,
    ) -> list[float]:
        """The most the paid calls of Acc(G(Q, D)) can cost, per question, in dollars: the generator's prompt measured
        (nothing when its answer is cached), its completion at max_tokens, and a judge call on an answer of that
        length (the span check may spare it; a bound does not count on that). `answers=False`: the answers come from
        elsewhere (an agent answers itself), only the judge is projected. A model of unknown price projects as
        infinity: a budget never lets it run (budgeted runs refuse it at the start)."""
        out: list[float] = []
        gen, judge = self.generator, self.judge
        answer_len = gen.cfg.max_tokens if gen is not None else 64
        placeholder = " ".join(["x"] * answer_len)
        for i, q in enumerate(questions):
            usd = 0.0
            if answers and gen is not None:
                docs = None if documents is None else list(documents[i])
                g = gen.client.project([gen.messages(q, docs)])
                usd += float("inf") if g is None else g
            if judge is not None and golden[i]:
                j = judge.client.project([[{"role": "user", "content": judge.prompt(placeholder, golden[i])}]],
                                         skip_cached=False)
                usd += float("inf") if j is None else j
            out.append(usd)
        return out

    def usage(self) -> dict[str, float]:
        """Generator calls and failures, and the spend of the generator and the judge together (USAGE_KEYS), so far
        (summed across workers by the Ray backend)."""
        from generator_adapters.budget import add_usage

        spend = add_usage(*(c.usage() for c in self.clients().values()))
        return {**self._usage, **spend}

    async def score(
        self,
        answers: Sequence[str | None],
        golden: Sequence[Sequence[str]],
        multiple_choice: Sequence[bool] | None = None,
    ) -> list[Scores]:
        """The metrics of each answer (None = a failed generation: every metric missing). `multiple_choice[i]` makes
        item i judge-only. The judge is a blocking call that may drive its own event loop: it runs in a thread."""
        flags = [False] * len(answers) if multiple_choice is None else list(multiple_choice)
        judge_only = [self.judge_only or mc for mc in flags]
        return await asyncio.to_thread(self._score, list(answers), [list(g) for g in golden], judge_only)

    def _score(self, answers: list[str | None], golden: list[list[str]], judge_only: list[bool]) -> list[Scores]:
        if self.judge is None and any(judge_only):
            raise ConfigError("judge-only scoring (multiple-choice questions) needs a judge: set eval.use_judge = true")
        span = metrics.span_check(answers, golden)
        em = metrics.exact_match(answers, golden)
        f1 = metrics.f1(answers, golden)
        genacc = metrics.genacc(answers, golden, self.judge, judge_only=judge_only)
        out = []
        for i, answer in enumerate(answers):
            asked = self.judge is not None and answer is not None and (judge_only[i] or span[i] == 0.0)
            error = None
            if answer is None:
                error = "generator: no answer"
            elif genacc[i] is None:
                error = "judge: no verdict (call failed)" if asked and span[i] is not None else "unscorable: no usable gold answer"
            out.append(Scores(genacc=genacc[i], span=span[i], em=em[i], f1=f1[i], judge=genacc[i] if asked else None,
                              error=error))
        return out

    def cache_stats(self) -> dict[str, int]:
        """The generator's response-cache counts so far (hits, misses, writes); {} without a generator or a cache."""
        raw = self.generator.cache_stats() if self.generator is not None else {}
        return {k: v for k, v in raw.items() if k in ("hits", "misses", "writes") and isinstance(v, int)}

    def close(self) -> None:
        """Close the generator's and the judge's clients."""
        for llm in (self.generator, self.judge):
            if llm is not None:
                llm.close()
