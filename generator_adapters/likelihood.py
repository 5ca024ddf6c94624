"""How much a document helps the frozen generator: the gain in log p(gold answer) when the document is added to a
context, scored by the generator itself with teacher forcing (REPLUG-LSR's and FILCO's signal, with the generator's
own prompt).

    lik = AnswerLikelihood(GeneratorConfig(model="local/qwen2.5-coder-1.5b-instruct"))
    credit = lik.credit("Who directed Kiss and Tell?", start_docs, candidates, ["Richard Wallace"])
    credit.base, credit.gains      # log p(answer | start), and per candidate log p(answer | start + it) - base

Every prompt is the generator's (`Generator.messages`: its answer template, its context rendering, the document
appended last, as a searcher's added page is). For an offline model (`local/<name>`) the answer's log-probability is
read from llama.cpp with the start's prompt prefix computed once a question (s3runtime/llm_score.py); a question of
~13 candidates costs the prefix once plus each candidate's own tokens. A served or API model is refused here, naming
what can be done instead: training.reading.credit = 'genacc' (training/reading/trainer.py), the gain in the accuracy
of the generator's own answers, works with any generator. (Prompt log-probabilities from servers that return them,
e.g. vLLM's, are not read yet.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from generator_adapters.config import GeneratorConfig
from generator_adapters.generator import Generator
from s3core.errors import ConfigError
from s3core.types import Document

__all__ = ["AnswerLikelihood", "Credit", "supports_logprobs"]


@dataclass(frozen=True)
class Credit:
    """One question's credit: log p(answer | start) (`base`), each candidate's gain over it (`gains`, in candidate
    order), the answer's token count and the tokens the model ran for it (its cost)."""

    base: float
    gains: list[float]
    answer_tokens: int
    computed_tokens: int
    prompt_tokens: int


def supports_logprobs(model: str) -> bool:
    """Whether the answer log-probability can be read for `model` here: offline models through llama.cpp."""
    return model.startswith("local/")


class AnswerLikelihood:
    """The frozen generator of `cfg`, scoring answers instead of sampling them."""

    def __init__(self, cfg: GeneratorConfig, *, threads: int | None = None) -> None:
        if not supports_logprobs(cfg.model):
            raise ConfigError(
                f"generator.model = {cfg.model!r}: answer log-probabilities are read from offline models "
                "('local/<name>', llama.cpp) only, so far; use training.reading.credit = 'genacc' (the gain in the "
                "accuracy of its own answers: any generator), the offline generator closest to yours, or "
                "training.reading.credit = 'gold' where the data labels gold paragraphs")
        from s3runtime.llm_score import LocalScorer

        self.cfg = cfg
        self.generator = Generator(cfg)
        self.scorer = LocalScorer(cfg.model.removeprefix("local/"), threads=threads)

    def close(self) -> None:
        self.scorer.close()

    def credit(self, question: str, start: Sequence[Document], candidates: Sequence[Document],
               answers: Sequence[str]) -> Credit:
        """The start alone, then the start plus each candidate (appended last), scored on the first gold answer."""
        if not answers or not answers[0].strip():
            raise ConfigError(f"question {question[:60]!r} has no gold answer to score")
        answer = answers[0].strip()
        chats = [self.generator.messages(question, list(start))]
        chats += [self.generator.messages(question, [*start, c]) for c in candidates]
        scores = self.scorer.score(chats, answer)
        base = scores[0].logprob
        return Credit(base=base, gains=[s.logprob - base for s in scores[1:]], answer_tokens=scores[0].tokens,
                      computed_tokens=sum(s.computed_tokens for s in scores),
                      prompt_tokens=sum(s.prompt_tokens + s.tokens for s in scores))
