"""Rewards: plain batch functions returning `list[float | None]`.

`None` means "could not be scored" (a generator or judge call failed, a baseline is missing): that sample leaves
the update. It is never turned into 0.

- `gbr` — Gain Beyond RAG (s3 paper §3.2): Acc(G(Q, D_s3)) - Acc(G(Q, D_RAG)), the second term from the cached
  baseline (training/prep/data.py).
- `acc_plus_gbr` — what the s3 authors' released code optimises: Acc(G(Q, D_s3)) + GBR (denser: a question naive
  RAG already answers still pays for keeping it answered).
- `exact_match_reward` — Search-R1: exact match of the policy's own answer.
- `r1_searcher_stage1`, `r1_searcher_stage2` — R1-Searcher (§2.2.1): retrieval (0.5 if n >= 1) + format (0.5);
  then answer F1 + format penalty (0 / -2).
- `confidence_gated` — Search Wisely's beta-GRPO: 1 only when the answer is correct AND the minimum token
  probability over search-query tokens exceeds beta.
- `retrieval_gain` — a retrieval-level gain beyond naive RAG, no generator call (DeepRetrieval / StepSearch-style
  dense reward; issue 45 step 3): +1 for each gold supporting paragraph the searcher added that naive RAG's top-k
  (the begin-with-search turn) lacked, -1 for each gold paragraph of that top-k it dropped, -retrieval_cost for each
  non-gold paragraph it added. Needs the questions' supporting ids (HotpotQA, MuSiQue, 2Wiki carry them).
- `turn_credits` — not a reward of its own but credit for each reply of an s3 rollout (training.update.turn_credit;
  issue 60 build step 4): the gold paragraphs each reply's selection newly admitted, minus retrieval_cost per other
  paragraph; training/learn/advantages.py `turn_advantages` turns them into per-reply advantages added to the
  outcome's, so a selection (and the query whose window it reads) is told apart from the rest of the trajectory.
- `penalize_invalid` — an optional format term on top of any of them (`training.invalid_penalty`, off by default as
  in the s3 paper): minus penalty x the fraction of the rollout's turns whose action was invalid. Without it an
  invalid turn costs nothing, and a small policy can drift into replies that only select (no query, no stop) while
  every rollout keeps its reward: docs/transfer.md shows the 135M searcher doing exactly that.
  training/learn/advantages.py `grpo_advantages` keeps it from outweighing the task reward under GRPO's std
  normalisation (training.format_advantage = 'centred': a group whose task rewards are all equal no longer gets
  full-size advantages from it) and counts those format-only groups.

Every reward is one entry of `REGISTRY` (a `RewardSpec`, at the end of this module): its name, how `RewardScorer`
scores a batch with it, whether it calls the frozen generator (and judge) in s3 mode, whether it reads the cached
naive-RAG baseline, the modes it applies to and a one-line description. The rest of s3 asks the registry
(`reward_spec`), never the reward's name: training.reward is checked against it (training/config.py), the run's
spend follows `calls_generator` (training/rollouts/budget.py) and the data preparation computes the baseline where
`reads_baseline` (training/prep/data.py). A new reward is a batch function here and one entry of the table.

`RewardScorer` turns SearchResults into these rewards, calling the frozen generator (and judge, via the metric)
batched and concurrently through the generator layer. Where a rollout's documents are naive RAG's top-k exactly (same
ids, same order: an additive searcher that added nothing, or a selection that kept D0 as it came), the generator would
see naive RAG's prompt: Acc(G(Q, D_s3)) is the cached baseline Acc(G(Q, D_RAG)) and no call is made (GBR = 0 by
definition); `RewardBatch.reused_baseline` and `RewardScorer.counts()` count those rollouts (reward/reused_baseline).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from s3core.types import Document, QAExample, SearchResult, Trajectory

__all__ = [
    "NO_GENERATOR_REWARDS",
    "REGISTRY",
    "REWARDS",
    "RewardBatch",
    "RewardScorer",
    "RewardSpec",
    "acc_plus_gbr",
    "confidence_gated",
    "exact_match_reward",
    "format_ok",
    "format_terms",
    "gbr",
    "invalid_fraction",
    "penalize_invalid",
    "query_token_logprobs",
    "r1_searcher_stage1",
    "r1_searcher_stage2",
    "retrieval_gain",
    "reward_names",
    "reward_spec",
    "top_k_of",
    "turn_credits",
]


def _check_lengths(name: str, *columns: Sequence[Any]) -> None:
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise ValueError(f"{name}: columns have different lengths {[len(c) for c in columns]}")


def gbr(acc_s3: Sequence[float | None], acc_rag: Sequence[float | None]) -> list[float | None]:
    """Gain Beyond RAG: Acc(G(Q, D_s3)) - Acc(G(Q, D_RAG)); None when either term is missing.

    >>> gbr([1.0, 0.0, 1.0, None], [0.0, 0.0, 1.0, 0.0])
    [1.0, 0.0, 0.0, None]
    """
    _check_lengths("gbr", acc_s3, acc_rag)
    return [None if a is None or b is None else float(a) - float(b) for a, b in zip(acc_s3, acc_rag, strict=True)]


def acc_plus_gbr(acc_s3: Sequence[float | None], acc_rag: Sequence[float | None]) -> list[float | None]:
    """The s3 authors' released-code reward: Acc(G(Q, D_s3)) + GBR = 2 Acc(s3) - Acc(RAG).

    >>> acc_plus_gbr([1.0, 0.0, 1.0, None], [0.0, 1.0, 1.0, 0.0])
    [2.0, -1.0, 1.0, None]
    """
    return [None if a is None or g is None else float(a) + g for a, g in zip(acc_s3, gbr(acc_s3, acc_rag), strict=True)]


def exact_match_reward(
    answers: Sequence[str | None], golden_answers: Sequence[Sequence[str]], em: Callable[[str, Sequence[str]], float]
) -> list[float | None]:
    """Search-R1's reward: exact match of the policy's own answer. A missing answer (no <answer> tag) scores 0:
    that is the policy's failure, not a failed call.

    >>> eq = lambda p, gs: float(any(p.strip().lower() == g.lower() for g in gs))
    >>> exact_match_reward(["Paris", "lyon", None], [["paris"], ["Paris"], ["Rome"]], eq)
    [1.0, 0.0, 0.0]
    """
    _check_lengths("exact_match_reward", answers, golden_answers)
    return [0.0 if a is None else float(em(a, g)) for a, g in zip(answers, golden_answers, strict=True)]


def r1_searcher_stage1(n_searches: Sequence[int], format_correct: Sequence[bool]) -> list[float | None]:
    """R1-Searcher stage 1: R_retrieval (0.5 if the policy searched at least once) + R_format (0.5 if correct).

    >>> r1_searcher_stage1([0, 1, 3, 0], [True, True, False, False])
    [0.5, 1.0, 0.5, 0.0]
    """
    _check_lengths("r1_searcher_stage1", n_searches, format_correct)
    return [(0.5 if n >= 1 else 0.0) + (0.5 if ok else 0.0) for n, ok in zip(n_searches, format_correct, strict=True)]


def r1_searcher_stage2(f1: Sequence[float | None], format_correct: Sequence[bool]) -> list[float | None]:
    """R1-Searcher stage 2: answer F1 + R'_format (0 if the format is correct, -2 if not). None F1 stays None.

    >>> r1_searcher_stage2([0.5, 1.0, 0.0, None], [True, False, True, True])
    [0.5, -1.0, 0.0, None]
    """
    _check_lengths("r1_searcher_stage2", f1, format_correct)
    return [None if f is None else float(f) + (0.0 if ok else -2.0) for f, ok in zip(f1, format_correct, strict=True)]


def confidence_gated(
    correct: Sequence[float | None], min_query_prob: Sequence[float | None], beta: float = 0.4
) -> list[float | None]:
    """Search Wisely's beta-GRPO reward (Eq. 1): 1 if the answer is correct and C(T) > beta, else 0.

    C(T) is the minimum probability over all search-query tokens of the trajectory (Eq. 2); a trajectory with no
    search call has no confidence to check (`None` in `min_query_prob`) and is gated on correctness alone.
    A missing correctness (failed call) stays None.

    >>> confidence_gated([1.0, 1.0, 0.0, 1.0, None], [0.9, 0.3, 0.9, None, 0.9], beta=0.4)
    [1.0, 0.0, 0.0, 1.0, None]
    """
    _check_lengths("confidence_gated", correct, min_query_prob)
    out: list[float | None] = []
    for c, p in zip(correct, min_query_prob, strict=True):
        if c is None:
            out.append(None)
        else:
            out.append(1.0 if c >= 1.0 and (p is None or p > beta) else 0.0)
    return out


def query_token_logprobs(
    trajectory: Trajectory, decode: Callable[[list[int]], str], open_tag: str, close_tag: str
) -> list[float]:
    """Sampling log-probabilities of the policy tokens inside `open_tag ... close_tag` spans (tags included, as in
    Search Wisely). Token boundaries come from decoding growing prefixes, so multi-token tags are found exactly.
    """
    ids, mask, lps = trajectory.response_ids, trajectory.mask, trajectory.logprobs
    # character end offset of every response token
    ends: list[int] = []
    text = ""
    for i in range(len(ids)):
        text = decode(ids[: i + 1])
        ends.append(len(text))
    spans: list[tuple[int, int]] = []
    start = text.find(open_tag)
    while start >= 0:
        stop = text.find(close_tag, start + len(open_tag))
        end = len(text) if stop < 0 else stop + len(close_tag)
        spans.append((start, end))
        start = text.find(open_tag, end)
    out: list[float] = []
    prev_end = 0
    for i, end in enumerate(ends):
        tok_start, tok_end = prev_end, end
        prev_end = end
        if mask[i] != 1 or tok_end <= tok_start:
            continue
        if any(tok_start < s_end and tok_end > s_start for s_start, s_end in spans):
            out.append(lps[i])
    return out


def min_query_prob(logprobs: Sequence[float]) -> float | None:
    """C(T) = min over query tokens of P(w); None when the trajectory has no query token.

    >>> round(min_query_prob([math.log(0.9), math.log(0.5)]), 6)
    0.5
    >>> min_query_prob([]) is None
    True
    """
    return math.exp(min(logprobs)) if logprobs else None


def retrieval_gain(found: Sequence[Sequence[str]], top_k: Sequence[Sequence[str] | None],
                   gold: Sequence[Sequence[str]], cost: float = 0.25) -> list[float | None]:
    """Retrieval-level gain beyond naive RAG, no generator call: +1 for each gold supporting paragraph among the
    searcher's documents (`found`) that naive RAG's top-k lacked, -1 for each gold paragraph of the top-k the searcher
    dropped (0 for a searcher that only adds), -`cost` for each non-gold paragraph it added. None where a question has
    no supporting ids or a rollout no top-k (it cannot be scored; never 0).

    >>> retrieval_gain([["a", "g1", "x"], ["a", "b"], ["b"], ["g1"], ["a"]],
    ...                [["a", "b"], ["a", "b"], ["g1", "b"], None, ["a"]],
    ...                [["g1", "g2"], ["g1"], ["g1"], ["g1"], []])
    [0.75, 0.0, -1.0, None, None]
    """
    _check_lengths("retrieval_gain", found, top_k, gold)
    out: list[float | None] = []
    for f, t, g in zip(found, top_k, gold, strict=True):
        terms = _gain_terms(f, t, g)
        out.append(None if terms is None else terms[0] - terms[1] - cost * terms[2])
    return out


def _gain_terms(found: Sequence[str], top_k: Sequence[str] | None, gold: Sequence[str]) -> tuple[float, float, float] | None:
    """One rollout's retrieval_gain terms: (gold paragraphs added beyond the top-k, gold paragraphs of the top-k
    dropped, other paragraphs added); None where it cannot be scored (no top-k, no supporting ids)."""
    if top_k is None or not gold:
        return None
    fs, ts, gs = set(found), set(top_k), set(gold)
    added = fs - ts
    return float(len(added & gs)), float(len((ts - fs) & gs)), float(len(added - gs))


def added_counts(found: Sequence[Sequence[str]], top_k: Sequence[Sequence[str] | None],
                 gold: Sequence[Sequence[str]]) -> tuple[list[float | None], list[float | None]]:
    """retrieval_gain's two counts per rollout: gold paragraphs among `found` that naive RAG's top-k lacked, and the
    other paragraphs added (None where retrieval_gain is None).

    >>> added_counts([["a", "g1", "x"], ["a", "b"], ["g1"]], [["a", "b"], ["a", "b"], None], [["g1", "g2"], ["g1"], ["g1"]])
    ([1.0, 0.0, None], [1.0, 0.0, None])
    """
    _check_lengths("added_counts", found, top_k, gold)
    terms = [_gain_terms(f, t, g) for f, t, g in zip(found, top_k, gold, strict=True)]
    return [None if x is None else x[0] for x in terms], [None if x is None else x[2] for x in terms]


def turn_credits(result: SearchResult, gold: Sequence[str], cost: float = 0.25) -> list[float] | None:
    """Credit for each reply of one s3 rollout, in order (reply k is the policy's k-th write, recorded in
    `result.steps[k]`: its selection over the window it was shown, then its next query or stop). Reply k earns +1 for
    each gold paragraph its selection admits first (in the final documents, not in naive RAG's top-k, the reference
    of `retrieval_gain`, and not admitted by an earlier reply) and -`cost` for each other paragraph it admits first.
    Their sum is `retrieval_gain` for a searcher that drops nothing of the top-k (searcher.additive); a selection the
    context cap turned away earns nothing. None where it cannot be scored (no top-k, no supporting ids).

    >>> from s3core.types import Document, SearchStep
    >>> steps = [SearchStep(turn=0, retrieved_ids=["a", "b"], selected_ids=["a"]),
    ...          SearchStep(turn=1, query="q1", retrieved_ids=["g1", "x"], selected_ids=["g1", "x"]),
    ...          SearchStep(turn=2, query="q2", retrieved_ids=["g1", "y"], selected_ids=["g1", "y"])]
    >>> docs = [Document(id=i, contents="") for i in ("a", "b", "g1", "x")]  # the cap kept y out
    >>> r = SearchResult(question="q", documents=docs, steps=steps)
    >>> turn_credits(r, ["g1", "b"])  # reply 1: g1 (+1) and x (-0.25); reply 2: g1 again, y not admitted
    [0.0, 0.75, 0.0]
    >>> retrieval_gain([[d.id for d in docs]], [["a", "b"]], [["g1", "b"]])
    [0.75]
    >>> turn_credits(r, []) is None
    True
    """
    top = top_k_of(result)
    if top is None or not gold:
        return None
    final, gs = {d.id for d in result.documents}, set(gold)
    seen = set(top)
    out = []
    for step in result.steps:
        new = [i for i in dict.fromkeys(step.selected_ids) if i in final and i not in seen]
        seen.update(new)
        out.append(float(sum(1.0 if i in gs else -cost for i in new)))
    return out


def top_k_of(result: SearchResult) -> list[str] | None:
    """Naive RAG's top-k for a rollout: what its begin-with-search turn (turn 0: the question itself, k0 = the naive-RAG
    k) retrieved; None without that turn."""
    return list(result.steps[0].retrieved_ids) if result.steps and result.steps[0].turn == 0 else None


def format_ok(result: SearchResult, needs_answer: bool) -> bool:
    """A trajectory's format is correct when no turn had an invalid action (and, end to end, it answered)."""
    if any(s.invalid_reason for s in result.steps):
        return False
    return not (needs_answer and result.answer is None)


