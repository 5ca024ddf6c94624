"""Search behaviour metrics (eval/behavior.py), the ratio bootstrap, collapse detection (training/run/collapse.py), hops,
and the Search-R1 step extraction / agreement (eval/oversearch.py): hand-derived answers on scripted trajectories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eval.analysis import hop_table, hops_of
from eval.behavior import Trace, bridge_query, question_behavior, rollout_row, summarize, training_row
from eval.oversearch import R1Step, agreement, extract_steps
from eval.stats import ratio_ci
from s3core.types import Document, SearchResult, SearchStep
from training.run.collapse import CollapseWatch, detect_collapse


def row(steps: list[dict], docs: list[tuple[str, int]], question: str = "Where was the director of Jaws born?") -> dict:
    return {"id": "q1", "question": question, "turns": max(s["turn"] for s in steps),
            "documents": [{"id": i, "turn": t} for i, t in docs], "steps": steps}


# turn 0 keeps g1; turn 1 adds g2 (support complete); turn 2 searches again (redundant) and stops
THREE_TURNS = row(
    [{"turn": 0, "query": "Where was the director of Jaws born?", "retrieved_ids": ["g1", "x1", "x2"], "selected_ids": ["g1"]},
     {"turn": 1, "query": "Steven Spielberg birthplace", "retrieved_ids": ["g2", "x3"], "selected_ids": ["g2", "x3"]},
     {"turn": 2, "query": "Jaws director", "retrieved_ids": ["x4"], "selected_ids": ["x4"], "search_complete": True}],
    [("g1", 0), ("g2", 1), ("x3", 1), ("x4", 2)],
)


def test_redundant_turn_marginal_recall_selection() -> None:
    b = question_behavior(Trace.from_row(THREE_TURNS), {"g1", "g2"}, max_turns=3)
    assert b.recall_after == [0.5, 1.0, 1.0]
    assert (b.search_turns, b.redundant, b.redundant_support, b.redundant_answer) == (2, 1, 1, 0)
    assert b.stopped and not b.stop_missing_support and b.premature is None
    assert (b.selected, b.selected_gold, b.shown_gold) == (4, 2, 2)
    # "Steven Spielberg birthplace": no word of it in the question; "Jaws director": both words are
    assert b.overlaps == [0.0, 1.0]


def test_redundant_by_the_generator_answer_and_premature_stop_by_probe() -> None:
    r = row([{"turn": 0, "query": "q", "retrieved_ids": ["x1"], "selected_ids": ["x1"]},
             {"turn": 1, "query": "next", "retrieved_ids": ["x2"], "selected_ids": [], "search_complete": True}],
            [("x1", 0)])
    tr = Trace.from_row(r)
    # the generator was already right from D after turn 0: turn 1 was redundant though support was missing
    b = question_behavior(tr, {"g1"}, 3, genacc_after=[1.0, 1.0], probe_ids=["g1", "x9"])
    assert (b.redundant, b.redundant_support, b.redundant_answer) == (1, 0, 1)
    assert b.stopped and b.stop_missing_support and b.premature is True
    assert question_behavior(tr, {"g1"}, 3, probe_ids=["x9"]).premature is False
    # a stop at the budget is no stop decision
    assert not question_behavior(tr, {"g1"}, 1).stopped


def test_summary_rates_and_per_turn() -> None:
    a = question_behavior(Trace.from_row(THREE_TURNS), {"g1", "g2"}, 3)
    b = question_behavior(Trace.from_row(row([{"turn": 0, "query": "q", "retrieved_ids": ["g1"], "selected_ids": ["g1"],
                                                "search_complete": True}], [("g1", 0)])), {"g1"}, 3)
    s = summarize([a, b], 3, n_resamples=200)
    assert s["redundant_turn_rate"]["mean"] == pytest.approx(1 / 2)  # 1 of 2 search turns (b has none)
    assert s["queries_per_question"]["mean"] == pytest.approx(1.0)
    assert s["selection_precision"]["mean"] == pytest.approx(3 / 5)
    assert s["selection_recall"]["mean"] == pytest.approx(1.0)
    assert s["stop_rate"]["mean"] == pytest.approx(1.0)
    t = {r["turn"]: r for r in s["per_turn"]}
    assert t[0]["recall_after"] == pytest.approx(0.75) and t[1]["marginal_recall"] == pytest.approx(0.5)
    assert t[1]["recall_after"] == pytest.approx(1.0) and t[2]["marginal_recall"] == pytest.approx(0.0)
    assert t[1]["questions"] == 1 and t[3]["marginal_recall"] is None
    tr = training_row([a, b], 3)
    assert tr["search/redundant_turn_rate"] == pytest.approx(0.5) and math.isnan(tr["search/premature_stop_rate"])
    assert tr["search/marginal_recall_t1"] == pytest.approx(0.5)


def test_rollout_row_probes_only_stops_with_support_missing() -> None:
    docs = [Document(id="x1", title="Jaws (film)", text="t")]
    res = SearchResult(question="Where was the director of Jaws born?", documents=docs,
                       steps=[SearchStep(turn=0, query="Where was the director of Jaws born?", retrieved_ids=["x1"],
                                         selected_ids=["x1"], search_complete=True)])
    asked: list[list[str]] = []

    def probe(qs: list[str]) -> list[list[str]]:
        asked.append(qs)
        return [["g1"] for _ in qs]

    out = rollout_row([res, res], [["g1"], ["x1"]], 3, probe=probe)
    assert asked == [[bridge_query(res.question, ["Jaws (film)"])]]  # the second question has its support
    assert out["search/premature_stop_rate"] == pytest.approx(0.5)
    assert out["search/stop_missing_support_rate"] == pytest.approx(0.5)


def test_ratio_ci_resamples_questions() -> None:
    r = ratio_ci([1, 0, 2, 0], [2, 1, 2, 0], n_resamples=500)
    assert r["mean"] == pytest.approx(0.6)
    assert 0.0 <= r["ci95"][0] <= 0.6 <= r["ci95"][1] <= 1.0
    assert ratio_ci([0, 0], [0, 0])["mean"] is None
    with pytest.raises(ValueError):
        ratio_ci([1], [1, 2])


def test_collapse_detection() -> None:
    flat = [{"step": s, "search/queries_per_question": 1.5, "search/invalid_action_rate": 0.1} for s in range(1, 30)]
    assert detect_collapse(flat) == []
    stop = [{**r, "search/queries_per_question": 1.5 if r["step"] < 17 else 0.0} for r in flat]
    (c,) = detect_collapse(stop)
    assert (c.kind, c.step) == ("stopped_searching", 17) and "step 17" in c.message()
    climb = [{**r, "search/invalid_action_rate": 0.1 if r["step"] < 12 else 0.8} for r in flat]
    assert [(c.kind, c.step) for c in detect_collapse(climb)] == [("invalid_climb", 12)]
    recovered = stop + [{"step": s, "search/queries_per_question": 1.5, "search/invalid_action_rate": 0.1}
                        for s in range(30, 40)]
    assert detect_collapse(recovered) == []  # it must stay collapsed to the last step
    watch = CollapseWatch()
    said = [m for r in stop for m in watch.update(r)]
    assert len(said) == 1 and "stopped searching" in said[0]


def test_hops_and_hop_table() -> None:
    assert hops_of("2hop__1_2", "musique") == 2 and hops_of("4hop3__x", "musique_dev200") == 4
    assert hops_of("2hop__1_2", "hotpotqa") is None and hops_of("q7", "bamboogle") == 2
    t = hop_table([(1, 2, 1.0), (2, 2, 0.0), (3, 2, 0.0), (3, 2, None)])
    assert t["less"] == {"correct": 25.0, "incorrect": 0.0, "sum": 25.0}
    assert t["more"]["sum"] == 50.0 and t["more"]["incorrect"] == 25.0


R1_ROW = {"id": "r1", "question": "Who directed Jaws?", "steps": [
    {"turn": 0, "query": None, "retrieved_ids": [], "policy_text": "<think>I need it</think><search>Jaws director</search>"},
    {"turn": 1, "query": "Jaws director", "retrieved_ids": ["d1", "d2"], "policy_text": "<think>hmm</think> nothing"},
    {"turn": 2, "query": None, "retrieved_ids": [], "policy_text": "<think>ok</think><answer>Spielberg</answer>"},
]}


def test_search_r1_steps_and_agreement(tmp_path: Path) -> None:
    steps = extract_steps(R1_ROW)
    assert [s.kind for s in steps] == ["search", "none", "answer"]
    assert steps[0].query == "Jaws director" and steps[0].context_ids == ["d1", "d2"] and steps[0].think == "I need it"
    assert steps[2].answer == "Spielberg" and all(s.searches_in_question == 1 for s in steps)
    steps[0].over_search, steps[2].correct = True, 0.0
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"key": "r1#0", "label": True}) + "\n" + json.dumps({"key": "r1#2", "label": True}) + "\n")
    a = agreement(steps, labels)
    assert a["n"] == 2 and a["agreement"] == 0.5 and a["by_kind"]["search"]["agreement"] == 1.0
    labels.write_text('{"key": "nope#0", "label": true}\n')
    with pytest.raises(Exception, match="not a step of this run"):
        agreement(steps, labels)
    with pytest.raises(Exception, match="policy_text"):
        extract_steps({"id": "r", "steps": [{"turn": 0, "query": None}]})
    assert isinstance(steps[0], R1Step) and steps[0].key == "r1#0"


def test_search_r1_analysis_with_scripted_answers(tmp_path: Path) -> None:
    """The over-/under-search bookkeeping with a scripted policy and judge (the real ones: benchmarks/analysis.py)."""
    from eval.analysis import RunData
    from eval.oversearch import analyze_search_r1
    from s3core.types import Document

    second = {**R1_ROW, "id": "2hop__1_2", "steps": [
        {"turn": 0, "query": None, "retrieved_ids": [], "policy_text": "<think>easy</think><answer>Paris</answer>"}]}
    run = RunData(name="r1", dir=tmp_path, method="search_r1", config={}, contexts={"r1": R1_ROW, "2hop__1_2": second},
                  rows={"r1": {"metrics": {"genacc": 1.0}}, "2hop__1_2": {"metrics": {"genacc": 0.0}}},
                  gold={}, datasets={"r1": "musique", "2hop__1_2": "musique"}, dataset_dir=None, max_turns=3, k=3)
    seen: list[list[dict[str, str]]] = []

    def answer(chats: list[list[dict[str, str]]]) -> list[str | None]:
        seen.extend(chats)
        return ["<query_answer>Steven Spielberg</query_answer>", "<query_answer>Spielberg</query_answer>"]

    def docs(ids: set[str]) -> dict[str, Document]:
        return {i: Document(id=i, title=f"T{i}", text="Jaws is a film by Steven Spielberg.") for i in ids}

    a = analyze_search_r1(run, answer, lambda m, c: [True for _ in m], docs, n_resamples=100)
    s = a.summary
    assert (s["search_steps"], s["answer_steps"], s["no_answer_steps"]) == (1, 2, 1)
    assert s["over_search_rate"]["mean"] == 1.0 and s["under_search_rate"]["mean"] == 0.5
    assert s["under_search_rate_incl_no_answer"]["mean"] == pytest.approx(2 / 3)
    # the memory prompt ends at the step's think; the context prompt carries the retrieved window
    assert seen[0][-2]["content"] == "<think>I need it</think>" and "own knowledge" in seen[0][-1]["content"]
    assert "<information>Doc 1(Title: Td1)" in seen[1][-1]["content"]
    assert [b["searches"] for b in s["by_searches"]] == [0, 1]
    assert a.hops is not None and a.hops["less"]["sum"] == 100.0  # 2-hop questions with 0 and 1 searches
    assert "over-search" in "\n".join(a.markdown())


def test_over_search_answers_are_kept_so_a_rerun_asks_the_policy_nothing(tmp_path: Path) -> None:
    """`s3 analyze` on a Search-R1 run: the policy's sub-query answers go to OUT/policy_answers.jsonl as they come; a
    rerun (hand labels added) or a resume after a kill reads them back; another model or another chat is a miss."""
    from s3.commands.analyze import ANSWERS_FILE, _AnswerMemo

    path = tmp_path / ANSWERS_FILE
    chat = [{"role": "user", "content": "Query: capital of Peru?"}]
    other = [{"role": "user", "content": "Query: capital of Chile?"}]
    memo = _AnswerMemo(path, "local/m")
    assert memo.get(chat) is None
    memo.put([(chat, "<query_answer>Lima")])
    assert memo.get(chat) == "<query_answer>Lima" and memo.get(other) is None
    with path.open("a") as fh:
        fh.write('{"key": "torn')  # a kill mid-write
    again = _AnswerMemo(path, "local/m")
    assert again.get(chat) == "<query_answer>Lima" and _AnswerMemo(path, "local/other").get(chat) is None
    again.put([(other, "Santiago")])
    assert [r["text"] for r in map(json.loads, path.read_text().splitlines())] == ["<query_answer>Lima", "Santiago"]
