"""Answer metrics: hand-derived values, the s3 paper's own examples (Appendix A.4), missing values stay None."""

from __future__ import annotations

import doctest

import pytest

import eval.metrics as metrics
from eval.metrics import (
    JudgeLike,
    cover_em,
    exact_match,
    f1,
    genacc,
    judge_check,
    mean_scored,
    normalize_answer,
    span_check,
    span_tokens,
)


class ScriptedJudge:
    """A fake judge for unit tests: answers from a table keyed on the response, and records every call."""

    def __init__(self, verdicts: dict[str, bool | None]) -> None:
        self.verdicts = verdicts
        self.calls: list[tuple[list[str], list[list[str]]]] = []

    def check(self, responses: list[str], golden_answers: list[list[str]]) -> list[bool | None]:
        self.calls.append((list(responses), [list(g) for g in golden_answers]))
        return [self.verdicts[r] for r in responses]


def test_doctests() -> None:
    result = doctest.testmod(metrics)
    assert result.attempted >= 10 and result.failed == 0


def test_fake_judge_satisfies_protocol() -> None:
    assert isinstance(ScriptedJudge({}), JudgeLike)


# ------------------------------------------------------------------------------------------ normalisation


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  An   apple a day ", "apple day"),
        ("U.S.A.", "usa"),
        ("rock-'n'-roll", "rocknroll"),
        ("Theatre", "theatre"),  # 'the' only as a whole word
        ("", ""),
        ("Ångström – unit", "ångström – unit"),  # non-ASCII punctuation is not string.punctuation
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_span_tokens_simple_tokenizer_rules() -> None:
    assert span_tokens("Hello, world!") == ["hello", ",", "world", "!"]
    assert span_tokens("a\tb\nc") == ["a", "b", "c"]  # control characters separate, never tokens
    assert span_tokens("snake_case") == ["snake", "_", "case"]
    assert span_tokens("1,000") == ["1", ",", "000"]
    assert span_tokens("naïve") == ["nai\u0308ve"]  # NFD: the combining mark stays inside the word
    assert span_tokens("北京 大学") == ["北京", "大学"]
    assert span_tokens("a\u00a0b") == ["a", "b"]  # no-break space is a separator (Zs)
    assert span_tokens("") == []


# ------------------------------------------------------------------------------------------------- EM / F1


def test_exact_match_values() -> None:
    preds = ["The Beatles!", "Beatles band", "beatles", None]
    golds = [["Beatles"], ["Beatles"], ["Rolling Stones", "the beatles"], ["Beatles"]]
    assert exact_match(preds, golds) == [1.0, 0.0, 1.0, None]


def test_f1_hand_derived() -> None:
    # pred tokens [barack, hussein, obama], gold [barack, obama]: P=2/3, R=1 -> F1=0.8
    assert f1(["Barack Hussein Obama"], [["Barack Obama"]]) == [pytest.approx(0.8)]
    # best gold wins
    assert f1(["Paris"], [["London", "Paris, France"]]) == [pytest.approx(2 * 1 * 0.5 / 1.5)]
    # repeated tokens count by multiplicity: pred [new, new, york], gold [new, york] -> P=2/3, R=1
    assert f1(["new new york"], [["New York"]]) == [pytest.approx(0.8)]
    assert f1(["nothing in common"], [["Paris"]]) == [0.0]
    # a prediction that normalises to nothing scores 0 against a non-empty gold
    assert f1(["The."], [["Paris"]]) == [0.0]


def test_cover_em_is_character_substring() -> None:
    assert cover_em(["Obamacare was passed", "it was Paris."], [["Obama"], ["paris"]]) == [1.0, 1.0]
    assert span_check(["Obamacare was passed"], [["Obama"]]) == [0.0]  # ... while span_check needs whole tokens


# ------------------------------------------------------------------------------------------ span_check


def test_span_check_paper_success_case() -> None:
    pred = "The 44th President of the United States was Barack Obama."
    assert span_check([pred], [["Barack Obama"]]) == [1.0]


def test_span_check_paper_negation_failure_case() -> None:
    # Appendix A.4: "not true" vs gold "true" -- the span check (wrongly) succeeds; documented behaviour
    assert span_check(["That statement is not true."], [["true"]]) == [1.0]


def test_span_check_paper_paraphrase_and_format_cases_fail() -> None:
    assert span_check(["He led the civil rights movement in the 1960s."], [["Martin Luther King Jr."]]) == [0.0]
    assert span_check(["The answer is twenty-five."], [["25"]]) == [0.0]
    assert span_check(["The capital of France is Marseille."], [["Paris"]]) == [0.0]


def test_span_check_token_boundaries_and_order() -> None:
    assert span_check(["Obama Barack"], [["Barack Obama"]]) == [0.0]  # order matters
    assert span_check(["barack  obama"], [["BARACK OBAMA"]]) == [1.0]  # uncased, whitespace-insensitive
    assert span_check(["the 2nd of may"], [["2"]]) == [0.0]  # "2nd" is one token
    assert span_check(["costs 1,000 dollars"], [["1,000"]]) == [1.0]  # "," dropped by normalisation both sides
    assert span_check(["Zürich is large"], [["Zu\u0308rich"]]) == [1.0]  # composed vs decomposed: NFD both sides