def invalid_fraction(result: SearchResult) -> float:
    """The fraction of a rollout's turns (each one policy reply, turn 0 included) whose action was invalid."""
    steps = result.steps
    return sum(1 for s in steps if s.invalid_reason) / len(steps) if steps else 0.0


def penalize_invalid(rewards: Sequence[float | None], fractions: Sequence[float], penalty: float) -> list[float | None]:
    """reward - penalty x invalid fraction; a missing reward stays missing.

    >>> penalize_invalid([2.0, 1.0, None, 0.0], [0.0, 0.5, 1.0, 1.0], 0.5)
    [2.0, 0.75, None, -0.5]
    """
    _check_lengths("penalize_invalid", rewards, fractions)
    return [None if r is None else float(r) - penalty * f for r, f in zip(rewards, fractions, strict=True)]


def format_terms(results: Sequence[SearchResult], penalty: float) -> list[float]:
    """Each rollout's format term as `penalize_invalid` adds it to the reward: minus penalty x its invalid-turn
    fraction (0.0 for every rollout when the penalty is 0)."""
    return [-penalty * invalid_fraction(x) if penalty else 0.0 for x in results]


@dataclass
class RewardBatch:
    """Rewards for one batch plus the per-sample terms they came from (for logging)."""

    rewards: list[float | None]
    acc_s3: list[float | None] | None = None
    acc_rag: list[float | None] | None = None
    generator_failures: int = 0
    reused_baseline: int = 0  # rollouts whose Acc(G(Q, D_s3)) is the cached naive-RAG one: D_s3 = top-k, no call
    # retrieval_gain's terms, per rollout (None where it could not be scored): gold paragraphs added beyond naive
    # RAG's top-k and other paragraphs added. What the searcher found, whatever the cost the reward weighs it at.
    gold_added: list[float | None] | None = None
    other_added: list[float | None] | None = None
    # training.update.turn_credit: each rollout's `turn_credits` (one per reply; None where it could not be scored)
    turn_credits: list[list[float] | None] | None = None


