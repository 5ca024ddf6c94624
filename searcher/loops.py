"""The agent protocols of the one lockstep loop (searcher/agent.py): what differs between the s3 searcher and the
Search-R1 agent, as one small object each.

The loop (batching, token masks, retrieval, timing, step records) is the same for every agent; a `LoopProtocol` says

    stop, begins_with_search, turn_k     how the policy is cut off, and what a search turn retrieves
    first_prompt, observation            the prompt, and the text inserted after a search
    decide                               a reply parsed into an action: the next query, a correction, or the end
    keeps_read, Decision.admit/.answer   what the result is: the documents selected (s3) or every window read plus
                                         the agent's own answer (Search-R1)

A new agent protocol is one more class here (its tag grammar in searcher/protocol.py), handed to `S3Searcher(...,
protocol=...)` or set as a searcher class's `protocol`, as `SearchR1Agent` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from s3core.types import Document, SearchStep
from searcher.config import SearcherConfig
from searcher.protocol import (
    INFORMATION_CHAT_HEAD,
    INFORMATION_CHAT_TAIL,
    INFORMATION_HEAD,
    INFORMATION_TAIL,
    S3_STOP,
    SEARCH_R1_STOP,
    build_s3_prompt,
    build_search_r1_prompt,
    invalid_observation,
    parse_s3_reply,
    parse_search_r1_reply,
    search_r1_invalid_observation,
    search_required_observation,
)

__all__ = ["DONE", "S3_LOOP", "SEARCH_R1_LOOP", "Decision", "LoopProtocol", "Render", "S3Loop", "SearchR1Loop"]

Render = Callable[..., str]
"""`searcher.protocol.render_information` with one call's document budget, token counter and line cache bound:
`render(docs, style=..., head=..., tail=...)`."""


class Decision(NamedTuple):
    """What the loop does with a question after a reply (immutable: one per reply, so a NamedTuple)."""

    query: str | None = None  # the next search (first field: positional on the hot path)
    done: bool = False
    observation: str | None = None  # inserted when the action was invalid: what the policy should fix
    queries: tuple[str, ...] = ()  # several queries of one turn (searcher.queries_per_turn > 1), `query` their first
    admit: Sequence[Document] = ()  # documents the reply adds to the result (deduplicated, at most #MaxContexts)
    answer: str | None = None  # the agent's own answer (Search-R1)


DONE = Decision(done=True)


class LoopProtocol(Protocol):
    """What one agent makes of the loop. `decide` may write the reply's fields of `step` (search_complete,
    invalid_reason, selected_ids, selection_fallback); the loop writes every other field."""

    stop: tuple[str, ...]  # the policy's stop strings
    keeps_read: bool  # the result's documents are every window the policy read (uncapped), not only its selections

    def begins_with_search(self, cfg: SearcherConfig) -> bool:
        """Whether turn 0 retrieves the question's top-k0 and shows it in the first prompt."""
        ...

    def turn_k(self, cfg: SearcherConfig, k0: int) -> int:
        """How many documents a search turn retrieves."""
        ...

    def first_prompt(self, question: str, d0: Sequence[Document] | None, cfg: SearcherConfig, render: Render) -> str:
        """The first user message (`d0`: the begin-with-search documents, None without them)."""
        ...

    def observation(self, window: Sequence[Document], render: Render, token_mode: bool) -> str:
        """The text the environment inserts after a search (`token_mode`: a token policy, else a chat message)."""
        ...

    def decide(self, text: str, window: Sequence[Document], step: SearchStep, steps: Sequence[SearchStep],
               cfg: SearcherConfig, last_turn: bool) -> Decision:
        """A reply (`text`, to `window`, judged in `step`; `steps`: the question's earlier steps) as the loop's next
        move. After the last turn's reply the loop ends whatever is decided."""
        ...