def test_span_check_any_gold_and_empty_golds() -> None:
    assert span_check(["It is Lyon"], [["Paris", "Lyon"]]) == [1.0]
    # a gold answer that normalises to nothing must not match everything (pyserini's has_answers would)
    assert span_check(["anything at all"], [["The", "Paris"]]) == [0.0]
    assert span_check(["anything at all"], [["The"]]) == [None]
    assert span_check(["anything"], [[]]) == [None]


def test_golden_answers_as_plain_string() -> None:
    assert span_check(["Barack Obama"], ["Barack Obama"]) == [1.0]


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="2 predictions but 1"):
        exact_match(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="must be strings"):
        f1(["a"], [[1]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="prediction 0 must be a string"):
        span_check([3], [["a"]])  # type: ignore[list-item]


def test_missing_predictions_are_none_for_every_metric() -> None:
    judge = ScriptedJudge({})
    for fn in (exact_match, f1, cover_em, span_check):
        assert fn([None], [["x"]]) == [None]
    assert genacc([None], [["x"]], judge) == [None]
    assert judge_check([None], [["x"]], judge) == [None]
    assert judge.calls == []  # nothing to ask about


# --------------------------------------------------------------------------------------- judge and GenAcc


def test_genacc_paper_examples_with_fake_judge() -> None:
    preds = [
        "The 44th President of the United States was Barack Obama.",  # span success
        "That statement is not true.",  # span (wrongly) succeeds: judge not asked
        "The answer is twenty-five.",  # span fails, judge says yes
        "It weighs 3 kilograms.",  # span fails, judge says yes
        "The capital of France is Marseille.",  # span fails, judge says no
    ]
    golds = [["Barack Obama"], ["true"], ["25"], ["3 kg"], ["Paris"]]
    judge = ScriptedJudge(
        {"The answer is twenty-five.": True, "It weighs 3 kilograms.": True, "The capital of France is Marseille.": False}
    )
    assert genacc(preds, golds, judge) == [1.0, 1.0, 1.0, 1.0, 0.0]
    # one batched call, only about the span failures, with their gold lists
    assert judge.calls == [
        (
            ["The answer is twenty-five.", "It weighs 3 kilograms.", "The capital of France is Marseille."],
            [["25"], ["3 kg"], ["Paris"]],
        )
    ]


def test_genacc_without_judge_is_span_check() -> None:
    preds = ["Barack Obama", "twenty-five", None]
    golds = [["Barack Obama"], ["25"], ["x"]]
    assert genacc(preds, golds) == span_check(preds, golds) == [1.0, 0.0, None]


def test_judge_none_verdict_is_missing_not_wrong() -> None:
    judge = ScriptedJudge({"twenty-five": None, "Marseille": False})
    assert genacc(["twenty-five", "Marseille", "Paris"], [["25"], ["Paris"], ["Paris"]], judge) == [None, 0.0, 1.0]


def test_judge_only_mode_for_multiple_choice() -> None:
    # MIRAGE-style: gold ["A", "A. yes", "yes"]; a span check would accept "B. yes and no" via the token "yes"
    golds = [["A", "A. yes", "yes"], ["B", "B. no", "no"]]
    preds = ["B. yes and no", "The answer is B"]
    assert span_check(preds, golds) == [1.0, 1.0]
    judge = ScriptedJudge({"B. yes and no": False, "The answer is B": True})
    assert genacc(preds, golds, judge, judge_only=True) == [0.0, 1.0]
    assert len(judge.calls) == 1 and judge.calls[0][0] == preds


def test_judge_only_flags_per_item() -> None:
    judge = ScriptedJudge({"B. yes": False, "Marseille": False})
    out = genacc(["B. yes", "Paris", "Marseille"], [["A. yes", "yes"], ["Paris"], ["Paris"]], judge, judge_only=[True, False, False])
    assert out == [0.0, 1.0, 0.0]
    assert judge.calls == [(["B. yes", "Marseille"], [["A. yes", "yes"], ["Paris"]])]


def test_judge_only_needs_a_judge() -> None:
    with pytest.raises(ValueError, match="needs a judge"):
        genacc(["A"], [["A"]], judge_only=True)
    with pytest.raises(ValueError, match="1 flags for 2"):
        genacc(["A", "B"], [["A"], ["B"]], ScriptedJudge({}), judge_only=[True])


def test_misbehaving_judge_is_an_error() -> None:
    class Short:
        def check(self, responses: list[str], golden_answers: list[list[str]]) -> list[bool | None]:
            return []

    class Stringy:
        def check(self, responses: list[str], golden_answers: list[list[str]]) -> list[bool | None]:
            return ["yes"] * len(responses)  # type: ignore[list-item]

    with pytest.raises(ValueError, match="0 verdicts for 1"):
        genacc(["Marseille"], [["Paris"]], Short())
    with pytest.raises(ValueError, match="True, False or None"):
        judge_check(["Marseille"], [["Paris"]], Stringy())


def test_mean_scored_ignores_missing() -> None:
    assert mean_scored([None, None]) == (None, 0)
    assert mean_scored([1.0, 0.0, None]) == (0.5, 2)