# Acc(G(Q, D)) of a batch: (questions, documents per question, golden answers) -> one value per question, None on a
# failed generator / judge call. eval.accuracy.Accuracy (training.data.make_accuracy) is the one the trainer uses.
AccuracyFn = Callable[[list[str], list[list[Document]], list[list[str]]], Awaitable[list[float | None]]]


class RewardScorer:
    """Scores SearchResults with the configured reward (its `REGISTRY` entry's `score`).

    `accuracy` is an async batch function `(questions, documents_per_question, golden) -> list[float | None]`
    that calls the frozen generator (batched, concurrent) and applies the metric (span / GenAcc with the judge);
    `baseline` maps question id -> cached Acc(G(Q, D_RAG)). `em` and `f1` are the eval-layer metrics for answers.
    A reward's scoring function reads these, and the scorer's `baseline_for` / `acc_s3` / `correct`.
    """

    def __init__(
        self,
        reward: str,
        *,
        accuracy: AccuracyFn | None = None,
        baseline: dict[str, float] | None = None,
        em: Callable[[str, Sequence[str]], float] | None = None,
        f1: Callable[[str, Sequence[str]], float] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        query_tags: tuple[str, str] = ("<query>", "</query>"),
        beta: float = 0.4,
        end_to_end: bool = False,
        invalid_penalty: float = 0.0,
        retrieval_cost: float = 0.25,
        turn_credit: bool = False,
    ) -> None:
        self.spec = reward_spec(reward)  # an unknown name is a ValueError naming the registry's
        self.reward = reward
        self.accuracy = accuracy
        self.baseline = baseline or {}
        self.em = em
        self.f1 = f1
        self.decode = decode
        self.query_tags = query_tags
        self.beta = beta
        self.end_to_end = end_to_end
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty must be >= 0, got {invalid_penalty}")
        self.invalid_penalty = invalid_penalty
        if retrieval_cost < 0:
            raise ValueError(f"retrieval_cost must be >= 0, got {retrieval_cost}")
        self.retrieval_cost = retrieval_cost
        self.turn_credit = turn_credit  # also score each reply (`turn_credits`, RewardBatch.turn_credits)
        self.reused_baseline = 0  # rollouts scored from the cached baseline so far (`counts`)

    def counts(self) -> dict[str, float]:
        """What the scorer has spared so far: `reused_baseline` = rollouts whose documents were naive RAG's top-k,
        scored from the cached baseline without a generator call."""
        return {"reused_baseline": float(self.reused_baseline)}

    def baseline_for(self, examples: Sequence[QAExample]) -> list[float | None]:
        """The cached Acc(G(Q, D_RAG)) of each question: for a reward whose entry says `baseline` (the preparation
        computes it only then); a question without one is an error, never a silent 0."""
        from s3core.errors import S3Error

        if not self.spec.baseline:
            raise ValueError(f"reward {self.reward!r} reads the naive-RAG baseline: its REGISTRY entry must say "
                             "baseline=True (the training data's preparation computes it only then)")
        missing = [e.id for e in examples if e.id not in self.baseline]
        if missing:
            raise S3Error(
                f"no cached naive-RAG baseline for {len(missing)} training question(s) (e.g. {missing[0]!r}); "
                "run `s3 prepare-training` with the same generator, prompt, retriever and k"
            )
        return [self.baseline[e.id] for e in examples]

    async def correct(self, results: Sequence[SearchResult], examples: Sequence[QAExample]) -> list[float | None]:
        """Correctness of the final answer: the policy's own (end to end, EM) or the generator's on D_s3."""
        if self.end_to_end:
            if self.em is None:
                raise ValueError("end-to-end rewards need an exact-match function")
            return exact_match_reward([r.answer for r in results], [e.golden_answers for e in examples], self.em)
        return (await self.acc_s3(results, examples))[0]

    def _reusable(self, result: SearchResult, example: QAExample) -> bool:
        """Whether the rollout's documents are naive RAG's top-k as it came (ids and order) and that question's
        baseline is cached: the generator's prompt would be the baseline's, so its Acc is the baseline's."""
        top = top_k_of(result)
        return top is not None and example.id in self.baseline and [d.id for d in result.documents] == top

    async def acc_s3(self, results: Sequence[SearchResult], examples: Sequence[QAExample]) -> tuple[list[float | None], int]:
        """(Acc(G(Q, D_s3)) per rollout, how many came from the cached baseline without a call)."""
        if self.accuracy is None:
            raise ValueError(f"reward {self.reward!r} needs the generator (an accuracy function)")
        acc: list[float | None] = [None] * len(results)
        todo: list[int] = []
        for i, (r, e) in enumerate(zip(results, examples, strict=True)):
            if self._reusable(r, e):
                acc[i] = self.baseline[e.id]
            else:
                todo.append(i)
        if todo:
            called = await self.accuracy([examples[i].question for i in todo], [list(results[i].documents) for i in todo],
                                         [examples[i].golden_answers for i in todo])
            for i, a in zip(todo, called, strict=True):
                acc[i] = a
        reused = len(results) - len(todo)
        self.reused_baseline += reused
        return acc, reused

    async def score(self, results: Sequence[SearchResult], examples: Sequence[QAExample]) -> RewardBatch:
        """The configured reward, minus `invalid_penalty` x each rollout's invalid-turn fraction when that is set; with
        `turn_credit`, each reply's credit as well (no generator call)."""
        _check_lengths("RewardScorer.score", results, examples)
        if not self.end_to_end and "s3" not in self.spec.modes:
            raise ValueError(f"reward {self.reward!r} scores the policy's own answer: use it in search_r1 mode")
        batch = await self.spec.score(self, results, examples)
        if self.invalid_penalty:
            batch.rewards = penalize_invalid(batch.rewards, [invalid_fraction(x) for x in results], self.invalid_penalty)
        if self.turn_credit:
            batch.turn_credits = [turn_credits(x, e.supporting_ids, self.retrieval_cost)
                                  for x, e in zip(results, examples, strict=True)]
        return batch


