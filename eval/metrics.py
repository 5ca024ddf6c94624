"""Answer metrics as plain batch functions: `(predictions, golden_answers) -> list[float | None]`.

Every metric takes a batch of predictions (a failed generation is `None`) and, for each, the list of gold
answers. It returns one value per prediction: 1.0 / 0.0 (or a fraction for F1), or `None` when the item could not
be scored — a missing prediction, or no usable gold answer. `None` is *missing*, never a silent 0.

- `normalize_answer`: SQuAD normalisation (lower-case, drop ASCII punctuation, drop articles a/an/the, squeeze
  whitespace) — the one the s3, Search-R1 and FlashRAG code use.
- `exact_match`: normalised prediction equals a normalised gold answer.
- `f1`: SQuAD token F1 against the best gold answer.
- `cover_em`: a normalised gold answer is a (character) substring of the normalised prediction.
- `span_check`: a normalised gold answer is a *token span* of the normalised prediction, with the semantics of
  DPR / pyserini `has_answers` applied to normalised strings (what the s3 code does): NFD Unicode normalisation,
  the DrQA "simple" tokenizer (runs of letters / digits / combining marks; every other visible character is a
  token of its own), uncased comparison.
- `judge_check`: ask a judge (anything with `check(responses, golden_answers) -> list[bool | None]`, e.g. the
  s3 judge prompt through `generator_adapters.Judge`).
- `genacc`: the s3 paper's Generation Accuracy = span_check OR judge_check; the judge is only asked about the
  items whose span check failed, in one batched call. A judge-only mode serves multiple-choice sets (MIRAGE),
  where a span check would accept wrong options.

One deliberate difference from pyserini: a gold answer that normalises to nothing (e.g. "The", "?") is skipped.
pyserini's `has_answers` treats an empty token list as a span of every text, so such a gold answer would make every
prediction correct. When *no* gold answer survives normalisation the item is `None` (cannot be scored).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

__all__ = [
    "METRICS",
    "JudgeLike",
    "cover_em",
    "exact_match",
    "f1",
    "genacc",
    "judge_check",
    "mean_scored",
    "normalize_answer",
    "span_check",
    "span_tokens",
]

Prediction = str | None
Golds = Sequence[str] | str


@runtime_checkable
class JudgeLike(Protocol):
    """What `genacc` / `judge_check` need from a judge: one batched call, one verdict per response.

    A verdict of `None` means the judge could not decide (its call failed): the metric is then missing.
    """

    def check(self, responses: list[str], golden_answers: list[list[str]]) -> list[bool | None]: ...


# --------------------------------------------------------------------------------------------- normalisation

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD answer normalisation: lower-case, remove punctuation, remove articles, fix whitespace.

    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    >>> normalize_answer("A.B.C. and an apple")
    'abc and apple'
    """
    s = s.lower()
    s = s.translate(_PUNCT_TABLE)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


# ------------------------------------------------------------------------------------- the span tokenizer
#
# The DrQA / DPR "SimpleTokenizer": a token is either a maximal run of letters, digits and combining marks
# (Unicode categories L*, N*, M*), or one single character that is neither a separator (Z*) nor a control /
# format / unassigned / private-use character (C*). Everything else (spaces, tabs, newlines) separates tokens.
# Written here as a category scanner with an ASCII fast path, not as the original regular expression.

_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")  # ASCII alnum runs | one visible ASCII non-alnum


def _is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNM"


def _is_other_token_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] not in "ZC"


def span_tokens(text: str) -> list[str]:
    """Tokens of `text` for the span check: NFD-normalised, simple-tokenized, lower-cased.

    >>> span_tokens("Barack Obama's 2nd term")
    ['barack', 'obama', "'", 's', '2nd', 'term']
    >>> span_tokens("Zürich–Genève")  # NFD keeps the combining marks inside the word
    ['zu\u0308rich', '–', 'gene\u0300ve']
    """
    text = unicodedata.normalize("NFD", text)
    if text.isascii():
        return [t.lower() for t in _ASCII_TOKEN.findall(text)]
    tokens: list[str] = []
    # Python's whitespace characters are all separators (Z*) or controls (C*), so splitting on them first is
    # safe; most chunks are then plain ASCII and take the fast path.
    for chunk in text.split():
        if chunk.isascii():
            tokens.extend(t.lower() for t in _ASCII_TOKEN.findall(chunk))
            continue
        i, n = 0, len(chunk)
        while i < n:
            ch = chunk[i]
            if _is_word_char(ch):
                j = i + 1
                while j < n and _is_word_char(chunk[j]):
                    j += 1
                tokens.append(chunk[i:j].lower())
                i = j
            else:
                if _is_other_token_char(ch):
                    tokens.append(ch.lower())
                i += 1
    return tokens


