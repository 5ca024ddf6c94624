"""The s3 tag grammar: prompt, <information> rendering, tolerant typed parsing (hand-derived cases + properties)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3core.types import Document
from searcher.protocol import (
    S3_INSTRUCTION,
    build_s3_prompt,
    build_search_r1_prompt,
    information_observation,
    invalid_observation,
    parse_bool,
    parse_s3_reply,
    parse_search_r1_reply,
    render_information,
    truncate_words,
)

DOCS = [
    Document(id="d1", title="Earthship", text="An Earthship is a type of passive solar house made of tires."),
    Document(id="d2", title="Mike Reynolds", text="Known for Earthship houses using recycled materials."),
    Document(id="d3", title="Garbage Warrior", text="Garbage Warrior is a 2007 film about architect Mike Reynolds."),
]


def test_render_information_numbers_titles_and_budget() -> None:
    out = render_information(DOCS)
    assert out.splitlines()[0] == "Doc 1 (Title: Earthship) An Earthship is a type of passive solar house made of tires."
    assert out.splitlines()[2].startswith("Doc 3 (Title: Garbage Warrior) Garbage Warrior is a 2007")
    # budget of 4 whitespace tokens per document; titles are never cut
    assert render_information(DOCS[:1], 4) == "Doc 1 (Title: Earthship) An Earthship is a\n"
    # Search-R1 style: no space before (Title:
    assert render_information(DOCS[:1], style="search_r1").startswith("Doc 1(Title: Earthship) An")


def test_render_cache_gives_the_same_text_and_cuts_each_document_once() -> None:
    calls: list[str] = []

    def count(s: str) -> int:
        calls.append(s)
        return len(s.split())

    cache: dict[str, tuple[str, str]] = {}
    plain = render_information(DOCS, 4, count)
    n_plain = len(calls)
    assert render_information(DOCS, 4, count, cache=cache) == plain
    assert render_information(DOCS[::-1], 4, count, cache=cache) == render_information(DOCS[::-1], 4, count)
    calls.clear()
    assert render_information(DOCS[1:], 4, count, cache=cache).startswith("Doc 1 (Title: Mike Reynolds) Known for")
    assert calls == [] and n_plain > 0  # every line came from the cache, renumbered for its new window
    # same id, other text (another corpus): not confused with the cached line
    other = Document(id="d1", title="Earthship", text="Different words here entirely")
    assert render_information([other], 4, count, cache=cache) == "Doc 1 (Title: Earthship) Different words here entirely\n"


def test_whole_passages_are_written_straight_and_long_windows_keep_their_numbering() -> None:
    cache: dict[str, tuple[str, str]] = {}
    plain = render_information(DOCS)
    assert render_information(DOCS, cache=cache) == plain and cache == {}  # no budget: nothing to cut, nothing cached
    # past the precomputed "Doc i " prefixes (32): numbering and both styles still right
    many = [Document(id=f"p{i}", title=f"T{i}", text=f"text {i}") for i in range(40)]
    for style, sep in (("s3", " "), ("search_r1", "")):
        lines = render_information(many, style=style).splitlines()
        assert len(lines) == 40 and lines[39] == f"Doc 40{sep}(Title: T39) text 39" and lines[0] == f"Doc 1{sep}(Title: T0) text 0"


_field = st.text(alphabet=st.sampled_from("ab \n\t"), max_size=8)


@given(st.lists(st.tuples(_field, _field), max_size=5), st.sampled_from(["s3", "search_r1"]))
def test_whole_passage_lines_equal_the_cached_path_lines(docs: list[tuple[str, str]], style: str) -> None:
    """The straight path (no budget) writes exactly the line the budgeted path builds and caches, a budget too large
    to cut anything: newlines -> spaces, ends stripped, `(Title: t)` alone for an empty text."""
    window = [Document(id=f"x{i}", title=t, text=x) for i, (t, x) in enumerate(docs)]
    assert render_information(window, style=style, head="<h>", tail="<t>") == render_information(
        window, 10_000, style=style, cache={}, head="<h>", tail="<t>"
    )


def test_truncate_words_with_a_tokenizer_callback() -> None:
    # a "tokenizer" counting characters: the longest word prefix within 12 characters
    assert truncate_words("alpha beta gamma delta", 12, count_tokens=len) == "alpha beta"
    assert truncate_words("alpha beta", 100, count_tokens=len) == "alpha beta"
    assert truncate_words("alphabetagamma", 3, count_tokens=len) == ""


def test_s3_prompt_has_figure_11_question_and_initial_information() -> None:
    p = build_s3_prompt("What year was the film made?", render_information(DOCS), max_select=3)
    assert p.startswith("You are a search copilot for a generation model.")
    assert "(up to 3 documents, within the current information window)" in p
    assert "Only the content between <important_info> will be used by the generation model" in p
    assert "[An abstractive example of s3 loop]" in p
    assert p.rstrip().endswith(
        "<question>\nWhat year was the film made?\n</question>\n<information>\n"
        + render_information(DOCS)
        + "</information>"
    )
    assert "{max_select}" in S3_INSTRUCTION and "{max_select}" not in p
    no_d0 = build_s3_prompt("Q?", None)
    assert no_d0.rstrip().endswith("<question>\nQ?\n</question>")


def test_parse_table7_first_and_second_replies() -> None:
    # Table 7: the first reply judges D0 without <important_info> and searches again
    a = parse_s3_reply(
        '<search_complete> False </search_complete>\n<query> {"query": "What year was the film made about the '
        'inventor of Earthship?"} </query>',
        window_size=3,
    )
    assert a.is_valid and a.wants_search
    assert a.query == "What year was the film made about the inventor of Earthship?"
    assert a.selected is None and a.search_complete is False
    b = parse_s3_reply("<important_info>[1, 2]</important_info>\n<search_complete> True </search_complete>", 3)
    assert b.is_valid and not b.wants_search and b.selected == (1, 2) and b.search_complete is True


@pytest.mark.parametrize(
    ("raw", "value"),
    [("True", True), (" false ", False), ("1", True), ("0", False), ("TRUE", True), (" [0] ", False), ("1/0", None), ("maybe", None)],
)
def test_search_complete_values(raw: str, value: bool | None) -> None:
    assert parse_bool(raw) is value
    a = parse_s3_reply(f"<search_complete>{raw}</search_complete>", 3)
    assert a.search_complete is value


def test_query_forms() -> None:
    assert parse_s3_reply('<query>{"query": "a  b"}</query>', 0).query == "a b"
    assert parse_s3_reply("<query>raw words here</query>", 0).query == "raw words here"
    assert parse_s3_reply('<query>{"query": ["first", "second"]}</query>', 0).query == "first"
    assert parse_s3_reply('<query>{"q": "other key"}</query>', 0).query == "other key"
    assert parse_s3_reply('<query>```json\n{"query": "fenced"}\n```</query>', 0).query == "fenced"
    # cut by the stop string before the JSON closed
    assert parse_s3_reply('<query>{"query": "half written', 0).query == "half written"
    assert parse_s3_reply('<query>"just a string"</query>', 0).query == "just a string"


def test_selection_ids_refer_to_the_current_window() -> None:
    a = parse_s3_reply("<important_info>[Doc 2, 7, 0, 2, 3]</important_info><search_complete>True</search_complete>", 3)
    assert a.selected == (2, 3)
    assert a.dropped_ids == (7, 0)
    assert a.notes and "dropped ids" in a.notes[0]
    many = parse_s3_reply("<important_info>[1,2,3,4]</important_info><search_complete>1</search_complete>", 8, max_select=3)
    assert many.selected == (1, 2, 3) and many.dropped_ids == (4,)
    empty = parse_s3_reply("<important_info>[]</important_info><search_complete>True</search_complete>", 3)
    assert empty.selected == ()  # an explicit empty selection, not "no tag"


def test_invalid_actions_say_what_was_wrong() -> None:
    assert parse_s3_reply("I think the answer is 2007.", 3).invalid_reason == "no <query> and no <search_complete> tag"
    assert parse_s3_reply("<search_complete>False</search_complete>", 3).invalid_reason == "search not complete but no <query>"
    assert parse_s3_reply("<search_complete>False</search_complete><query>  </query>", 3).invalid_reason == "empty <query>"
    # a query without a stop flag is a valid search (upstream behaviour)
    assert parse_s3_reply('<query>{"query": "x"}</query>', 3).wants_search
    # complete wins over a query
    both = parse_s3_reply('<search_complete>True</search_complete><query>{"query": "x"}</query>', 3)
    assert both.is_valid and not both.wants_search
    obs = invalid_observation("empty <query>")
    assert "empty <query>" in obs and "<query>" in obs and "<search_complete>True</search_complete>" in obs


def test_think_is_optional_and_parsed() -> None:
    a = parse_s3_reply('<think>need the year</think><query>{"query": "Garbage Warrior"}</query>', 3)
    assert a.think == "need the year" and a.query == "Garbage Warrior"


def test_information_observation_shape() -> None:
    assert information_observation("Doc 1 (Title: A) x\n") == "\n\n<information>\nDoc 1 (Title: A) x\n</information>\n\n"


def test_search_r1_grammar() -> None:
    p = build_search_r1_prompt("who wrote it")
    assert p.startswith("Answer the given question. You must conduct reasoning inside <think> and </think>")
    assert p.rstrip().endswith("Question: who wrote it?")
    s = parse_search_r1_reply("<think>x</think>\n<search> Garbage Warrior year </search>")
    assert s.query == "Garbage Warrior year" and s.answer is None and s.think == "x"
    a = parse_search_r1_reply("<think>done</think><answer> 2007 </answer>")
    assert a.answer == "2007" and a.query is None
    assert parse_search_r1_reply("no tags").invalid_reason == "no <search> or <answer> tag"
    assert parse_search_r1_reply("<search></search>").invalid_reason == "empty <search>"
    # whichever action comes first wins
    assert parse_search_r1_reply("<answer>a</answer><search>q</search>").answer == "a"


# ---------------------------------------------------------------------------------------------------- properties
_FRAGMENTS = [
    "<query>", "</query>", "<important_info>", "</important_info>", "<search_complete>", "</search_complete>",
    "<think>", "</think>", "<information>", "</information>", "[", "]", ",", "{", "}", '"query"', ":", '"',
    "True", "False", "1", "0", "-3", "99999999999999999999", " ", "\n", "Doc 2", "null", "[1/0]",
]
replies = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=8), max_size=40).map("".join),
)


@settings(max_examples=400, deadline=None)
@given(text=replies, window=st.integers(min_value=0, max_value=12), max_select=st.integers(min_value=1, max_value=5))
def test_parser_never_raises_keeps_ids_in_range_and_is_deterministic(text: str, window: int, max_select: int) -> None:
    a = parse_s3_reply(text, window, max_select)
    assert a == parse_s3_reply(text, window, max_select)
    if a.selected is not None:
        assert all(1 <= i <= window for i in a.selected)
        assert len(a.selected) <= max_select
        assert len(set(a.selected)) == len(a.selected)
    # valid <=> stop, or a non-empty query
    assert a.is_valid == (a.search_complete is True or bool(a.query))
    if not a.is_valid:
        assert a.invalid_reason
    assert a.query is None or a.query == " ".join(a.query.split())
    r1 = parse_search_r1_reply(text)
    assert r1 == parse_search_r1_reply(text)
    assert r1.is_valid == (r1.query is not None or r1.answer is not None)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), budget=st.integers(min_value=1, max_value=50))
def test_truncate_words_respects_the_budget(text: str, budget: int) -> None:
    out = truncate_words(text, budget)
    assert len(out.split()) <= budget
    assert out.split() == text.split()[: len(out.split())]


@given(st.text(alphabet=st.characters(blacklist_characters='"\\<'), max_size=60))
@settings(max_examples=300, deadline=None)
def test_the_plain_json_query_fast_path_agrees_with_json_parsing(q: str) -> None:
    from searcher.protocol import _query_from

    raw = '{"query": "' + q + '"}'
    action = parse_s3_reply(f"<search_complete>False</search_complete><query>{raw}</query>", 3)
    assert action.query == (_query_from(raw) or None)


_ids = st.lists(st.integers(min_value=-3, max_value=40), max_size=6).map(lambda xs: "[" + ", ".join(map(str, xs)) + "]")
_flag = st.sampled_from(["True", "False", "true", "false", "1", "0", " False ", "TRUE", "yes", "maybe"])
_query = st.one_of(
    st.none(), st.text(max_size=30).map(lambda q: '<query>{"query": "' + q + '"}</query>'),
    st.sampled_from(['<query>{"query": ""}</query>', "<query>raw words</query>", '<query>{"q": "x"}</query>']),
)
_pad = st.sampled_from(["", "\n", " ", "\n\n", "<think>hm</think>", "junk"])


@given(_pad, _ids, _pad, _flag, _pad, _query, _pad, st.integers(0, 10), st.integers(1, 4))
@settings(max_examples=500, deadline=None)
def test_the_canonical_reply_fast_path_agrees_with_the_general_parser(
    a: str, ids: str, b: str, flag: str, c: str, query: str | None, d: str, window: int, max_select: int
) -> None:
    from searcher.protocol import _parse_s3_general

    text = f"{a}<important_info>{ids}</important_info>{b}<search_complete>{flag}</search_complete>{c}{query or ''}{d}"
    assert parse_s3_reply(text, window, max_select) == _parse_s3_general(text, window, max_select)