# ------------------------------------------------------------------------------------------------ the registry
# How RewardScorer scores a batch with one reward: (the scorer, its settings and generator; the rollouts; their
# questions) -> the batch's rewards and the terms they came from.
ScoreFn = Callable[[RewardScorer, Sequence[SearchResult], Sequence[QAExample]], Awaitable[RewardBatch]]
Mode = Literal["s3", "search_r1"]  # training.mode


async def _score_gbr_like(s: RewardScorer, results: Sequence[SearchResult], examples: Sequence[QAExample],
                          combine: Callable[[Sequence[float | None], Sequence[float | None]], list[float | None]],
                          ) -> RewardBatch:
    rag = s.baseline_for(examples)  # a missing baseline is an error, checked before any call
    acc, reused = await s.acc_s3(results, examples)
    return RewardBatch(combine(acc, rag), acc_s3=acc, acc_rag=rag, generator_failures=sum(a is None for a in acc),
                       reused_baseline=reused)


async def _score_gbr(s: RewardScorer, results: Sequence[SearchResult], examples: Sequence[QAExample]) -> RewardBatch:
    return await _score_gbr_like(s, results, examples, gbr)


async def _score_acc_plus_gbr(s: RewardScorer, results: Sequence[SearchResult],
                              examples: Sequence[QAExample]) -> RewardBatch:
    return await _score_gbr_like(s, results, examples, acc_plus_gbr)