_SEP = "\x00"  # a control character: never part of a token, so it cannot fake a token boundary


def _token_key(tokens: Sequence[str]) -> str:
    return _SEP + _SEP.join(tokens) + _SEP


# ---------------------------------------------------------------------------------------------- plumbing


def _as_gold_lists(golden_answers: Sequence[Golds], n: int) -> list[list[str]]:
    if len(golden_answers) != n:
        raise ValueError(f"got {n} predictions but {len(golden_answers)} golden-answer lists")
    out: list[list[str]] = []
    for i, g in enumerate(golden_answers):
        if isinstance(g, str):
            out.append([g])
        elif isinstance(g, Sequence):
            bad = [a for a in g if not isinstance(a, str)]
            if bad:
                raise ValueError(f"golden answers of item {i} must be strings, got {bad[0]!r}")
            out.append(list(g))
        else:
            raise ValueError(f"golden answers of item {i} must be a list of strings, got {type(g).__name__}")
    return out


def _check_predictions(predictions: Sequence[Prediction]) -> None:
    for i, p in enumerate(predictions):
        if p is not None and not isinstance(p, str):
            raise ValueError(f"prediction {i} must be a string or None, got {type(p).__name__}")


def _batch(
    predictions: Sequence[Prediction],
    golden_answers: Sequence[Golds],
    score: Callable[[str, list[str]], float | None],
) -> list[float | None]:
    _check_predictions(predictions)
    golds = _as_gold_lists(golden_answers, len(predictions))
    return [None if p is None else score(p, g) for p, g in zip(predictions, golds, strict=True)]


def _normalised_golds(golds: list[str]) -> list[str]:
    return [g for g in (normalize_answer(a) for a in golds) if g]


# ---------------------------------------------------------------------------------------------- metrics


def _em_one(pred: str, golds: list[str]) -> float | None:
    ng = _normalised_golds(golds)
    if not ng:
        return None
    return 1.0 if normalize_answer(pred) in ng else 0.0


def exact_match(predictions: Sequence[Prediction], golden_answers: Sequence[Golds]) -> list[float | None]:
    """1.0 when the normalised prediction equals a normalised gold answer.

    >>> exact_match(["The Beatles", "the rolling stones.", None], [["Beatles"], ["Beatles"], ["x"]])
    [1.0, 0.0, None]
    """
    return _batch(predictions, golden_answers, _em_one)


def _f1_pair(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _f1_one(pred: str, golds: list[str]) -> float | None:
    ng = _normalised_golds(golds)
    if not ng:
        return None
    pt = normalize_answer(pred).split()
    return max(_f1_pair(pt, g.split()) for g in ng)


def f1(predictions: Sequence[Prediction], golden_answers: Sequence[Golds]) -> list[float | None]:
    """SQuAD token F1 of the normalised prediction against its best gold answer.

    >>> f1(["Barack Obama", "president Obama", "Paris"], [["Barack Obama"], ["Barack Obama"], ["Lyon"]])
    [1.0, 0.5, 0.0]
    """
    return _batch(predictions, golden_answers, _f1_one)


def _cover_one(pred: str, golds: list[str]) -> float | None:
    ng = _normalised_golds(golds)
    if not ng:
        return None
    np_ = normalize_answer(pred)
    return 1.0 if any(g in np_ for g in ng) else 0.0


def cover_em(predictions: Sequence[Prediction], golden_answers: Sequence[Golds]) -> list[float | None]:
    """1.0 when a normalised gold answer is a substring of the normalised prediction (characters, not tokens).

    >>> cover_em(["It was Barack Obama.", "Obamacare"], [["barack obama"], ["Obama"]])
    [1.0, 1.0]
    """
    return _batch(predictions, golden_answers, _cover_one)


def _span_one(pred: str, golds: list[str]) -> float | None:
    gold_keys = [_token_key(t) for t in (span_tokens(normalize_answer(a)) for a in golds) if t]
    if not gold_keys:
        return None
    pred_key = _token_key(span_tokens(normalize_answer(pred)))
    return 1.0 if any(k in pred_key for k in gold_keys) else 0.0


def span_check(predictions: Sequence[Prediction], golden_answers: Sequence[Golds]) -> list[float | None]:
    """1.0 when a normalised gold answer is a token span of the normalised prediction (pyserini `has_answers`).

    >>> span_check(["The 44th President of the United States was Barack Obama.", "Obamacare"],
    ...            [["Barack Obama"], ["Obama"]])
    [1.0, 0.0]
    """
    return _batch(predictions, golden_answers, _span_one)


def _ask_judge(judge: JudgeLike, responses: list[str], golds: list[list[str]]) -> list[bool | None]:
    if not responses:
        return []
    verdicts = list(judge.check(responses, golds))
    if len(verdicts) != len(responses):
        raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(responses)} responses")
    for v in verdicts:
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"judge verdicts must be True, False or None, got {v!r}")
    return verdicts


