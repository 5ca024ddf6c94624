"""What every searcher is: the `Searcher` protocol each kind implements, the `Start` a searcher begins from (naive
RAG's top-k, or a script's documents), and the loop's accounting. The kinds themselves are registered in one place,
searcher/kinds.py; callers take a `Searcher` and never ask which kind it is.

    searcher = build_configured_searcher(cfg.searcher, retriever, k0=3)   # searcher/build.py, any kind
    searcher.search(["Who directed Garbage Warrior?"])[0].documents     # the documents for your generator
    searcher.identity()                                                  # what a run record says ran
    searcher.describe()                                                  # what /health, /search and MCP say runs

A start is given to a searcher when it is built (searcher/kinds.py `build_start`): the LLM searcher's D0 is the
start's documents, the title-following script is itself a start, and the reading searcher begins from one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from s3core.errors import S3Error
from s3core.types import Document, QAExample, SearchResult
from searcher.config import SearcherConfig

__all__ = ["LoopStats", "Searcher", "SearcherBase", "Start", "SupportsSearch", "TopK", "search_items"]


class SupportsSearch(Protocol):
    """The retriever contract a searcher needs (searcher.retrieval.Retriever satisfies it)."""

    def search(self, queries: list[str], k: int) -> list[list[Document]]: ...


@dataclass
class LoopStats:
    """Wall-clock accounting of the last `search()` call (for benchmarks and the service): each model's own share
    (the policy's, the reader's) and retrieval's."""

    questions: int = 0
    seconds: float = 0.0
    policy_seconds: float = 0.0
    retrieval_seconds: float = 0.0
    reader_seconds: float = 0.0
    policy_calls: int = 0
    retrieval_calls: int = 0
    reader_calls: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def other_seconds(self) -> float:
        """Time spent in the loop itself (prompts, parsing, bookkeeping): total - policy - reader - retrieval."""
        return max(self.seconds - self.policy_seconds - self.reader_seconds - self.retrieval_seconds, 0.0)


@runtime_checkable
class Searcher(Protocol):
    """A searcher of any kind (searcher/kinds.py): it finds the documents a frozen generator answers from.

    kind: its searcher.kind; cfg: the settings it runs with (a call may pass its own, as the /search service does);
    policy: its policy model, or None for a searcher that runs none (the services' batch-worker cap reads it);
    last_stats: the accounting of its last call; request_fields: the per-call settings a request to the services may
    set (each with what it means here: /search's `k`, `max_turns`), which `check_call` checks."""

    kind: str
    cfg: SearcherConfig
    policy: Any
    last_stats: LoopStats
    request_fields: dict[str, str]

    @property
    def max_turns(self) -> int: ...

    @property
    def k(self) -> int: ...

    @property
    def max_contexts(self) -> int: ...

    def search(
        self, questions: Sequence[str | QAExample], *, cfg: SearcherConfig | None = None,
        cancelled: Sequence[Callable[[], bool]] | None = None,
    ) -> list[SearchResult]: ...

    def search_one(self, question: str | QAExample) -> SearchResult: ...

    def identity(self, relative_to: Path | None = None) -> dict[str, Any]:
        """What a run record says ran (eval/build.py's run.json): its kind, its settings and a hash of every model's
        weights it reads. Paths are written relative to `relative_to` (a run directory) where they are local."""
        ...

    def describe(self, cfg: SearcherConfig | None = None) -> dict[str, Any]:
        """What it is, for people and clients (/health, MCP, /search's `settings`): `kind`, `about` (what it does, in
        words), `model` (the model it runs: its policy's, or its reader's; None for a script), `reader` and `ranker`
        (None where it has none), `settings` (those it uses, read from `cfg` when given: a call's) and
        `request_fields`."""
        ...

    def check_call(self, cfg: SearcherConfig) -> None:
        """Refuse a call's settings it cannot run (a request's fields on the served settings) with a ConfigError that
        names the field and the rule: the per-request checks of its own kind, run before the call is batched."""
        ...


class SearcherBase:
    """What every kind shares of the protocol, read from its settings `cfg`: `k`, `max_contexts`, `search_one`."""

    cfg: SearcherConfig

    def search(self, questions: Sequence[str | QAExample], *, cfg: SearcherConfig | None = None,
               cancelled: Sequence[Callable[[], bool]] | None = None) -> list[SearchResult]:
        raise NotImplementedError

    @property
    def k(self) -> int:
        return self.cfg.k

    @property
    def max_contexts(self) -> int:
        return self.cfg.max_contexts

    def check_call(self, cfg: SearcherConfig) -> None:
        """No rule of its own beyond its settings' (a kind with one overrides this)."""

    def search_one(self, question: str | QAExample) -> SearchResult:
        return self.search([question])[0]


class Start(Protocol):
    """Where a search begins (D0, shown in the LLM searcher's first prompt): `documents(questions, cfg)` gives each
    question's documents, in order. `name` is its searcher.start."""

    name: str

    def documents(self, questions: list[str], cfg: SearcherConfig) -> list[list[Document]]: ...


def search_items(questions: Sequence[str | QAExample],
                 cancelled: Sequence[Callable[[], bool]] | None = None) -> list[tuple[str, str | None]]:
    """A `search` call's questions as (text, id) pairs, each text stripped; an empty one, or a `cancelled` list of
    another length, is an S3Error that says so (every kind checks its input the same way)."""
    if cancelled is not None and len(cancelled) != len(questions):
        raise S3Error(f"cancelled has {len(cancelled)} entries for {len(questions)} questions")
    items: list[tuple[str, str | None]] = []
    for i, q in enumerate(questions):
        text, qid = (q.question, q.id) if isinstance(q, QAExample) else (q, None)
        if not isinstance(text, str) or not text.strip():
            raise S3Error(f"question {i} is empty: every question needs some text")
        items.append((text.strip(), qid))
    return items


class TopK:
    """searcher.start = 'top_k': naive RAG's top-k0 of the question (the paper's begin-with-search), one batched
    retrieval call."""

    name = "top_k"

    def __init__(self, retriever: SupportsSearch, k0: int) -> None:
        self.retriever, self.k0 = retriever, k0

    def documents(self, questions: list[str], cfg: SearcherConfig) -> list[list[Document]]:
        return [list(x) for x in self.retriever.search(questions, self.k0)]