async def _score_em(s: RewardScorer, results: Sequence[SearchResult], examples: Sequence[QAExample]) -> RewardBatch:
    if s.em is None:
        raise ValueError("reward 'em' needs an exact-match function")
    return RewardBatch(exact_match_reward([x.answer for x in results], [e.golden_answers for e in examples], s.em))


async def _score_r1_stage1(s: RewardScorer, results: Sequence[SearchResult],
                           examples: Sequence[QAExample]) -> RewardBatch:
    fmt = [format_ok(x, needs_answer=s.end_to_end) for x in results]
    return RewardBatch(r1_searcher_stage1([x.turns for x in results], fmt))


async def _score_r1_stage2(s: RewardScorer, results: Sequence[SearchResult],
                           examples: Sequence[QAExample]) -> RewardBatch:
    fmt = [format_ok(x, needs_answer=s.end_to_end) for x in results]
    if s.end_to_end:
        if s.f1 is None:
            raise ValueError("reward 'r1_searcher_stage2' needs an F1 function")
        f1s: list[float | None] = [
            0.0 if x.answer is None else float(s.f1(x.answer, e.golden_answers))
            for x, e in zip(results, examples, strict=True)
        ]
        return RewardBatch(r1_searcher_stage2(f1s, fmt))
    acc, reused = await s.acc_s3(results, examples)  # s3 mode: the generator's answer, via `accuracy`
    return RewardBatch(r1_searcher_stage2(acc, fmt), acc_s3=acc, generator_failures=sum(a is None for a in acc),
                       reused_baseline=reused)