def judge_check(
    predictions: Sequence[Prediction], golden_answers: Sequence[Golds], judge: JudgeLike
) -> list[float | None]:
    """Ask the judge about every scorable prediction (one batched call); a `None` verdict stays `None`.

    >>> class Yes:
    ...     def check(self, responses, golden_answers):
    ...         return [True] * len(responses)
    >>> judge_check(["twenty-five", None], [["25"], ["x"]], Yes())
    [1.0, None]
    """
    _check_predictions(predictions)
    golds = _as_gold_lists(golden_answers, len(predictions))
    todo = [i for i, (p, g) in enumerate(zip(predictions, golds, strict=True)) if p is not None and g]
    verdicts = _ask_judge(judge, [predictions[i] or "" for i in todo], [golds[i] for i in todo])
    out: list[float | None] = [None] * len(predictions)
    for i, v in zip(todo, verdicts, strict=True):
        out[i] = None if v is None else float(v)
    return out


def genacc(
    predictions: Sequence[Prediction],
    golden_answers: Sequence[Golds],
    judge: JudgeLike | None = None,
    *,
    judge_only: bool | Sequence[bool] = False,
) -> list[float | None]:
    """Generation Accuracy (s3 paper, Eq. 3): span_check OR judge_check.

    The judge is asked, in one batched call, only about items whose span check failed. With `judge=None` GenAcc is
    the span check alone (a lower bound). `judge_only=True` (or a per-item list of flags, e.g. from
    `metadata["multiple_choice"]`) skips the span check for those items and asks the judge directly — the s3 paper's
    rule for MIRAGE; those items need a judge. A `None` prediction or a `None` verdict gives `None` (missing).

    >>> class FakeJudge:
    ...     def check(self, responses, golden_answers):
    ...         return ["twenty-five" in r for r in responses]
    >>> genacc(["Barack Obama.", "The answer is twenty-five.", "Marseille", None],
    ...        [["Barack Obama"], ["25"], ["Paris"], ["x"]], FakeJudge())
    [1.0, 1.0, 0.0, None]
    """
    _check_predictions(predictions)
    n = len(predictions)
    golds = _as_gold_lists(golden_answers, n)
    if isinstance(judge_only, bool):
        only = [judge_only] * n
    else:
        only = [bool(x) for x in judge_only]
        if len(only) != n:
            raise ValueError(f"judge_only has {len(only)} flags for {n} predictions")
    if judge is None and any(only):
        raise ValueError("judge-only scoring (multiple-choice items) needs a judge; pass judge=...")

    out: list[float | None] = [None] * n
    ask: list[int] = []
    for i, (p, g) in enumerate(zip(predictions, golds, strict=True)):
        if p is None:
            continue
        if only[i]:
            if g:
                ask.append(i)
            continue
        s = _span_one(p, g)
        out[i] = s
        if s == 0.0 and judge is not None:
            ask.append(i)
    if judge is not None and ask:
        verdicts = _ask_judge(judge, [predictions[i] or "" for i in ask], [golds[i] for i in ask])
        for i, v in zip(ask, verdicts, strict=True):
            out[i] = None if v is None else float(v)
    return out


def mean_scored(values: Sequence[float | None]) -> tuple[float | None, int]:
    """Mean over scored items only, and how many were scored; `(None, 0)` when nothing was scored.

    >>> mean_scored([1.0, None, 0.0, 1.0])
    (0.6666666666666666, 3)
    """
    scored = [v for v in values if v is not None]
    if not scored:
        return None, 0
    return sum(scored) / len(scored), len(scored)


METRICS: dict[str, Callable[[Sequence[Prediction], Sequence[Golds]], list[float | None]]] = {
    "em": exact_match,
    "f1": f1,
    "cover_em": cover_em,
    "span": span_check,
}
"""The judge-free metrics by name (GenAcc and judge_check also need a judge)."""
