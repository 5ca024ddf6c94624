"""The s3 searcher loop (batched, lockstep) and the Search-R1 end-to-end agent on the same loop: what differs between
them (prompt, parsing, the end, the result) is each one's protocol object, searcher/loops.py.

    searcher = S3Searcher(policy, retriever, cfg.searcher, k0=cfg.retriever.k)
    results = searcher.search(["Who directed Garbage Warrior?", ...])
    results[0].documents      # D_s3: selected documents, deduplicated, in turn order, at most cfg.max_contexts
    results[0].steps          # SearchStep per window: query, retrieved ids, selected ids, stop flag, timing, tokens
    results[0].trajectory     # token ids + mask (1 = policy, 0 = environment) for token policies, else None

The loop, for every question of a batch at once (s3 paper §3.1, Table 7, Appendix A.5):

    turn 0: D0 = top-k0 of the question (begin-with-search; k0 = the naive-RAG k, 3) shown in the first prompt
            (with `additive`, D0 is D_s3's start and stays: replies can only add to it, up to the cap)
    reply 0: <important_info> over D0 (optional), <search_complete>, <query>
    turn t = 1..T: D_t = top-k of the query; reply t selects from D_t, stops or asks the next query
    after the reply to D_T the loop ends (that last reply can still select from D_T; its query is not searched)

Each step record pairs a window with the reply that judged it. All active questions advance in lockstep: ONE batched
policy call and ONE batched retrieval call per turn; finished questions leave the batch. A window the reply left
without `<important_info>` is admitted whole (Appendix A.5, `no_selection="all"`) or dropped (`"drop"`).
An invalid reply becomes an observation telling the policy what was wrong; it uses up that turn.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError
from s3core.types import Document, QAExample, SearchResult, SearchStep, Trajectory, construct_trusted
from searcher.base import LoopStats, SearcherBase, Start, SupportsSearch, TopK, search_items
from searcher.config import SearcherConfig
from searcher.identity import gguf_sha256, local_path
from searcher.loops import DONE, S3_LOOP, SEARCH_R1_LOOP, Decision, LoopProtocol, Render
from searcher.policy.base import Message, Policy, PolicyOutput, PolicyPrompt, TokenPrompt, uses_token_ids
from searcher.protocol import render_information
from searcher.titles import norm, title_variants

__all__ = ["LoopStats", "S3Searcher", "SearchR1Agent", "SupportsSearch", "admission_stats"]


def _new_step(turn: int, query: str | None = None, retrieved_ids: list[str] | None = None,
              retrieval_seconds: float = 0.0, queries: list[str] | None = None) -> SearchStep:
    """A SearchStep to be filled in on the hot path: built without validation (every value is written by the loop
    with its type; test_agent checks the records against the schema), then written field by field."""
    return construct_trusted(SearchStep, {
        "turn": turn, "query": query, "retrieved_ids": [] if retrieved_ids is None else retrieved_ids,
        "selected_ids": [], "selection_fallback": False, "search_complete": None, "invalid_reason": None,
        "policy_text": "", "policy_seconds": 0.0, "retrieval_seconds": retrieval_seconds, "reader_seconds": 0.0,
        "prompt_tokens": 0, "completion_tokens": 0, "queries": queries,
    })


@dataclass(slots=True)
class _Rollout:
    """Mutable state of one question inside a lockstep batch."""

    index: int
    question: str
    question_id: str | None
    messages: list[Message] = field(default_factory=list)  # chat policies
    ids: list[int] = field(default_factory=list)  # token policies: the full context so far
    trajectory: Trajectory | None = None
    window: list[Document] = field(default_factory=list)
    step: SearchStep | None = None  # the step of the current window, completed by the next reply
    steps: list[SearchStep] = field(default_factory=list)
    docs: dict[str, Document] = field(default_factory=dict)  # D_s3 in admission order
    content_keys: set[tuple[str, str]] = field(default_factory=set)
    answer: str | None = None
    done: bool = False
    finished_at: float = 0.0
    d0: list[Document] = field(default_factory=list)  # begin-with-search documents: the fallback of a failed search
    error: str | None = None
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class _Run:
    """The settings of one `search()` call, read from its config once (not per reply or window), and passed down the
    loop: the searcher itself keeps no per-call state, so concurrent calls with different settings can share it."""

    cfg: SearcherConfig
    cap: int  # #MaxContexts
    render: Render  # the window's lines, cut to cfg.doc_token_budget (cached per budget; whole passages: no cache)


class S3Searcher(SearcherBase):
    """The s3 searcher: a policy LLM that queries `retriever`, selects documents and decides when to stop.

    policy: any `Policy` (searcher.build.build_policy(cfg) builds one from the config).
    retriever: anything with `search(queries: list[str], k: int) -> list[list[Document]]`.
    cfg: the [searcher] section (k, max_select, max_turns, doc budget, no_selection, sampling).
    k0: begin-with-search depth; must equal the naive-RAG k (retriever.k, 3) so that GBR compares like with like.
    count_tokens: token counter for the per-document budget (default: whitespace words; token policies use their
        tokenizer).
    protocol: what this agent makes of the loop (searcher/loops.py: prompt, parsing, the end, the result; default:
        the class's, s3's here).
    start: where each search begins (searcher/base.py `Start`, given by searcher/kinds.py `build_start` from
        searcher.start; default: naive RAG's top-k0). A call whose cfg.start names another start is refused.
    """

    kind = "llm"
    protocol: LoopProtocol = S3_LOOP

    def __init__(
        self,
        policy: Policy,
        retriever: SupportsSearch,
        cfg: SearcherConfig | None = None,
        k0: int = 3,
        *,
        count_tokens: Callable[[str], int] | None = None,
        protocol: LoopProtocol | None = None,
        start: Start | None = None,
    ) -> None:
        if protocol is not None:
            self.protocol = protocol  # this instance's, over the class's
        self.policy = policy
        self.retriever = retriever
        self.cfg = cfg if cfg is not None else SearcherConfig.model_validate({})
        if k0 < 1:
            raise ConfigError(f"k0 (begin-with-search depth) must be >= 1, got {k0}; use the naive-RAG k (3)")
        self.k0 = k0
        self.token_mode = uses_token_ids(policy)
        if count_tokens is None and self.token_mode:
            encode = policy.encode  # type: ignore[attr-defined]

            def count_tokens(s: str) -> int:
                return len(encode(s))

        self.count_tokens = count_tokens
        self.last_stats = LoopStats()
        self._line_caches: dict[int, dict[str, tuple[str, str]]] = {}
        self.start: Start = start if start is not None else TopK(retriever, k0)
        self._settings(self.cfg)  # a configuration the loop cannot run is an error now, not at the first search

    _LINE_CACHE_MAX = 20_000  # cut document lines kept per budget (<= ~30 MB; then start over); whole passages: no cache

    def _line_cache(self, budget: int) -> dict[str, tuple[str, str]]:
        """Rendered document lines cut to one per-document budget, reused across windows, turns
        and searches: the same passages come back in every rollout of a group and in many questions' windows."""
        cache = self._line_caches.get(budget)
        if cache is None or len(cache) > self._LINE_CACHE_MAX:
            cache = self._line_caches[budget] = {}
        return cache

    def _settings(self, cfg: SearcherConfig) -> _Run:
        """One call's settings: #MaxContexts and the rendered-line cache of its document budget (whole passages are
        written straight from the documents: no cache), after checking that the loop can run them."""
        if cfg.additive:
            self._check_additive(cfg)
        if cfg.start != "top_k":
            self._check_start(cfg)
        if cfg.start != self.start.name:
            raise ConfigError(f"searcher.start = {cfg.start!r}, but this searcher was built to start from "
                              f"{self.start.name!r}: build it with searcher.build.build_searcher from these settings")
        budget = cfg.doc_token_budget
        lines = self._line_cache(budget) if budget is not None else None
        render = functools.partial(render_information, doc_token_budget=budget, count_tokens=self.count_tokens,
                                   cache=lines)
        return _Run(cfg, cfg.max_contexts, render)

    def _check_additive(self, cfg: SearcherConfig) -> None:
        """An additive searcher keeps D0 whole: it needs a D0 (begin-with-search) and room for it under the cap."""
        cap = cfg.max_contexts
        if not self.protocol.begins_with_search(cfg):
            raise ConfigError("searcher.additive keeps the begin-with-search documents: it needs "
                              "searcher.begin_with_search = true (and is not an option of the Search-R1 agent)")
        if cap < self.k0:
            raise ConfigError(f"searcher.additive keeps all k0={self.k0} begin-with-search documents, but the document "
                              f"cap (searcher.context_cap / max_select x max_turns) is {cap}: set searcher.context_cap "
                              f">= {self.k0}")

    def _check_start(self, cfg: SearcherConfig) -> None:
        """The title-following start is a D0: it needs begin-with-search, the s3 loop, and (additive) room for it."""
        if not self.protocol.begins_with_search(cfg) or self.protocol is not S3_LOOP:
            raise ConfigError(f"searcher.start = {cfg.start!r} replaces the begin-with-search documents: it needs "
                              "searcher.begin_with_search = true and the s3 searcher (not the Search-R1 agent)")
        if cfg.additive and cfg.max_contexts < max(cfg.start_cap, self.k0):
            raise ConfigError(f"searcher.additive keeps the title-following start's documents (up to start_cap = "
                              f"{cfg.start_cap}), but the document cap (searcher.context_cap) is {cfg.max_contexts}: set "
                              f"searcher.context_cap >= {cfg.start_cap} (above it leaves the searcher room to add)")

    # ------------------------------------------------------------------------------------------------ public API
    @property
    def max_turns(self) -> int:
        return self.cfg.max_turns

    def identity(self, relative_to: Path | None = None) -> dict[str, Any]:
        """What a run record says ran (searcher/base.py `Searcher.identity`): the policy, its model and the loop
        settings that change its documents. A setting joins only where it differs from what earlier runs ran with
        (queries_per_turn > 1, vLLM's presence penalty), so their identities stay what they were."""
        s = self.cfg
        out: dict[str, Any] = {
            "class": type(self).__name__, "policy": s.policy, "model": s.model,
            "policy_path": local_path(s.policy_path, relative_to), "k": s.k, "max_turns": s.max_turns,
            "doc_token_budget": s.doc_token_budget, "max_select": s.max_select, "temperature": s.temperature,
            "gguf_sha256": gguf_sha256(s.model)}
        if s.queries_per_turn > 1:
            out["queries_per_turn"] = s.queries_per_turn
        if s.policy == "vllm" and s.vllm.presence_penalty:
            out["presence_penalty"] = s.vllm.presence_penalty
        if s.start != "top_k":
            out |= {"start": s.start, "start_cap": s.start_cap}
        return out

    about = "a policy LLM that issues its own queries over several turns, keeps the passages that help answer and stops"
    request_fields = {
        "k": "documents retrieved per search turn (at least searcher.max_select: a window must hold the selection)",
        "max_turns": "search turns after begin-with-search (0: naive RAG's top-k0 only)",
    }

    def describe(self, cfg: SearcherConfig | None = None) -> dict[str, Any]:
        """What it is, for /health, /search, MCP and `s3 search` (searcher/base.py `Searcher.describe`)."""
        s = self.cfg if cfg is None else cfg
        return {"kind": self.kind, "about": self.about, "model": s.policy_path or s.model, "policy": s.policy,
                "reader": None, "ranker": None,
                "settings": {"k": s.k, "max_turns": s.max_turns, "max_select": s.max_select,
                             "context_cap": s.max_contexts, "start": s.start, "additive": s.additive},
                "request_fields": dict(self.request_fields)}

    def check_call(self, cfg: SearcherConfig) -> None:
        """The loop's per-call rules (searcher/base.py `Searcher.check_call`): a window of k documents must hold a
        selection of max_select, and the settings must be ones the loop runs (`_settings`)."""
        if cfg.k < cfg.max_select:
            raise ConfigError(f"k: {cfg.k} is below searcher.max_select={cfg.max_select} (a window must hold the "
                              "selection)")
        self._settings(cfg)

    def search(
        self, questions: Sequence[str | QAExample], *, cfg: SearcherConfig | None = None,
        cancelled: Sequence[Callable[[], bool]] | None = None,
    ) -> list[SearchResult]:
        """Run the loop for every question; questions advance in lockstep batches of `policy.max_batch` (all at once
        when None). Returns one SearchResult per question, in order.

        cfg: the loop settings of this call (k, max_turns, max_select, budget, cap, ...; default: the searcher's
        own). The policy, its backend and the retriever stay; the searcher keeps nothing of a call on itself, so
        calls with different settings may run at once (the /search service and MCP do).
        cancelled: one callable per question, asked before every turn; a question whose callable says True leaves
        the batch there (its result ends `degraded` with error_code 'deadline_exceeded') and the others go on. The
        /search service passes the requests' deadlines this way."""
        items = search_items(questions, cancelled)
        run = self._settings(self.cfg if cfg is None else cfg)
        stats = LoopStats(questions=len(items))
        self.last_stats = stats
        t_start = time.perf_counter()
        chunk = self.policy.max_batch or max(len(items), 1)
        results: list[SearchResult] = []
        for lo in range(0, len(items), chunk):
            results.extend(self._run_batch(items[lo : lo + chunk], lo, stats, run, cancelled))
        stats.seconds = time.perf_counter() - t_start
        return results

    # --------------------------------------------------------------------------------------------- the lockstep loop
    def _run_batch(
        self, items: list[tuple[str, str | None]], offset: int, stats: LoopStats, run: _Run,
        cancelled: Sequence[Callable[[], bool]] | None = None,
    ) -> list[SearchResult]:
        t0 = time.perf_counter()
        cfg = run.cfg
        states = [_Rollout(index=offset + i, question=q, question_id=qid) for i, (q, qid) in enumerate(items)]
        self._begin(states, stats, run)
        T, protocol = cfg.max_turns, self.protocol
        for r in range(T + 1):
            if cancelled is not None:
                self._leave_if_cancelled(states, t0, cancelled, run)
            active = [st for st in states if not st.done]
            if not active:
                break
            prompts: list[PolicyPrompt] = [TokenPrompt(list(st.ids)) if self.token_mode else list(st.messages) for st in active]
            tp = time.perf_counter()
            outs = self.policy.generate(
                prompts,
                stop=protocol.stop,
                max_new_tokens=cfg.max_new_tokens,
                temperature=cfg.temperature,
            )
            dt = time.perf_counter() - tp
            stats.policy_seconds += dt
            stats.policy_calls += 1
            stats.batch_sizes.append(len(active))
            if len(outs) != len(active):
                raise RuntimeError(f"policy {self.policy.name} returned {len(outs)} replies for {len(active)} prompts")
            to_search: list[tuple[_Rollout, tuple[str, ...]]] = []
            record_reply, decide, share, last = self._record_reply, self._judge, dt / len(active), r == T
            for st, out in zip(active, outs, strict=True):
                record_reply(st, out, share)
                decision = decide(st, out, last, run)
                assert st.step is not None
                st.steps.append(st.step)
                st.step = None
                if decision.done:
                    st.done = True
                    st.finished_at = time.perf_counter() - t0
                elif decision.query is not None:
                    to_search.append((st, decision.queries or (decision.query,)))
                else:
                    # invalid action: tell the policy what was wrong; this turn is used up, no window
                    st.window = []
                    st.step = _new_step(r + 1)
                    self._insert(st, decision.observation or "")
            if to_search:
                tr = time.perf_counter()
                flat = [q for _, qs in to_search for q in qs]
                k = protocol.turn_k(cfg, self.k0)
                hits = self.retriever.search(flat, k)
                dr = time.perf_counter() - tr
                stats.retrieval_seconds += dr
                stats.retrieval_calls += 1
                if len(hits) != len(flat):
                    raise RuntimeError(f"retriever returned {len(hits)} result lists for {len(flat)} queries")
                observe, insert, share = protocol.observation, self._insert, dr / len(to_search)
                at = 0
                for st, qs in to_search:
                    n = len(qs)
                    docs = hits[at] if n == 1 else interleave(qs, hits[at:at + n], k)
                    at += n
                    st.window = list(docs)
                    st.step = _new_step(r + 1, qs[0], [d.id for d in docs], share, list(qs) if n > 1 else None)
                    insert(st, observe(st.window, run.render, self.token_mode))
        now = time.perf_counter() - t0
        results = []
        for st in states:
            if st.step is not None:  # a window nobody judged (cannot happen: the last reply judges the last window)
                st.steps.append(st.step)
            results.append(construct_trusted(SearchResult, {
                "question_id": st.question_id, "question": st.question, "documents": list(st.docs.values()),
                "steps": st.steps, "answer": st.answer, "trajectory": st.trajectory,
                "seconds": st.finished_at or now, "error": st.error, "error_code": st.error_code,
            }))  # every field from the loop's own typed state (test_agent checks the result against the schema)
        return results

    def _leave_if_cancelled(
        self, states: list[_Rollout], t0: float, cancelled: Sequence[Callable[[], bool]], run: _Run
    ) -> None:
        """Questions whose caller gave up (their deadline passed) leave the batch before the next policy call."""
        for st in states:
            if not st.done and cancelled[st.index]():
                if st.step is not None:
                    st.step.invalid_reason = "cancelled: the request's deadline passed"
                    st.steps.append(st.step)
                    st.step = None
                self._fail(st, "cancelled: the request's deadline passed", "deadline_exceeded", run)
                st.done = True
                st.finished_at = time.perf_counter() - t0

    def _fail(self, st: _Rollout, error: str, code: str, run: _Run) -> None:
        """End a question's search early, degraded: it keeps what was admitted, or D0 when nothing was."""
        st.error, st.error_code = error, code
        if not st.docs and st.d0:
            self._admit(st, st.d0, run.cap)

    def _start_documents(self, questions: list[str], cfg: SearcherConfig) -> list[list[Document]]:
        """D0 of each question, from the start this searcher was built with (searcher.start: naive RAG's top-k0, one
        batched retrieval; or the title-following script's documents, two). A list per question, in order."""
        return self.start.documents(questions, cfg)

    def _begin(self, states: list[_Rollout], stats: LoopStats, run: _Run) -> None:
        """Begin-with-search (one batched retrieval of every question) and the first prompt."""
        d0: list[list[Document]] = [[] for _ in states]
        dr = 0.0
        bws = self.protocol.begins_with_search(run.cfg)
        if bws and states:
            tr = time.perf_counter()
            d0 = self._start_documents([st.question for st in states], run.cfg)
            dr = time.perf_counter() - tr
            stats.retrieval_seconds += dr
            stats.retrieval_calls += 1
            if len(d0) != len(states):
                raise RuntimeError(f"retriever returned {len(d0)} result lists for {len(states)} queries")
        additive = run.cfg.additive
        for st, docs in zip(states, d0, strict=True):
            st.window = docs
            st.d0 = docs
            if additive:  # naive RAG's top-k as it came (ids and order; no content dedup among them), then additions
                st.docs.update((d.id, d) for d in docs)
                st.content_keys.update((d.title, d.text) for d in docs)
            st.step = _new_step(0, st.question if bws else None, [d.id for d in docs], dr / len(states) if bws else 0.0)
            prompt = self.protocol.first_prompt(st.question, docs if bws else None, run.cfg, run.render)
            user: Message = {"role": "user", "content": prompt}
            if self.token_mode:
                ids = list(self.policy.encode_chat([user]))  # type: ignore[attr-defined]
                st.trajectory = Trajectory(prompt_ids=list(ids))
                st.ids = ids
            else:
                st.messages = [user]

    def _record_reply(self, st: _Rollout, out: PolicyOutput, seconds: float) -> None:
        """Append what the policy wrote: token ids with mask 1 (token mode) or an assistant message."""
        if self.token_mode and st.trajectory is not None and out.token_ids is not None:
            st.trajectory.append(list(out.token_ids), written_by_policy=True, logprobs=out.logprobs)
            st.ids.extend(out.token_ids)
        elif not self.token_mode:
            st.messages.append({"role": "assistant", "content": out.text})
        step = st.step if st.step is not None else _new_step(-1)
        step.policy_text = out.text
        step.policy_seconds = seconds
        step.prompt_tokens = out.prompt_tokens
        step.completion_tokens = out.completion_tokens
        st.step = step

    def _insert(self, st: _Rollout, text: str) -> None:
        """Append what the environment inserts: token ids with mask 0 (token mode) or a user message."""
        if not text:
            return
        if self.token_mode:
            ids = list(self.policy.encode(text))  # type: ignore[attr-defined]
            assert st.trajectory is not None
            st.trajectory.append(ids, written_by_policy=False)
            st.ids.extend(ids)
        else:
            st.messages.append({"role": "user", "content": text.strip("\n")})

    def _admit(self, st: _Rollout, docs: Sequence[Document], cap: int | None) -> None:
        """Add documents to D_s3: deduplicated by id and by content, in turn order, at most `cap` in all."""
        final, seen = st.docs, st.content_keys
        for d in docs:
            if cap is not None and len(final) >= cap:
                break
            if d.id in final:
                continue
            key = (d.title, d.text)
            if key not in seen:
                final[d.id] = d
                seen.add(key)

    def _judge(self, st: _Rollout, out: PolicyOutput, last_turn: bool, run: _Run) -> Decision:
        """The loop's next move for a question after its reply: a failed policy call ends it degraded, any other
        reply is the protocol's to decide; the documents it admits join the result."""
        step = st.step
        assert step is not None
        protocol = self.protocol
        if protocol.keeps_read and st.window:  # the documents the policy read count as its context
            self._admit(st, st.window, None)
        if out.error is not None:
            step.invalid_reason = f"policy call failed: {out.error}"
            self._fail(st, f"policy call failed: {out.error}", out.error_code or "upstream_error", run)
            return DONE
        decision = protocol.decide(out.text, st.window, step, st.steps, run.cfg, last_turn)
        if decision.admit:
            self._admit(st, decision.admit, run.cap)
        if decision.answer is not None:
            st.answer = decision.answer
        return decision


class SearchR1Agent(S3Searcher):
    """Search-R1 end to end (search-r1.md Table 1): the policy reasons in `<think>`, searches with
    `<search>query</search>`, reads `<information>`, and answers in `<answer>`; `SearchResult.answer` is its answer.

    The same loop (lockstep batching, token masks) on Search-R1's protocol (searcher/loops.py `SearchR1Loop`): no
    begin-with-search, every search retrieves top-k0 (Search-R1's topk, 3), the result's `documents` are all retrieved
    documents, deduplicated, in turn order (the paper's "Search-R1 (Ret)" context). After `max_turns` searches the
    policy gets one last reply in which it can only answer.
    """

    protocol: LoopProtocol = SEARCH_R1_LOOP
    about = "Search-R1: a policy LLM that reasons, searches (top-k0 each search) and answers the question itself"
    request_fields = {"max_turns": "searches before its last reply, in which it can only answer"}

    def describe(self, cfg: SearcherConfig | None = None) -> dict[str, Any]:
        """The loop's description with the settings Search-R1 reads: every search retrieves k0, no selection."""
        s = self.cfg if cfg is None else cfg
        return super().describe(s) | {"settings": {"k": self.k0, "max_turns": s.max_turns}}

    def check_call(self, cfg: SearcherConfig) -> None:
        """Settings the loop runs (`_settings`); k and max_select are not read (a search retrieves k0)."""
        self._settings(cfg)


def interleave(queries: Sequence[str], ranked: Sequence[Sequence[Document]], k: int) -> list[Document]:
    """One window from several queries' results: each query's top `k // n` (at least 1) after moving the documents
    TITLED as the query (`title_variants`, e.g. "Kiss and Tell" finds "Kiss and Tell (1945 film)") to the front of
    its ranking, taken rank by rank (every query's first, then every second, ...), each document once, at most `k`.
    A list of queries is a list of candidate titles: the page a title names is what asking for it means.

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> [x.id for x in interleave(["x", "f"], [[d("a"), d("b"), d("c")], [d("b"), d("e"), d("f")]], 4)]
    ['a', 'f', 'b']
    """
    per = max(1, k // max(1, len(ranked)))
    heads = []
    for q, docs in zip(queries, ranked, strict=True):
        key = norm(q)
        titled = [d for d in docs if key in title_variants(d.title)]
        ids = {d.id for d in titled}
        heads.append([*titled, *(d for d in docs if d.id not in ids)][:per])
    out: list[Document] = []
    seen: set[str] = set()
    for r in range(per):
        for docs in heads:
            if r < len(docs) and docs[r].id not in seen and len(out) < k:
                seen.add(docs[r].id)
                out.append(docs[r])
    return out


def admission_stats(result: SearchResult) -> dict[str, Any]:
    """How the final context was built: documents admitted by explicit selection vs the Appendix A.5 fallback,
    and the invalid replies.

    >>> admission_stats(SearchResult(question="q"))["documents"]
    0
    """
    final = {d.id for d in result.documents}
    first_by: dict[str, bool] = {}
    for s in result.steps:
        for i in s.selected_ids:
            first_by.setdefault(i, s.selection_fallback)
    by_fallback = sum(1 for i in final if first_by.get(i, False))
    return {
        "documents": len(final),
        "by_selection": len(final) - by_fallback,
        "by_fallback": by_fallback,
        "replies": len(result.steps),
        "invalid_replies": sum(1 for s in result.steps if s.invalid_reason is not None),
        "search_turns": sum(1 for s in result.steps if s.turn > 0 and s.query is not None),
    }