class S3Loop:
    """The s3 searcher (s3 paper §3.1, Appendix A.5): begin-with-search, `<important_info>` selects from the window
    (or, without it, `no_selection` decides), `<search_complete>` stops, `<query>` asks the next search; the result's
    documents are the selected ones."""

    stop: tuple[str, ...] = S3_STOP
    keeps_read: bool = False

    def begins_with_search(self, cfg: SearcherConfig) -> bool:
        return cfg.begin_with_search

    def turn_k(self, cfg: SearcherConfig, k0: int) -> int:
        return cfg.k

    def first_prompt(self, question: str, d0: Sequence[Document] | None, cfg: SearcherConfig, render: Render) -> str:
        return build_s3_prompt(question, render(d0) if d0 is not None else None, cfg.max_select, cfg.queries_per_turn)

    def observation(self, window: Sequence[Document], render: Render, token_mode: bool) -> str:
        """The rendered window wrapped in <information> tags, built in one join (a chat message gets it without the
        surrounding blank lines, which the loop would strip)."""
        head, tail = (INFORMATION_HEAD, INFORMATION_TAIL) if token_mode else (INFORMATION_CHAT_HEAD, INFORMATION_CHAT_TAIL)
        return render(window, head=head, tail=tail)

    def decide(self, text: str, window: Sequence[Document], step: SearchStep, steps: Sequence[SearchStep],
               cfg: SearcherConfig, last_turn: bool) -> Decision:
        action = parse_s3_reply(text, len(window), cfg.max_select)
        step.search_complete = action.search_complete
        step.invalid_reason = action.invalid_reason
        admit: Sequence[Document] = ()
        if action.selected is not None:  # selection over the current window (Appendix A.5 when there is none)
            admit = [window[i - 1] for i in action.selected]
            step.selected_ids = [d.id for d in admit]
        elif window and cfg.no_selection == "all":
            admit = window
            step.selected_ids = [d.id for d in window]
            step.selection_fallback = True
        if last_turn:
            return Decision(done=True, admit=admit)
        if action.search_complete is True:
            if cfg.min_turns:
                searched = sum(1 for s in steps if s.turn > 0 and s.query is not None) + (step.turn > 0 and step.query is not None)
                if searched < cfg.min_turns:
                    step.invalid_reason = f"search_complete before the minimum of {cfg.min_turns} search turn(s)"
                    return Decision(observation=search_required_observation(cfg.min_turns), admit=admit)
            return Decision(done=True, admit=admit)
        if action.wants_search:
            if action.queries and cfg.queries_per_turn > 1:
                return Decision(action.query, queries=action.queries[: cfg.queries_per_turn], admit=admit)
            return Decision(action.query, admit=admit)
        return Decision(observation=invalid_observation(action.invalid_reason or "no action"), admit=admit)


class SearchR1Loop:
    """Search-R1 end to end (search-r1.md Table 1): no begin-with-search (the template starts from the bare question),
    every search retrieves top-k0 (Search-R1's topk, 3), `<search>` asks, `<answer>` ends with the agent's answer;
    the result's documents are every document it read. After `max_turns` searches the last reply can only answer."""

    stop: tuple[str, ...] = SEARCH_R1_STOP
    keeps_read: bool = True

    def begins_with_search(self, cfg: SearcherConfig) -> bool:
        return False

    def turn_k(self, cfg: SearcherConfig, k0: int) -> int:
        return k0

    def first_prompt(self, question: str, d0: Sequence[Document] | None, cfg: SearcherConfig, render: Render) -> str:
        return build_search_r1_prompt(question)

    def observation(self, window: Sequence[Document], render: Render, token_mode: bool) -> str:
        return f"\n\n<information>{render(window, style='search_r1').strip()}</information>\n\n"

    def decide(self, text: str, window: Sequence[Document], step: SearchStep, steps: Sequence[SearchStep],
               cfg: SearcherConfig, last_turn: bool) -> Decision:
        action = parse_search_r1_reply(text)
        step.invalid_reason = action.invalid_reason
        if action.answer is not None:
            step.search_complete = True
            return Decision(done=True, answer=action.answer)
        if last_turn:
            if action.query is not None:
                step.invalid_reason = "search budget exhausted before an <answer>"
            return DONE
        if action.query is not None:
            step.search_complete = False
            return Decision(action.query)
        return Decision(observation=search_r1_invalid_observation(action.invalid_reason or "no action"))


S3_LOOP = S3Loop()
SEARCH_R1_LOOP = SearchR1Loop()