async def _score_confidence_gated(s: RewardScorer, results: Sequence[SearchResult],
                                  examples: Sequence[QAExample]) -> RewardBatch:
    if s.decode is None:
        raise ValueError("reward 'confidence_gated' needs the policy tokenizer's decode")
    correct = await s.correct(results, examples)
    conf: list[float | None] = []
    for x in results:
        if x.trajectory is None:
            raise ValueError("confidence_gated needs token trajectories (a trainable policy)")
        conf.append(min_query_prob(query_token_logprobs(x.trajectory, s.decode, *s.query_tags)))
    return RewardBatch(confidence_gated(correct, conf, s.beta), acc_s3=None if s.end_to_end else correct)


async def _score_retrieval_gain(s: RewardScorer, results: Sequence[SearchResult],
                                examples: Sequence[QAExample]) -> RewardBatch:
    from s3core.errors import S3Error

    top = [top_k_of(x) for x in results]
    if all(t is None for t in top):
        raise S3Error("reward 'retrieval_gain' compares with naive RAG's top-k, the begin-with-search turn: set "
                      "searcher.begin_with_search = true")
    if not any(e.supporting_ids for e in examples):
        raise S3Error("reward 'retrieval_gain' needs the questions' gold supporting paragraphs "
                      "(metadata.supporting_ids); none of this batch's questions has them")
    found = [[d.id for d in x.documents] for x in results]
    gold = [e.supporting_ids for e in examples]
    golds, others = added_counts(found, top, gold)
    return RewardBatch(retrieval_gain(found, top, gold, s.retrieval_cost), gold_added=golds, other_added=others)


