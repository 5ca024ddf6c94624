"""S3Searcher / SearchR1Agent mechanics with scripted policies and a tiny in-test retriever (no model, no index)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from s3core.errors import ConfigError, S3Error
from s3core.types import Document, QAExample
from searcher.agent import S3Searcher, SearchR1Agent, admission_stats
from searcher.config import SearcherConfig
from searcher.policy import PolicyOutput, ScriptedPolicy
from searcher.policy.base import PolicyPrompt
from searcher.title_following import TitleFollowingStart


class TinyRetriever:
    """Documents named by topic: a query returns k documents '<word>-<i>' for its first word. Records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        self.calls.append((list(queries), k))
        out = []
        for q in queries:
            w = re.sub(r"\W", "", q.split()[0].lower()) if q.split() else "none"
            out.append([Document(id=f"{w}-{i}", title=f"{w} {i}", text=f"text about {w} number {i}") for i in range(1, k + 1)])
        return out


class CharTok:
    """A character tokenizer: id = code point. Decoded text of any id span is exact, so masks can be checked by text."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode("".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>")


def turn_of(prompt: str) -> int:
    """How many windows the policy has seen after D0 (count of inserted <information> blocks after the prompt)."""
    return prompt.split("</question>")[-1].count("<information>\n") - 1


CFG = SearcherConfig(k=4, max_select=2, max_turns=2)


def test_lockstep_one_retrieval_and_one_policy_call_per_turn_and_finished_questions_leave() -> None:
    # question i stops after i searches: "a" stops at once, "b" after 1 search, "c" uses both turns
    stops_after = {"a": 0, "b": 1, "c": 2}

    def script(prompt: str, _: int) -> str:
        q = re.findall(r"<question>\n(\w)", prompt)[0]
        t = turn_of(prompt)
        if t >= stops_after[q]:
            return "<important_info>[1]</important_info><search_complete>True</search_complete>"
        return f'<important_info>[2]</important_info><search_complete>False</search_complete><query>{{"query": "{q}{t}"}}</query> tail'

    retr = TinyRetriever()
    policy = ScriptedPolicy(script)
    searcher = S3Searcher(policy, retr, CFG, k0=3)
    res = searcher.search(["a?", "b?", "c?"])
    # D0 for all three in one call (k0=3), then one call per turn with only the questions still searching
    assert retr.calls == [(["a?", "b?", "c?"], 3), (["b0", "c0"], 4), (["c1"], 4)]
    assert [len(c) for c in policy.calls] == [3, 2, 1]
    assert searcher.last_stats.policy_calls == 3 and searcher.last_stats.retrieval_calls == 3
    assert searcher.last_stats.batch_sizes == [3, 2, 1]
    assert [r.turns for r in res] == [0, 1, 2]
    # D_s3 = selections in turn order: D0's doc 1 (a) or doc 2 then the next windows' picks
    assert [d.id for d in res[0].documents] == ["a-1"]
    assert [d.id for d in res[1].documents] == ["b-2", "b0-1"]
    assert [d.id for d in res[2].documents] == ["c-2", "c0-2", "c1-1"]
    c = res[2]
    assert [s.turn for s in c.steps] == [0, 1, 2]
    assert [s.query for s in c.steps] == ["c?", "c0", "c1"]
    assert c.steps[1].retrieved_ids == ["c0-1", "c0-2", "c0-3", "c0-4"]
    assert [s.search_complete for s in c.steps] == [False, False, True]
    # the reply is cut right after the stop string: " tail" never reaches the record
    assert c.steps[0].policy_text.endswith("</query>")
    assert res[0].trajectory is None  # text policy: no token trajectory


def test_last_reply_judges_the_last_window_and_its_query_is_not_searched() -> None:
    def script(prompt: str, _: int) -> str:
        return f'<important_info>[1]</important_info><search_complete>False</search_complete><query>{{"query": "q{turn_of(prompt)}"}}</query>'

    retr = TinyRetriever()
    res = S3Searcher(ScriptedPolicy(script), retr, CFG).search_one("x?")
    assert len(retr.calls) == 3  # D0 + max_turns=2 searches; the third reply's query is ignored
    assert [s.turn for s in res.steps] == [0, 1, 2]
    assert [d.id for d in res.documents] == ["x-1", "q0-1", "q1-1"]  # the last window was still judged


def test_appendix_a5_fallback_admits_whole_window_or_drops_it() -> None:
    # Table 7: the first reply has no <important_info> (all D0 admitted), the second selects [1, 2]
    def script(prompt: str, _: int) -> str:
        if turn_of(prompt) == 0:
            return '<search_complete> False </search_complete>\n<query>{"query": "film year"}</query>'
        return "<important_info>[1, 2]</important_info>\n<search_complete> True </search_complete>"

    cfg = SearcherConfig(k=4, max_select=2, max_turns=3)  # cap 6: room for all of D0 and two picks
    res = S3Searcher(ScriptedPolicy(script), TinyRetriever(), cfg).search_one("earthship?")
    assert [d.id for d in res.documents] == ["earthship-1", "earthship-2", "earthship-3", "film-1", "film-2"]
    assert res.steps[0].selection_fallback and not res.steps[1].selection_fallback
    stats = admission_stats(res)
    assert stats == {"documents": 5, "by_selection": 2, "by_fallback": 3, "replies": 2, "invalid_replies": 0, "search_turns": 1}

    drop = SearcherConfig(k=4, max_select=2, max_turns=3, no_selection="drop")
    res2 = S3Searcher(ScriptedPolicy(script), TinyRetriever(), drop).search_one("earthship?")
    assert [d.id for d in res2.documents] == ["film-1", "film-2"]
    assert res2.steps[0].selected_ids == [] and not res2.steps[0].selection_fallback


def test_context_is_capped_at_max_contexts_and_deduplicated() -> None:
    cfg = SearcherConfig(k=4, max_select=2, max_turns=1)  # cap = 2 x 1 = 2
    assert cfg.max_contexts == 2

    def script(prompt: str, _: int) -> str:  # never selects: every window is admitted whole (A.5)
        return '<search_complete>False</search_complete><query>{"query": "other"}</query>'

    res = S3Searcher(ScriptedPolicy(script), TinyRetriever(), cfg).search_one("topic?")
    assert [d.id for d in res.documents] == ["topic-1", "topic-2"]
    # context_cap overrides the paper's formula: D0's and the search turn's windows add up to 3 here
    wide = SearcherConfig(k=4, max_select=2, max_turns=1, context_cap=3)
    assert wide.max_contexts == 3
    res_wide = S3Searcher(ScriptedPolicy(script), TinyRetriever(), wide).search_one("topic?")
    assert [d.id for d in res_wide.documents] == ["topic-1", "topic-2", "topic-3"]
    # the same document seen in two windows enters once
    dup_cfg = SearcherConfig(k=4, max_select=2, max_turns=2)

    def dup(prompt: str, _: int) -> str:
        return '<important_info>[1]</important_info><search_complete>False</search_complete><query>{"query": "topic"}</query>'

    res2 = S3Searcher(ScriptedPolicy(dup), TinyRetriever(), dup_cfg).search_one("topic")
    assert [d.id for d in res2.documents] == ["topic-1"]


def test_selections_and_queries_only_add_up_to_the_cap() -> None:
    def script(prompt: str, _: int) -> str:  # selects nothing from D0, then picks [2, 1] from each window
        if turn_of(prompt) == 0:
            return '<important_info>[]</important_info><search_complete>False</search_complete><query>{"query": "film"}</query>'
        return f'<important_info>[2, 1]</important_info><search_complete>False</search_complete><query>{{"query": "x{turn_of(prompt)}"}}</query>'

    cfg = SearcherConfig(k=4, max_select=2, max_turns=2, context_cap=6, additive=True)
    res = S3Searcher(ScriptedPolicy(script), TinyRetriever(), cfg, k0=3).search_one("topic?")
    assert [d.id for d in res.documents] == ["topic-1", "topic-2", "topic-3", "film-2", "film-1", "x1-2"]
    # the same loop, not additive: the empty selection over D0 drops it
    plain = S3Searcher(ScriptedPolicy(script), TinyRetriever(), cfg.model_copy(update={"additive": False}), k0=3)
    assert [d.id for d in plain.search_one("topic?").documents] == ["film-2", "film-1", "x1-2", "x1-1"]


def test_an_additive_searcher_needs_d0_and_room_for_it() -> None:
    policy = ScriptedPolicy(lambda p, i: "<important_info>[2]</important_info><search_complete>True</search_complete>")
    with pytest.raises(ConfigError, match="context_cap >= 3"):
        S3Searcher(policy, TinyRetriever(), SearcherConfig(max_select=1, max_turns=2, additive=True), k0=3)
    with pytest.raises(ConfigError, match="begin_with_search"):
        S3Searcher(policy, TinyRetriever(), SearcherConfig(begin_with_search=False, additive=True), k0=3)
    with pytest.raises(ConfigError, match="begin_with_search"):
        SearchR1Agent(policy, TinyRetriever(), SearcherConfig(additive=True), k0=3)


def test_per_call_settings_run_at_once_on_one_searcher_and_leave_it_unchanged() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def script(prompt: str, _: int) -> str:  # always searches on: each call uses its whole turn budget
        return f'<important_info>[1]</important_info><search_complete>False</search_complete><query>{{"query": "t{turn_of(prompt)}"}}</query>'

    searcher = S3Searcher(ScriptedPolicy(script, delay_s=0.02), TinyRetriever(), CFG)  # k=4, max_turns=2
    one_turn = SearcherConfig(k=5, max_select=2, max_turns=1, doc_token_budget=8)
    with ThreadPoolExecutor(2) as pool:  # two calls with different settings interleave on the same searcher
        a = pool.submit(searcher.search, ["a?"], cfg=one_turn)
        b = pool.submit(searcher.search, ["b?"])
        (ra,), (rb,) = a.result(), b.result()
    assert (ra.turns, len(ra.steps[1].retrieved_ids)) == (1, 5)
    assert (rb.turns, len(rb.steps[1].retrieved_ids)) == (2, 4)
    assert searcher.cfg is CFG and CFG.k == 4
    with pytest.raises(ConfigError, match="context_cap >= 3"):  # a call's settings are checked like the searcher's
        searcher.search(["c?"], cfg=SearcherConfig(max_select=1, max_turns=1, additive=True))


def test_invalid_action_becomes_an_observation_and_uses_the_turn() -> None:
    seen: list[str] = []

    def script(prompt: str, _: int) -> str:
        seen.append(prompt)
        if len(seen) == 1:
            return "The answer is probably 2007."  # no tags at all
        return "<search_complete>True</search_complete>"

    res = S3Searcher(ScriptedPolicy(script), TinyRetriever(), CFG).search_one("q?")
    assert res.steps[0].invalid_reason == "no <query> and no <search_complete> tag"
    # the second prompt (a conversation) carries the observation that says what was wrong
    assert "not a valid action (no <query> and no <search_complete> tag)" in seen[1]
    assert res.steps[1].turn == 1 and res.steps[1].query is None and res.steps[1].retrieved_ids == []
    assert res.steps[1].invalid_reason is None and res.steps[1].search_complete is True
    # D0 was not selected from by the invalid reply: A.5 admitted it
    assert [d.id for d in res.documents] == ["q-1", "q-2", "q-3"]


def test_token_trajectory_masks_are_built_while_appending() -> None:
    replies = iter(
        [
            '<search_complete>False</search_complete><query>{"query": "film"}</query>',
            "<important_info>[2]</important_info><search_complete>True</search_complete>",
        ]
    )
    policy = ScriptedPolicy(lambda p, i: next(replies), tokenizer=CharTok())
    searcher = S3Searcher(policy, TinyRetriever(), CFG, k0=1)
    res = searcher.search_one("earthship?")
    traj = res.trajectory
    assert traj is not None
    tok = CharTok()
    prompt = tok.decode(traj.prompt_ids)
    assert prompt.startswith("<user>You are a search copilot") and prompt.endswith("</information>\n<assistant>")
    # response = reply 0 (policy) + <information> window 1 (environment) + reply 1 (policy)
    r0 = '<search_complete>False</search_complete><query>{"query": "film"}</query>'
    obs = (
        "\n\n<information>\nDoc 1 (Title: film 1) text about film number 1\nDoc 2 (Title: film 2) text about film "
        "number 2\nDoc 3 (Title: film 3) text about film number 3\nDoc 4 (Title: film 4) text about film number 4\n"
        "</information>\n\n"
    )
    r1 = "<important_info>[2]</important_info><search_complete>True</search_complete>"
    assert tok.decode(traj.response_ids) == r0 + obs + r1
    assert traj.mask == [1] * len(r0) + [0] * len(obs) + [1] * len(r1)
    assert len(traj.logprobs) == len(traj.response_ids)
    # the second policy call continued from exactly prompt + r0 + obs (token ids, not re-rendered text)
    assert tok.decode(policy.calls[1][0].ids) == prompt + r0 + obs  # type: ignore[union-attr]
    # per-document budget counted with the policy's tokenizer (characters here)
    budget = SearcherConfig(k=4, max_select=2, max_turns=1, doc_token_budget=10)
    s2 = S3Searcher(ScriptedPolicy(lambda p, i: "<search_complete>1</search_complete>", tokenizer=CharTok()), TinyRetriever(), budget)
    r = s2.search_one("z?")
    assert "Doc 1 (Title: z 1) text about\n" in tok.decode(r.trajectory.prompt_ids)  # type: ignore[union-attr]


def test_without_begin_with_search_the_first_reply_must_query() -> None:
    cfg = SearcherConfig(k=4, max_select=2, max_turns=2, begin_with_search=False)
    retr = TinyRetriever()

    def script(prompt: str, _: int) -> str:
        if "film" not in prompt.split("</question>")[-1]:
            return '<search_complete>False</search_complete><query>{"query": "film"}</query>'
        return "<important_info>[1]</important_info><search_complete>True</search_complete>"

    res = S3Searcher(ScriptedPolicy(script), retr, cfg).search_one("q?")
    assert retr.calls == [(["film"], 4)]
    assert res.steps[0].query is None and res.steps[0].retrieved_ids == []
    assert [d.id for d in res.documents] == ["film-1"]


def test_k_turns_and_budget_settings_change_the_loop() -> None:
    cfg = SearcherConfig(k=2, max_turns=1, doc_token_budget=8, max_select=2)
    retr = TinyRetriever()
    script = lambda p, i: '<search_complete>False</search_complete><query>{"query": "w"}</query>'  # noqa: E731
    res = S3Searcher(ScriptedPolicy(script), retr, cfg).search_one("q?")
    assert retr.calls == [(["q?"], 3), (["w"], 2)]
    assert res.turns == 1 and len(res.documents) <= cfg.max_contexts == 2


class FailingPolicy(ScriptedPolicy):
    def generate(self, prompts: Sequence[PolicyPrompt], **kw: object) -> list[PolicyOutput]:  # type: ignore[override]
        return [PolicyOutput(text="", error="Timeout: no answer") for _ in prompts]


def test_failed_policy_call_is_recorded_and_the_result_is_degraded_to_d0() -> None:
    # a failed policy call ends the search marked `degraded` (error + code): the caller keeps D0, the documents the
    # searcher had already retrieved, instead of a silent empty list (issue 18, defect 2)
    res = S3Searcher(FailingPolicy(lambda p, i: ""), TinyRetriever(), CFG).search_one("q?")
    assert res.steps[0].invalid_reason == "policy call failed: Timeout: no answer"
    assert res.degraded and res.error == "policy call failed: Timeout: no answer"
    assert res.error_code == "upstream_error"  # the policy gave no code of its own
    assert [d.id for d in res.documents] == res.steps[0].retrieved_ids != []


def test_a_cancelled_question_leaves_the_batch_and_the_others_go_on() -> None:
    asked: list[int] = []
    script = lambda p, i: '<search_complete>False</search_complete><query>{"query": "w"}</query>'  # noqa: E731
    policy = ScriptedPolicy(script)
    gone = [False, False]

    def cancel_after_first_turn(i: int) -> Callable[[], bool]:
        def check() -> bool:
            asked.append(i)
            return gone[i]

        return check

    orig = policy.generate

    def generate(prompts: Sequence[PolicyPrompt], **kw: Any) -> list[PolicyOutput]:
        gone[0] = True  # question 0's caller gives up while the first policy call runs
        return orig(prompts, **kw)

    policy.generate = generate  # type: ignore[method-assign]
    cfg = CFG.model_copy(update={"max_turns": 2})
    res = S3Searcher(policy, TinyRetriever(), cfg).search(["q0?", "q1?"], cancelled=[cancel_after_first_turn(0),
                                                                                   cancel_after_first_turn(1)])
    assert res[0].error_code == "deadline_exceeded" and res[0].documents  # left with what it had
    assert res[1].error is None and res[1].turns == 2  # the batch went on without it
    assert [len(c) for c in policy.calls] == [2, 1, 1]


def test_questions_are_chunked_by_policy_max_batch_and_keep_ids() -> None:
    retr = TinyRetriever()
    policy = ScriptedPolicy(lambda p, i: "<search_complete>True</search_complete>", max_batch=2)
    qs = [QAExample(id=f"id{i}", question=f"q{i}?", golden_answers=["x"]) for i in range(5)]
    res = S3Searcher(policy, retr, CFG).search(qs)
    assert [r.question_id for r in res] == [f"id{i}" for i in range(5)]
    assert [len(c) for c in policy.calls] == [2, 2, 1]


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(S3Error, match="question 1 is empty"):
        S3Searcher(ScriptedPolicy(lambda p, i: ""), TinyRetriever(), CFG).search(["ok", "  "])
    with pytest.raises(ConfigError, match="k0"):
        S3Searcher(ScriptedPolicy(lambda p, i: ""), TinyRetriever(), CFG, k0=0)


def test_search_r1_agent_answers_itself_with_same_batching_and_masks() -> None:
    def script(prompt: str, _: int) -> str:
        if "<information>Doc" not in prompt:
            return "<think>need facts</think><search> earthship film </search> extra"
        return "<think>found it</think><answer> 2007 </answer>"

    retr = TinyRetriever()
    policy = ScriptedPolicy(script, tokenizer=CharTok())
    agent = SearchR1Agent(policy, retr, CFG, k0=3)
    res = agent.search(["film year?", "other?"])
    assert retr.calls == [(["earthship film", "earthship film"], 3)]  # no begin-with-search; one batched call
    assert [r.answer for r in res] == ["2007", "2007"]
    r = res[0]
    assert [d.id for d in r.documents] == ["earthship-1", "earthship-2", "earthship-3"]
    assert r.steps[0].search_complete is False and r.steps[1].search_complete is True
    tok = CharTok()
    assert tok.decode(r.trajectory.prompt_ids).startswith("<user>Answer the given question.")  # type: ignore[union-attr]
    r0 = "<think>need facts</think><search> earthship film </search>"
    assert tok.decode(r.trajectory.response_ids).startswith(r0 + "\n\n<information>Doc 1(Title: earthship 1)")  # type: ignore[union-attr]
    mask = r.trajectory.mask  # type: ignore[union-attr]
    assert mask[: len(r0)] == [1] * len(r0) and mask[len(r0)] == 0 and mask[-1] == 1


def test_search_r1_invalid_then_budget() -> None:
    calls = {"n": 0}

    def script(prompt: str, _: int) -> str:
        calls["n"] += 1
        return "hmm" if calls["n"] == 1 else "<search>again</search>"

    res = SearchR1Agent(ScriptedPolicy(script), TinyRetriever(), CFG).search_one("q?")
    assert res.steps[0].invalid_reason == "no <search> or <answer> tag"
    assert res.answer is None
    assert res.steps[-1].invalid_reason == "search budget exhausted before an <answer>"


def test_min_turns_turns_an_early_stop_into_an_observation_asking_for_a_query() -> None:
    cfg = SearcherConfig(k=4, max_select=2, max_turns=2, min_turns=1)
    prompts: list[str] = []

    def script(prompt: str, _: int) -> str:
        prompts.append(prompt)
        if len(prompts) == 1:
            return "<search_complete>True</search_complete>"  # stops before any search
        if len(prompts) == 2:
            return '<search_complete>False</search_complete><query>{"query": "film"}</query>'
        return "<important_info>[1]</important_info><search_complete>True</search_complete>"

    retr = TinyRetriever()
    res = S3Searcher(ScriptedPolicy(script), retr, cfg).search_one("q?")
    assert res.steps[0].invalid_reason == "search_complete before the minimum of 1 search turn(s)"
    assert "You must search before stopping (at least 1 search turn(s))" in prompts[1]
    assert retr.calls == [(["q?"], 3), (["film"], 4)]
    assert [d.id for d in res.documents] == ["q-1", "q-2", "q-3", "film-1"]
    # min_turns=0 (the paper): the same first reply ends the search at once
    res0 = S3Searcher(ScriptedPolicy(lambda p, i: "<search_complete>True</search_complete>"), TinyRetriever(), CFG).search_one("q?")
    assert res0.turns == 0 and res0.steps[0].invalid_reason is None


def test_step_records_are_search_steps_with_every_field_built_without_validation() -> None:
    from s3core.types import SearchStep
    from searcher.agent import _new_step

    # the record's instance dict holds exactly SearchStep's fields (construct_trusted), with the schema's defaults
    assert list(vars(_new_step(1))) == list(SearchStep.model_fields)
    assert _new_step(1) == SearchStep(turn=1)
    full = _new_step(2, "q", ["a"], 0.25, ["q", "r"])
    full.selected_ids, full.selection_fallback, full.policy_text = ["a"], True, "t"  # what the loop writes later
    assert SearchStep.model_validate(full.model_dump()) == full
    assert full.model_dump() == SearchStep(turn=2, query="q", retrieved_ids=["a"], retrieval_seconds=0.25,
                                           queries=["q", "r"], selected_ids=["a"], selection_fallback=True,
                                           policy_text="t").model_dump()
    assert _new_step(1).retrieved_ids is not _new_step(1).retrieved_ids  # no list shared between steps


def test_a_loop_protocol_of_its_own_runs_on_the_same_loop() -> None:
    """A new agent is one protocol object (searcher/loops.py), no subclass: here one that answers 'DONE <n>' after
    n searches and keeps the first document of every window it read."""
    from searcher.loops import DONE, Decision

    class CountDown:
        stop: tuple[str, ...] = ("</q>",)
        keeps_read: bool = False

        def begins_with_search(self, cfg: SearcherConfig) -> bool:
            return False

        def turn_k(self, cfg: SearcherConfig, k0: int) -> int:
            return 2

        def first_prompt(self, question: str, d0: Any, cfg: SearcherConfig, render: Any) -> str:
            assert d0 is None  # no begin-with-search
            return f"ask about {question}"

        def observation(self, window: Sequence[Document], render: Any, token_mode: bool) -> str:
            return render(window)

        def decide(self, text: str, window: Sequence[Document], step: Any, steps: Any, cfg: SearcherConfig,
                   last_turn: bool) -> Decision:
            if text.startswith("DONE"):
                return Decision(done=True, answer=text.split()[1], admit=window[:1])
            if last_turn:
                return DONE
            return Decision(text.removeprefix("<q>"), admit=window[:1])

    replies = iter(["<q>alpha", "<q>beta", "DONE 2"])
    policy = ScriptedPolicy(lambda p, i: next(replies))
    retr = TinyRetriever()
    res = S3Searcher(policy, retr, CFG, protocol=CountDown()).search_one("q?")
    assert retr.calls == [(["alpha"], 2), (["beta"], 2)]
    assert policy.calls[0] == [[{"role": "user", "content": "ask about q?"}]]  # the protocol's first prompt
    assert res.answer == "2" and [d.id for d in res.documents] == ["alpha-1", "beta-1"]
    assert [(s.turn, s.query, s.retrieved_ids) for s in res.steps] == [
        (0, None, []), (1, "alpha", ["alpha-1", "alpha-2"]), (2, "beta", ["beta-1", "beta-2"])]
    assert S3Searcher(policy, retr, CFG).protocol is not SearchR1Agent(policy, retr, CFG).protocol


def test_results_are_valid_search_results_and_rerendering_windows_uses_the_line_cache() -> None:
    from s3core.types import SearchResult

    def script(prompt: str, _: int) -> str:
        return "<important_info>[1]</important_info><search_complete>False</search_complete><query>alpha</query>"

    cfg = SearcherConfig(k=4, max_select=2, max_turns=2, doc_token_budget=8)  # a budget: lines are cached
    searcher = S3Searcher(ScriptedPolicy(script), TinyRetriever(), cfg, k0=2)
    first = searcher.search(["alpha one", "beta two"])
    for r in first:  # built without validation on the hot path: must still pass the schema unchanged
        assert SearchResult.model_validate(r.model_dump()) == r
    again = searcher.search(["alpha one", "beta two"])  # second pass renders every window from the line cache

    def view(rs: list[SearchResult]) -> list[object]:
        return [(r.documents, [(s.query, s.retrieved_ids, s.selected_ids, s.policy_text) for s in r.steps]) for r in rs]

    assert view(again) == view(first)
    calls = searcher.policy.calls  # type: ignore[attr-defined]
    assert len(calls) == 6 and calls[3:] == calls[:3]  # identical prompts, windows included
    assert set(searcher._line_caches) == {8} and len(searcher._line_caches[8]) == 6  # alpha-1..4, beta-1..2


def test_chat_window_message_is_the_stripped_information_observation() -> None:
    """Windows are rendered in one join with their <information> wrapper: a chat policy gets exactly
    information_observation(render_information(window)) without the blank lines around it."""
    from searcher.protocol import information_observation, render_information

    replies = iter(['<search_complete>False</search_complete><query>{"query": "film"}</query>',
                    "<search_complete>True</search_complete>"])
    policy = ScriptedPolicy(lambda p, i: next(replies))
    S3Searcher(policy, TinyRetriever(), CFG, k0=1).search_one("earthship?")
    conversation = policy.calls[1][0]
    assert isinstance(conversation, list) and [m["role"] for m in conversation] == ["user", "assistant", "user"]
    window = TinyRetriever().search(["film"], CFG.k)[0]
    assert conversation[2]["content"] == information_observation(render_information(window)).strip("\n")


def test_the_title_following_start_needs_a_begin_with_search_s3_loop_and_room_for_its_documents() -> None:
    stop = ScriptedPolicy(lambda p, i: "<search_complete>True</search_complete>")
    cfg = SearcherConfig(start="title_following")
    with pytest.raises(ConfigError, match="begin_with_search"):
        S3Searcher(stop, TinyRetriever(), cfg.model_copy(update={"begin_with_search": False}))
    with pytest.raises(ConfigError, match="Search-R1"):
        SearchR1Agent(stop, TinyRetriever(), cfg)
    with pytest.raises(ConfigError, match="context_cap >= 5"):
        S3Searcher(stop, TinyRetriever(), cfg.model_copy(update={"additive": True, "context_cap": 3}))
    roomy = cfg.model_copy(update={"additive": True, "context_cap": 6})
    S3Searcher(stop, TinyRetriever(), roomy, start=TitleFollowingStart(TinyRetriever(), 3))  # room: accepted
    with pytest.raises(ConfigError, match="built to start from 'top_k'"):  # a start is given when it is built
        S3Searcher(stop, TinyRetriever(), roomy)
