"""Several queries in one turn (searcher.queries_per_turn > 1) and the candidates teacher that lists them
(training/prep/oracle.py, teacher="candidates"): parsing, the one interleaved title-first window, the prompt, the record,
the teacher's lists and the configuration check. Scripted policies and an in-test retriever; the real 135M searcher
and the real BM25 index run it in benchmarks/transfer_checks.py (docs/transfer.md, "Several candidate queries")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_agent import TinyRetriever

from s3.config import load_config
from s3core.errors import ConfigError
from s3core.types import Document
from searcher.agent import S3Searcher, interleave
from searcher.config import SearcherConfig
from searcher.policy import ScriptedPolicy
from searcher.protocol import (
    MULTI_QUERY_NOTE,
    build_s3_prompt,
    information_observation,
    parse_s3_reply,
    render_information,
    s3_prompt_sha256,
)
from training.prep.oracle import candidate_queries, oracle_script

LIST_REPLY = ('<important_info>[]</important_info><search_complete>False</search_complete>'
              '<query>{"query": ["Erika Jayne", "Lo Fidelity", "erika  jayne", "", 7, "Bo"]}</query>')


def test_a_json_list_gives_every_query_once_and_the_first_as_query() -> None:
    act = parse_s3_reply(LIST_REPLY, window_size=3)
    assert act.invalid_reason is None and act.query == "Erika Jayne"
    assert act.queries == ("Erika Jayne", "Lo Fidelity", "Bo")  # case/space duplicates, empties, non-strings dropped
    # a list cut off by max_new_tokens keeps its closed strings
    cut = parse_s3_reply('<search_complete>False</search_complete><query>{"query": ["A b", "C d", "E', 3)
    assert cut.queries == ("A b", "C d") and cut.query == "A b"
    # one query (plain JSON, one-item list, raw) is what it always was: queries stays empty
    for raw, q in [('{"query": "x y"}', "x y"), ('{"query": ["x"]}', "x"), ("x  y", "x y")]:
        act = parse_s3_reply(f"<search_complete>False</search_complete><query>{raw}</query>", 3)
        assert (act.query, act.queries) == (q, ())
    assert parse_s3_reply('<search_complete>False</search_complete><query>{"query": []}</query>', 3).invalid_reason == "empty <query>"


def test_the_prompt_mentions_lists_only_when_they_are_allowed() -> None:
    one, many = build_s3_prompt("Q?", None, 3), build_s3_prompt("Q?", None, 3, queries_per_turn=6)
    note = MULTI_QUERY_NOTE.replace("{n}", "6")
    assert note not in one and note in many and many.replace(note, "") == one
    assert s3_prompt_sha256(3) != s3_prompt_sha256(3, 6) and s3_prompt_sha256(3, 1) == s3_prompt_sha256(3)


def _d(i: str, title: str | None = None) -> Document:
    return Document(id=i, title=title or i, text="")


def test_interleave_puts_each_querys_titled_page_first_then_takes_ranks_in_turn() -> None:
    a = [_d("a1"), _d("kt", "Kiss and Tell (1945 film)"), _d("a3")]
    b = [_d("b1"), _d("a1"), _d("b3")]
    # k 4, 2 queries: 2 each; "Kiss and Tell" brings its page first; a1 comes once
    assert [x.id for x in interleave(["Kiss and Tell", "zzz"], [a, b], 4)] == ["kt", "b1", "a1"]
    # more queries than k: one each, at most k
    assert [x.id for x in interleave(["q1", "q2", "q3"], [[_d("x")], [_d("y")], [_d("z")]], 2)] == ["x", "y"]


class TitleRetriever(TinyRetriever):
    """A query returns k documents: its own page ('<query>') at rank 3 (when k >= 3), fillers around it."""

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        self.calls.append((list(queries), k))
        out = []
        for q in queries:
            docs = [Document(id=f"{q}-{i}", title=f"{q} filler {i}", text="t") for i in range(1, k + 1)]
            if k >= 3:
                docs[2] = Document(id=q, title=q, text="its page")
            out.append(docs)
        return out


def _script(prompt: str, _: int) -> str:
    if prompt.split("</question>")[-1].count("<information>") == 1:  # after D0: ask three candidates
        return LIST_REPLY.replace('"Erika Jayne", "Lo Fidelity", "erika  jayne", "", 7, "Bo"', '"Alpha", "Beta", "Gamma"')
    return "<important_info>[1, 2]</important_info><search_complete>True</search_complete>"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_loop_searches_up_to_n_queries_into_one_window_and_records_them(n: int) -> None:
    retr = TitleRetriever()
    cfg = SearcherConfig(k=6, max_select=2, max_turns=2, additive=True, context_cap=5, queries_per_turn=n)
    res = S3Searcher(ScriptedPolicy(_script), retr, cfg, k0=3).search(["Q?"])[0]
    asked = ["Alpha", "Beta", "Gamma"][:n]
    assert retr.calls[1] == (asked, 6)  # one retrieval call for every query of the turn
    step = res.steps[1]
    assert step.query == "Alpha" and step.queries == (asked if n > 1 else None)
    if n == 1:  # the paper's loop: the first query's window, as it ranked
        assert step.retrieved_ids == [f"Alpha-{i}" if i != 3 else "Alpha" for i in range(1, 7)]
    else:  # each query's own page first, then its next documents, rank by rank
        per = 6 // n
        heads = [[q, f"{q}-1", f"{q}-2"][:per] for q in asked]
        assert step.retrieved_ids == [h[r] for r in range(per) for h in heads]
        assert [d.id for d in res.documents][3:] == ["Alpha", "Beta"]  # selected [1, 2]: the two pages


def test_a_searcher_json_records_and_applies_queries_per_turn(tmp_path: Path) -> None:
    from searcher.config import RetrieverConfig
    from searcher.trained import apply_record, find_record, make_record, write_record

    trained = SearcherConfig(queries_per_turn=6, max_new_tokens=128)
    write_record(make_record(trained, RetrieverConfig(), None, tmp_path), tmp_path)
    record, folder = find_record(tmp_path) or pytest.fail("no searcher.json")
    assert record.searcher["queries_per_turn"] == 6 and record.prompt_sha256 == s3_prompt_sha256(3, 6)
    served, _, _ = apply_record(record, folder, SearcherConfig(), RetrieverConfig())
    assert (served.queries_per_turn, served.max_new_tokens) == (6, 128)
    # a policy trained before the setting existed keeps the paper's one query a turn
    del record.searcher["queries_per_turn"]
    assert apply_record(record, folder, SearcherConfig(), RetrieverConfig())[0].queries_per_turn == 1


GOLD_Q = "Who directed Kiss and Tell, the film with Shirley Temple?"


def test_the_candidates_teacher_lists_the_copyable_title_first_then_what_it_sees() -> None:
    window = render_information([Document(id="kt", title="Kiss and Tell (1945 film)",
                                          text="Kiss and Tell stars Shirley Temple. It was directed by Richard Wallace. "
                                               "Columbia Pictures made it.")], None)
    prompt = build_s3_prompt(GOLD_Q, window, 3, queries_per_turn=3)
    gold = {GOLD_Q: ["Kiss and Tell (1945 film)", "Richard Wallace"]}
    act = parse_s3_reply(oracle_script(gold, 3, 3, teacher="candidates", queries_per_turn=3)(prompt, 0), 1)
    # the gold it has is selected; the missing gold title first; its own title never; at most 3
    assert act.selected == (1,) and act.search_complete is False
    assert act.queries == ("Richard Wallace", "Shirley Temple", "Columbia Pictures")
    assert candidate_queries(prompt, "Richard Wallace", 8) == ["Richard Wallace", "Shirley Temple", "Columbia Pictures"]
    # the copyable teacher asks the one title; nothing copyable left: both stop
    assert parse_s3_reply(oracle_script(gold, 3, 3, teacher="copyable")(prompt, 0), 1).query == "Richard Wallace"
    prompt += '<search_complete>False</search_complete><query>{"query": ["Richard Wallace"]}</query>'
    prompt += information_observation(render_information([Document(id="x", title="Other", text="nothing")], None))
    assert parse_s3_reply(oracle_script(gold, 3, 3, teacher="candidates", queries_per_turn=3)(prompt, 0), 1).search_complete
    with pytest.raises(ValueError, match="queries_per_turn >= 2"):
        oracle_script(gold, 3, 3, teacher="candidates")


def test_the_spans_teacher_lists_what_it_sees_in_order_with_the_copyable_title_in_its_place() -> None:
    window = render_information([Document(id="kt", title="Kiss and Tell (1945 film)",
                                          text="It stars Shirley Temple. It was directed by Richard Wallace. "
                                               "Columbia Pictures made it.")], None)
    prompt = build_s3_prompt(GOLD_Q, window, 3, queries_per_turn=4)
    gold = {GOLD_Q: ["Kiss and Tell (1945 film)", "Richard Wallace"]}

    def listed(n: int) -> tuple[str, ...]:
        return parse_s3_reply(oracle_script(gold, 3, 3, teacher="spans", queries_per_turn=n)(prompt, 0), 1).queries

    # the question's "Shirley Temple" first, the gold title where the document shows it
    assert listed(4) == ("Shirley Temple", "Richard Wallace", "Columbia Pictures")
    # no room for it in order: it takes the last place, so the list always holds it
    assert listed(2) == ("Shirley Temple", "Richard Wallace")
    gold_late = {GOLD_Q: ["Kiss and Tell (1945 film)", "Columbia Pictures"]}
    reply = oracle_script(gold_late, 3, 3, teacher="spans", queries_per_turn=2)(prompt, 0)
    assert parse_s3_reply(reply, 1).queries == ("Shirley Temple", "Columbia Pictures")


def test_the_candidates_teacher_needs_several_queries_a_turn_in_the_config() -> None:
    for teacher in ("candidates", "spans"):
        with pytest.raises(ConfigError, match=re.escape("searcher.queries_per_turn >= 2")):
            load_config([], [f"training.sft.teacher={teacher}"])
    cfg = load_config([], ["training.sft.teacher=candidates", "searcher.queries_per_turn=4"])
    assert cfg.searcher.queries_per_turn == 4
    with pytest.raises(ConfigError, match="queries_per_turn"):
        load_config([], ["searcher.queries_per_turn=0"])


def test_s3_eval_runs_a_trained_policy_on_the_loop_its_searcher_json_recorded(tmp_path: Path) -> None:
    import argparse

    from s3.commands.evaluate import _trained_loop
    from searcher.config import RetrieverConfig
    from searcher.trained import make_record, write_record

    policy = tmp_path / "policy"
    policy.mkdir()
    write_record(make_record(SearcherConfig(queries_per_turn=8, max_new_tokens=128, additive=True, context_cap=5),
                             RetrieverConfig(), None, policy), policy)
    args = argparse.Namespace(method="searcher", contexts=None, index=str(tmp_path / "index"))
    given = load_config([], [f"searcher.policy_path={policy}", "searcher.max_new_tokens=96"])
    cfg = _trained_loop(args, given)
    assert (cfg.searcher.queries_per_turn, cfg.searcher.additive, cfg.searcher.context_cap) == (8, True, 5)
    assert cfg.searcher.max_new_tokens == 96 and given.searcher.queries_per_turn == 1  # --set wins; a new config
    # naive RAG, a contexts file, a policy folder without a record: the config's loop as it is
    for changed in ({"method": "naive_rag"}, {"contexts": "c.jsonl"}):
        assert _trained_loop(argparse.Namespace(**{**vars(args), **changed}), given) is given
    (policy / "searcher.json").unlink()
    assert _trained_loop(args, given) is given


def test_train_eval_rolls_a_trained_policy_out_on_the_loop_its_searcher_json_recorded(tmp_path: Path) -> None:
    """`s3 train-eval` (training/run/evaluate.py `_policy_loop`) as `s3 eval`: a policy folder's record gives the loop
    keys the config files and --set do not (the held-out ablation's list policies ran with one query a turn before);
    the engine and greedy decoding stay the run's; a base model name or a folder without a record: the run's loop."""
    from searcher.config import RetrieverConfig
    from searcher.trained import make_record, write_record
    from training.run.evaluate import _policy_loop

    policy = tmp_path / "policy"
    policy.mkdir()
    write_record(make_record(SearcherConfig(queries_per_turn=8, max_new_tokens=128, max_turns=1), RetrieverConfig(),
                             None, policy), policy)
    run = SearcherConfig(policy="vllm", temperature=0.0, max_new_tokens=48)
    loop = _policy_loop(run, str(policy), frozenset({"searcher.max_new_tokens"}), tmp_path / "index")
    assert (loop.queries_per_turn, loop.max_turns, loop.max_new_tokens) == (8, 1, 48)
    assert (loop.policy, loop.temperature) == ("vllm", 0.0)
    assert _policy_loop(run, "smollm2-135m-instruct", frozenset(), tmp_path) is run
    (policy / "searcher.json").unlink()
    assert _policy_loop(run, str(policy), frozenset(), tmp_path) is run