@dataclass(frozen=True)
class RewardSpec:
    """One reward, everything the rest of s3 asks about it: a new reward is one `REGISTRY` entry (and its batch
    function above). Search_r1 mode never calls the generator: the policy answers itself."""

    name: str  # training.reward
    description: str  # one line: the configuration reference lists it (training/config.py)
    score: ScoreFn  # how RewardScorer scores a batch with it
    generator: bool  # in s3 mode it calls the frozen generator (and the judge): an Accuracy is built, the calls priced
    baseline: bool = False  # it reads the cached naive-RAG Acc(G(Q, D_RAG)) (s3 mode): the data preparation computes it
    # the training.mode values it scores in (search_r1: the policy's own answer). The configuration refuses search_r1
    # mode for an entry without it; an s3 configuration may name a search_r1-only reward (em: data prepared without a
    # baseline), and the scorer refuses to score it there.
    modes: tuple[Mode, ...] = ("s3", "search_r1")
    query_logprobs: bool = False  # it reads the policy's log-probs of its query tokens (token trajectories needed)

    def calls_generator(self, mode: str) -> bool:
        """Whether scoring it in `mode` calls the frozen generator (and the judge): paid, priced, budgeted."""
        return mode == "s3" and self.generator

    def reads_baseline(self, mode: str) -> bool:
        """Whether training in `mode` reads the cached naive-RAG baseline (the preparation computes it then)."""
        return mode == "s3" and self.baseline


