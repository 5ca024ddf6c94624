"""The s3 tag grammar (s3 paper, Appendix C Figure 11, Table 7, Appendix A.5) and the Search-R1 template.

Everything here is pure text: building the searcher prompt, rendering an `<information>` window, and parsing what the
policy wrote into a typed action. Parsing is tolerant and never raises: a malformed reply becomes an action whose
`invalid_reason` says what was wrong, and the agent turns that into an observation the policy can recover from.

The s3 loop as the policy sees it (one reply per window; ids in `<important_info>` refer to the window just shown)::

    <question> ... </question>
    <information> Doc 1 (Title: ...) ... </information>          <- D0, begin-with-search (top-k0 of the question)
    <important_info>[1]</important_info>                         <- policy: selection from D0 (optional, A.5)
    <search_complete>False</search_complete>                     <- policy: stop flag
    <query>{"query": "..."}</query>                              <- policy: next query
    <information> Doc 1 (Title: ...) ... </information>          <- environment: window of the new query
    <important_info>[1, 2]</important_info>
    <search_complete>True</search_complete>
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from s3core.types import Document

__all__ = [
    "S3_EXAMPLE",
    "S3_INSTRUCTION",
    "S3_STOP",
    "SEARCH_R1_INSTRUCTION",
    "SEARCH_R1_STOP",
    "S3Action",
    "SearchR1Action",
    "build_s3_prompt",
    "build_search_r1_prompt",
    "information_observation",
    "invalid_observation",
    "parse_bool",
    "parse_queries",
    "parse_s3_reply",
    "parse_search_r1_reply",
    "render_information",
    "search_r1_invalid_observation",
    "search_required_observation",
    "truncate_words",
]

# Figure 11 of the s3 paper, verbatim (the paper's single-line rendering broken at its sentences).
S3_INSTRUCTION = (
    "You are a search copilot for a generation model. Based on a user's query and initial searched results, you will "
    "first determine if the searched results are enough to produce an answer.\n"
    "If the searched results are enough, you will use <search_complete>True</search_complete> to indicate that you "
    "have gathered enough information for the generation model to produce an answer.\n"
    "If the searched results are not enough, you will go through a loop of <query> -> <information> -> "
    "<important_info> -> <search_complete> -> <query> (if not complete) ..., to help the generation model to generate "
    "a better answer with more relevant information searched.\n"
    "You should show the search query between <query> and </query> in JSON format.\n"
    "Based on the search query, we will return the top searched results between <information> and </information>. "
    "You need to put the doc ids of the important documents (up to {max_select} documents, within the current "
    "information window) between <important_info> and </important_info> (e.g., <important_info>[1, 4]</important_info>).\n"
    "A search query must be followed by a <search_complete> tag if the search is not complete.\n"
    "After reviewing the information, you must decide whether to continue searching with a new query or indicate that "
    "the search is complete. If you need more information, use <search_complete>False</search_complete>. Otherwise, "
    "use <search_complete>True</search_complete> to terminate the search.\n"
    "Note: Only the content between <important_info> will be used by the generation model to produce an answer.\n"
)

_QUERY_LINE = "You should show the search query between <query> and </query> in JSON format.\n"
# searcher.queries_per_turn > 1 (not in the paper): several candidate queries in one turn, one window for all of them
MULTI_QUERY_NOTE = (
    'You may give up to {n} search queries at once as a JSON list, e.g. <query>{"query": ["[query 1]", "[query 2]"]}'
    "</query>; their top results come back together in one information window.\n"
)

# "[An abstractive example of s3 loop]" (Figure 11), shaped like Table 7 of the paper.
S3_EXAMPLE = (
    "[An abstractive example of s3 loop]\n"
    "<question>\n[user's question]\n</question>\n"
    "<information>\nDoc 1 (Title: [title]) [text]\nDoc 2 (Title: [title]) [text]\nDoc 3 (Title: [title]) [text]\n"
    "</information>\n"
    "<important_info>[1]</important_info>\n"
    "<search_complete>False</search_complete>\n"
    '<query>{"query": "[a focused search query]"}</query>\n'
    "<information>\nDoc 1 (Title: [title]) [text]\nDoc 2 (Title: [title]) [text]\n...\n</information>\n"
    "<important_info>[1, 2]</important_info>\n"
    "<search_complete>True</search_complete>\n"
)

# The policy stops after a query (the environment then inserts <information>) or if it starts to invent one.
S3_STOP = ("</query>", "<information>")

# Table 1 of the Search-R1 paper.
SEARCH_R1_INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query "
    "</search>, and it will return the top searched results between <information> and </information>. You can search "
    "as many times as you want. If you find no further external knowledge needed, you can directly provide the answer "
    "inside <answer> and </answer> without detailed illustrations. For example, <answer> xxx </answer>. "
    "Question: {question}\n"
)
SEARCH_R1_STOP = ("</search>", "</answer>", "<information>")


# ----------------------------------------------------------------------------------------------------------- rendering
def truncate_words(text: str, budget: int | None, count_tokens: Callable[[str], int] | None = None) -> str:
    """Cut `text` to at most `budget` tokens, whole words only.

    Tokens are whitespace words unless `count_tokens` (e.g. `lambda s: len(tokenizer.encode(s))`) is given; then the
    longest word prefix whose token count fits is kept (binary search, O(log n) tokenizer calls).

    >>> truncate_words("a b c d e", 3)
    'a b c'
    >>> truncate_words("a b", None)
    'a b'
    """
    if budget is None:
        return text
    words = text.split()
    if count_tokens is None:
        return text if len(words) <= budget else " ".join(words[:budget])
    if count_tokens(text) <= budget:
        return text
    lo, hi = 0, len(words)  # invariant: words[:lo] fits, words[:hi+1] does not (or hi = len)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def render_information(
    docs: Sequence[Document],
    doc_token_budget: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    style: str = "s3",
    cache: dict[str, tuple[str, str]] | None = None,
    *,
    head: str = "",
    tail: str = "",
) -> str:
    """Render a window of documents, one per line, numbered from 1: `Doc i (Title: ...) text`.

    `style="search_r1"` writes Search-R1's `Doc i(Title: ...) text` (no space). Titles are never truncated; the text
    is cut to `doc_token_budget` tokens (see `truncate_words`); newlines inside a title or text become spaces.
    `cache` (a dict owned by the caller, used with one budget and one `count_tokens` only) keeps each document's cut
    line body across windows: the same passages come back in every rollout of a group, and cutting to a tokenizer
    budget costs O(log n) tokenizer calls. Whole passages (no budget) are not cached: their line is written straight
    from the document's own strings, one copy in the final join (cheaper than a cache lookup once the cache is cold,
    as it is for every new passage; benchmarks/results/rollout.md).
    `head` / `tail` are written before / after the lines in the same join (the search loop wraps every window in
    `<information>` tags this way: one copy of the window's text instead of three).

    >>> from s3core.types import Document
    >>> print(render_information([Document(id="a", title="Earthship", text="An Earthship is a house")], 3), end="")
    Doc 1 (Title: Earthship) An Earthship is
    """
    sep = "" if style == "search_r1" else " "
    prefixes = _DOC_PREFIXES[sep]
    parts: list[str] = [head] if head else []
    if doc_token_budget is None:
        for i, d in enumerate(docs):
            title, text = d.title, d.text
            if "\n" in title:
                title = title.replace("\n", " ")
            if "\n" in text:
                text = text.replace("\n", " ")
            text = text.strip()  # strip() returns the string itself when there is nothing to strip: no copy
            prefix = prefixes[i] if i < len(prefixes) else f"Doc {i + 1}{sep}"
            parts += (prefix, "(Title: ", title.strip(), ") " if text else ")", text, "\n")  # = _line_body's line
    else:
        if cache is None:
            cache = {}
        add = parts.append
        for i, d in enumerate(docs):
            hit = cache.get(d.id)
            if hit is not None and hit[0] == d.text:  # same id, same text (ids need not be content hashes)
                body = hit[1]
            else:
                body = _line_body(d, doc_token_budget, count_tokens)
                cache[d.id] = (d.text, body)
            add(prefixes[i] if i < len(prefixes) else f"Doc {i + 1}{sep}")
            add(body)
    if tail:
        parts.append(tail)
    return "".join(parts)


# "Doc i " (s3) and "Doc i" (Search-R1) for the first 32 documents of a window, built once, not per line
_DOC_PREFIXES = {sep: tuple(f"Doc {i}{sep}" for i in range(1, 33)) for sep in (" ", "")}


def _line_body(d: Document, doc_token_budget: int | None, count_tokens: Callable[[str], int] | None) -> str:
    """`(Title: t) text` + newline: one line per document, the text cut to the budget, the title never."""
    text, title = d.text, d.title
    text = text.replace("\n", " ").strip() if "\n" in text else text.strip()
    if doc_token_budget is not None:
        text = truncate_words(text, doc_token_budget, count_tokens)
    title = title.replace("\n", " ").strip() if "\n" in title else title.strip()
    return f"(Title: {title}) {text}\n" if text else f"(Title: {title})\n"


def build_s3_prompt(question: str, initial_information: str | None, max_select: int = 3,
                    queries_per_turn: int = 1) -> str:
    """The searcher prompt of Figure 11: instruction, the abstractive loop example, `<question>` and (with
    begin-with-search) the initial `<information>` window D0. With `queries_per_turn` > 1 the instruction says once
    that a query may be a JSON list of up to that many (MULTI_QUERY_NOTE); at 1 it is the paper's, unchanged."""
    head = f"{_s3_prompt_head(max_select, queries_per_turn)}<question>\n{question.strip()}\n</question>\n"
    if initial_information is None:
        return head
    return f"{head}<information>\n{initial_information}</information>\n"


@functools.lru_cache(maxsize=16)
def _s3_prompt_head(max_select: int, queries_per_turn: int = 1) -> str:
    """The fixed part of the s3 prompt before the question (built once per setting: it is ~4 KB)."""
    instruction = S3_INSTRUCTION.replace("{max_select}", str(max_select))
    if queries_per_turn > 1:
        instruction = instruction.replace(_QUERY_LINE, _QUERY_LINE + MULTI_QUERY_NOTE.replace("{n}", str(queries_per_turn)))
    return "".join([
        instruction, "\n", S3_EXAMPLE, "\n",
        "Now, start the loop with the following question and initial searched results:\n\n",
    ])


def s3_prompt_sha256(max_select: int = 3, queries_per_turn: int = 1) -> str:
    """sha256 of the fixed s3 prompt head (instruction + example) for these settings: what a trained searcher saw."""
    return hashlib.sha256(_s3_prompt_head(max_select, queries_per_turn).encode("utf-8")).hexdigest()


def build_search_r1_prompt(question: str) -> str:
    """The Search-R1 template (Table 1)."""
    q = question.strip()
    if q and q[-1] != "?":
        q += "?"
    return SEARCH_R1_INSTRUCTION.replace("{question}", q)


# The wrapping of an s3 window: upstream spacing in a token trajectory; a chat message carries it without the blank
# lines around it (the message boundary separates it from the reply). information_observation() = HEAD + lines + TAIL.
INFORMATION_HEAD, INFORMATION_TAIL = "\n\n<information>\n", "</information>\n\n"
INFORMATION_CHAT_HEAD, INFORMATION_CHAT_TAIL = "<information>\n", "</information>"


def information_observation(rendered: str) -> str:
    """What the environment inserts after a query: the retrieved window (upstream spacing)."""
    return f"{INFORMATION_HEAD}{rendered}{INFORMATION_TAIL}"


def invalid_observation(reason: str) -> str:
    """What the environment inserts after an invalid s3 action: what was wrong and how to write a valid one."""
    return (
        f"\n\nThe previous output was not a valid action ({reason}). Give a new search query between <query> and "
        '</query> in JSON format, e.g. <query>{"query": "..."}</query>, or <search_complete>True</search_complete> '
        "if the information is enough.\n\n"
    )


def search_required_observation(min_turns: int) -> str:
    """What the environment inserts when the policy stops before `min_turns` searches (SearcherConfig.min_turns).
    Worded as a direct request: the untrained 0.5B model answers the generic invalid-action message with
    <search_complete>True</search_complete> again, but writes a query after this one."""
    return (
        f"\n\nYou must search before stopping (at least {min_turns} search turn(s)). Reply with only a search query "
        'for the missing information, in this format:\n<query>{"query": "..."}</query>\n\n'
    )


def search_r1_invalid_observation(reason: str) -> str:
    """Search-R1's recovery message for an invalid action (upstream wording, with the reason)."""
    return (
        f"\nMy previous action is invalid ({reason}). If I want to search, I should put the query between <search> "
        "and </search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
        "Let me try again.\n"
    )


# ------------------------------------------------------------------------------------------------------------- parsing
_TRUE = {"true", "1", "yes", "y"}
_FALSE = {"false", "0", "no", "n"}


def parse_bool(raw: str) -> bool | None:
    """`True`/`False`/`1`/`0`/`yes`/`no` in any case, with spaces, quotes or brackets around; None otherwise.

    >>> parse_bool(" False "), parse_bool("[1]"), parse_bool("TRUE"), parse_bool("1/0")
    (False, True, True, None)
    """
    v = raw.strip().strip("[](){}\"'`.").strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    return None


_TAGS = {n: (f"<{n}>", f"</{n}>") for n in ("think", "important_info", "search_complete", "query", "search", "answer")}


def _tag(text: str, name: str) -> str | None:
    """Content of the first `<name>...</name>`; an unclosed tag runs to the next tag or the end. None if absent."""
    open_tag, close_tag = _TAGS.get(name) or (f"<{name}>", f"</{name}>")
    start = text.find(open_tag)
    if start < 0:
        return None
    start += len(open_tag)
    end = text.find(close_tag, start)
    if end < 0:
        nxt = text.find("<", start)
        end = nxt if nxt >= 0 else len(text)
    return text[start:end]


def _query_from(raw: str) -> str:
    """A query from `<query>` content: JSON {"query": ...} (string, or list -> first string), a JSON string, or raw."""
    qs = parse_queries(raw)
    return qs[0] if qs else ""


def parse_queries(raw: str) -> list[str]:
    """Every query of `<query>` content, in order: a JSON list under "query" gives each of its strings once (compared
    without case, empty ones dropped); anything else gives the one query `_query_from` reads (or none if empty)."""
    s = raw.strip()
    if s.startswith("```"):
        s = s.strip("`").strip()
        if s.lower().startswith("json"):
            s = s[4:].strip()
    try:
        data = json.loads(s)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        q = data.get("query")
        if isinstance(q, list):
            return _unique(x for x in q if isinstance(x, str))
        if q is None:
            # {"q": "..."} or other key: take the first string value
            q = next((v for v in data.values() if isinstance(v, str)), "")
        return _one(q if isinstance(q, str) else str(q))
    if isinstance(data, str):
        return _one(data)
    # a half-written list `{"query": ["A", "B", "C` (the reply ran out of tokens) yields its closed strings, A and B
    lm = _LIST_HEAD.match(s)
    if lm:
        return _unique(x.group(1) for x in _CLOSED_STRING.finditer(s, lm.end()))
    # raw text; a half-written JSON object `{"query": "abc` still yields abc
    m = re.match(r'^\{\s*"query"\s*:\s*"(.*?)"?\s*\}?\s*$', s, re.DOTALL)
    if m:
        s = m.group(1)
    return _one(s)


_LIST_HEAD = re.compile(r'\{\s*"query"\s*:\s*\[')
_CLOSED_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _unique(queries: Iterable[str]) -> list[str]:
    """Queries with their whitespace collapsed, each once (compared without case), empty ones dropped, in order."""
    out: list[str] = []
    seen: set[str] = set()
    for q in queries:
        q = " ".join(q.split())
        if q and q.casefold() not in seen:
            seen.add(q.casefold())
            out.append(q)
    return out


def _one(q: str) -> list[str]:
    q = " ".join(q.split())
    return [q] if q else []


_INT = re.compile(r"\d+")


class S3Action(NamedTuple):
    """One parsed s3 reply (immutable; a NamedTuple because the loop builds one per reply of every rollout).

    selected: 1-based ids into the CURRENT window (valid, deduplicated, in the order written, at most max_select);
    None when the reply has no `<important_info>` tag (then Appendix A.5 or `no_selection` decides).
    dropped_ids: ids that were out of range or beyond max_select.
    invalid_reason: None for a valid action (a query, or search_complete True); otherwise what was wrong.
    queries: every query of a reply that wrote a JSON list (`{"query": ["A", "B"]}`; `query` is its first), each once;
    () for a single query. The loop searches more than the first only with searcher.queries_per_turn > 1.
    """

    query: str | None = None
    selected: tuple[int, ...] | None = None
    search_complete: bool | None = None
    think: str | None = None
    dropped_ids: tuple[int, ...] = ()
    invalid_reason: str | None = None
    notes: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()

    @property
    def is_valid(self) -> bool:
        return self.invalid_reason is None

    @property
    def wants_search(self) -> bool:
        return self.invalid_reason is None and self.search_complete is not True and bool(self.query)


_SIMPLE_QUERY = re.compile(r'\{\s*"query"\s*:\s*"([^"\\]*)"\s*\}')  # the common exact form: no json.loads needed


# The reply a well-trained policy writes, matched in one pass: selection, stop flag and, optionally, a plain JSON
# query. Anything else (think, raw queries, escapes, missing tags, ...) goes through the general parser below.
_CANONICAL = re.compile(
    r'\s*<important_info>\[([\d,\s]*)\]</important_info>\s*'
    r"<search_complete>\s*(True|False|true|false|1|0)\s*</search_complete>\s*"
    r'(?:<query>\s*\{\s*"query"\s*:\s*"([^"\\<>]*)"\s*\}\s*</query>\s*)?'
)


def parse_s3_reply(text: str, window_size: int, max_select: int = 3) -> S3Action:
    """Parse what the policy wrote after seeing a window of `window_size` documents. Never raises.

    >>> parse_s3_reply('<important_info>[1, 9]</important_info><search_complete> False </search_complete>'
    ...                '<query>{"query": "Garbage Warrior film year"}</query>', window_size=3)
    S3Action(query='Garbage Warrior film year', selected=(1,), search_complete=False, think=None, dropped_ids=(9,), invalid_reason=None, notes=('dropped ids [9]: window has 3 documents, at most 3 may be selected',), queries=())
    """
    m = _CANONICAL.fullmatch(text) if isinstance(text, str) else None
    if m is not None:  # the common case, same result as the general parser (test_protocol checks they agree)
        imp, flag, query = m.groups()
        complete = flag in _TRUE_FLAGS
        if query is not None:
            query = " ".join(query.split())
        if complete or query:
            # a selection is a few short ids ("1", "1, 2"): the same handful of strings recur in every batch
            sel = _selection_memo(imp, window_size, max_select) if len(imp) <= 24 else _selection(imp, window_size, max_select)
            return S3Action(query or None, sel[0], complete, None, sel[1], None, sel[2])
    return _parse_s3_general(text, window_size, max_select)


_TRUE_FLAGS = frozenset(("True", "true", "1"))  # the true values _CANONICAL admits


def _selection(imp: str, window_size: int, max_select: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]:
    """`<important_info>` content -> (kept ids, dropped ids, notes): ids in range, deduplicated, at most max_select."""
    keep: list[int] = []
    dropped: list[int] = []
    for tok in _INT.findall(imp):
        n = int(tok) if len(tok) <= 9 else -1
        if 1 <= n <= window_size and n not in keep and len(keep) < max_select:
            keep.append(n)
        elif n not in keep and n not in dropped:
            dropped.append(n)
    if not dropped:
        return tuple(keep), (), ()
    note = f"dropped ids {dropped}: window has {window_size} documents, at most {max_select} may be selected"
    return tuple(keep), tuple(dropped), (note,)


_selection_memo = functools.lru_cache(maxsize=1024)(_selection)  # pure, returns tuples: safe to share


def _parse_s3_general(text: str, window_size: int, max_select: int) -> S3Action:
    """Any reply, however malformed: each tag found on its own (see `_tag`), what is wrong said in invalid_reason."""
    if not isinstance(text, str):
        text = str(text)
    think: str | None = None
    if "<think>" in text:
        think_raw = _tag(text, "think")
        think = think_raw.strip() if think_raw is not None else None

    # <important_info>
    selected: tuple[int, ...] | None = None
    dropped: tuple[int, ...] = ()
    notes: list[str] = []
    imp = _tag(text, "important_info")
    if imp is not None:
        selected, dropped, sel_notes = _selection(imp, window_size, max_select)
        notes.extend(sel_notes)

    # <search_complete>
    complete: bool | None = None
    sc = _tag(text, "search_complete")
    if sc is not None:
        complete = parse_bool(sc)
        if complete is None:
            notes.append(f"unreadable <search_complete> value {sc.strip()[:40]!r}")

    # <query>
    query: str | None = None
    queries: tuple[str, ...] = ()
    q_raw = _tag(text, "query")
    if q_raw is not None:
        qm = _SIMPLE_QUERY.fullmatch(q_raw.strip())
        if qm:
            query = " ".join(qm.group(1).split()) or None
        else:
            qs = parse_queries(q_raw)
            query = qs[0] if qs else None
            if len(qs) > 1:
                queries = tuple(qs)

    reason: str | None = None
    if complete is True:
        pass
    elif q_raw is None and sc is None:
        reason = "no <query> and no <search_complete> tag"
    elif q_raw is None:
        reason = "search not complete but no <query>" if complete is False else "unreadable <search_complete> and no <query>"
    elif not query:
        reason = "empty <query>"
    return S3Action(query, selected, complete, think, dropped, reason, tuple(notes), queries)


@dataclass(frozen=True)
class SearchR1Action:
    """One parsed Search-R1 reply: a search query, or a final answer, or invalid."""

    query: str | None = None
    answer: str | None = None
    think: str | None = None
    invalid_reason: str | None = None

    @property
    def is_valid(self) -> bool:
        return self.invalid_reason is None


def parse_search_r1_reply(text: str) -> SearchR1Action:
    """Parse a Search-R1 reply (`<think>`, then `<search>q</search>` or `<answer>a</answer>`). Never raises.

    >>> parse_search_r1_reply("<think>need year</think><search> Garbage Warrior </search>").query
    'Garbage Warrior'
    """
    if not isinstance(text, str):
        text = str(text)
    think_raw = _tag(text, "think")
    think = think_raw.strip() if think_raw is not None else None
    s_pos = text.find("<search>")
    a_pos = text.find("<answer>")
    # whichever comes first is the action (upstream takes the first match of either)
    if a_pos >= 0 and (s_pos < 0 or a_pos < s_pos):
        ans = (_tag(text, "answer") or "").strip()
        if not ans:
            return SearchR1Action(think=think, invalid_reason="empty <answer>")
        return SearchR1Action(answer=ans, think=think)
    if s_pos >= 0:
        q = " ".join((_tag(text, "search") or "").split())
        if not q:
            return SearchR1Action(think=think, invalid_reason="empty <search>")
        return SearchR1Action(query=q, think=think)
    return SearchR1Action(think=think, invalid_reason="no <search> or <answer> tag")