# THE table of rewards, in the order the configuration reference lists them. Tests add a toy entry with
# `monkeypatch.setitem(REGISTRY, name, spec)`; everything that asks about a reward reads this dict when it asks.
REGISTRY: dict[str, RewardSpec] = {s.name: s for s in (
    RewardSpec("gbr", "Gain Beyond RAG (s3 paper): Acc(G(Q, D_s3)) - Acc(G(Q, D_RAG)).", _score_gbr,
               generator=True, baseline=True, modes=("s3",)),
    RewardSpec("acc_plus_gbr", "Acc(G(Q, D_s3)) + GBR, the s3 authors' released code (denser).", _score_acc_plus_gbr,
               generator=True, baseline=True, modes=("s3",)),
    RewardSpec("em", "Search-R1: exact match of the policy's own answer (search_r1 mode).", _score_em,
               generator=False, modes=("search_r1",)),
    RewardSpec("r1_searcher_stage1", "R1-Searcher stage 1: 0.5 for searching at least once + 0.5 for the format; "
               "no generator call.", _score_r1_stage1, generator=False),
    RewardSpec("r1_searcher_stage2", "R1-Searcher stage 2: answer F1 (s3 mode: the generator's Acc) + a format "
               "penalty (0 / -2).", _score_r1_stage2, generator=True),
    RewardSpec("confidence_gated", "Search Wisely's beta-GRPO: 1 when the answer is correct and every query token's "
               "probability exceeds confidence_beta.", _score_confidence_gated, generator=True, query_logprobs=True),
    RewardSpec("retrieval_gain", "a retrieval-level gain beyond naive RAG with no generator call (+1 per gold "
               "supporting paragraph added that naive RAG's top-k lacked, -1 per gold paragraph of the top-k dropped, "
               "-retrieval_cost per non-gold paragraph added); needs supporting ids and searcher.begin_with_search.",
               _score_retrieval_gain, generator=False, modes=("s3",)),
)}


def reward_names() -> tuple[str, ...]:
    """The registry's reward names, as it is now."""
    return tuple(REGISTRY)


def reward_spec(name: str) -> RewardSpec:
    """The registry's entry for `name`; an unknown name is a ValueError that lists the known ones."""
    spec = REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"unknown reward {name!r}; choose one of {', '.join(REGISTRY)}")
    return spec


# views of the registry as it is at import, for code that names them
REWARDS = reward_names()
# rewards that never call the frozen generator or the judge in s3 mode (no Accuracy is built, nothing is priced)
NO_GENERATOR_REWARDS = tuple(s.name for s in REGISTRY.values() if "s3" in s.modes and not s.generator)
