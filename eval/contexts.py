"""Context sources: the documents D each evaluation method gives the frozen generator; and the contexts.jsonl contract.

A context source is an async batch function `(questions) -> list[ContextOut]`, one per method (eval/methods.py):

    no_contexts          no_retrieval: no documents
    retriever_contexts   naive_rag: D_RAG, the retriever's top-k of the question itself (one batched call per batch)
    agent_contexts       searcher / search_r1 / search_r1_ret: a searcher of any kind or the Search-R1 agent, run live
    fixed_contexts       searcher with --contexts FILE: the documents a contexts file names

contexts.jsonl is what `s3 search --questions Q --out FILE` writes and `s3 eval --method searcher --contexts FILE`
reads: one row per question, `{"id", "question", "documents": [{"id", "title", "score", "turn"}], "turns",
"queries", "steps", "seconds", "policy_seconds", "reader_seconds", "retrieval_seconds"}` (`contexts_row`; each step:
turn, query, retrieved / selected ids, stop flag, invalid reason and the policy's own text; the search's seconds, then
each model's own share of them). The documents carry no text: the reader looks their ids up in the
index or in the dataset's corpus (`lookup_documents`). A file being written is resumable (`read_done_ids`). A file
kept compressed (FILE.jsonl.gz, `gzip -9 -n`: how benchmarks/results keeps rows) reads as FILE (`read_contexts_file`,
`contexts_sha256`).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.accuracy import Prediction
from s3core.corpus import iter_corpus
from s3core.errors import DataFormatError, RetrievalError
from s3core.io import append_jsonl, file_sha256, iter_jsonl, latest_by_id, repair_tail, stored
from s3core.types import Document, QAExample, SearchResult

if TYPE_CHECKING:  # annotations only: `s3 search` imports this module at start-up
    from searcher.base import Searcher
    from searcher.retrieval.base import Retriever

_ROW_SHAPE = '{"id", "documents": [{"id", ...}]}'


@dataclass
class ContextOut:
    """What a context source gives for one question: documents, maybe an agent's own answer, or an error."""

    documents: list[Document] = field(default_factory=list)
    answer: Prediction | None = None
    error: str | None = None
    latency_s: float = 0.0
    turns: int | None = None


ContextFn = Callable[[list[QAExample]], Awaitable[list[ContextOut]]]


# ----------------------------------------------------------------------------------------------- the sources


async def no_contexts(qs: list[QAExample]) -> list[ContextOut]:
    """No retrieval: the generator answers from the question alone."""
    return [ContextOut() for _ in qs]


def retriever_contexts(retriever: Retriever, k: int) -> ContextFn:
    """Naive RAG: top-k of the question itself, one batched retrieval call per batch."""

    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        t0 = time.perf_counter()
        try:
            docs = await asyncio.to_thread(retriever.search, [q.question for q in qs], k)
        except RetrievalError as e:  # e.g. a remote retriever down after its retries: rows are missing, retried
            return [ContextOut(error=f"retrieval: {e}") for _ in qs]
        per_q = (time.perf_counter() - t0) / max(len(qs), 1)
        return [ContextOut(documents=list(d), latency_s=per_q) for d in docs]

    return contexts


def _policy_error(result: SearchResult) -> str | None:
    """A failed policy call makes the question's contexts missing (retried on resume), not an empty context (nor
    the degraded D0 fallback the service returns)."""
    if result.error is not None:
        return f"searcher: {result.error}"
    for s in result.steps:
        reason = s.invalid_reason or ""
        if reason.startswith("policy call failed"):
            return f"searcher: {reason}"
    return None


def agent_contexts(agent: Searcher, own_answer: bool,
                   trajectories: Path | None = None) -> ContextFn:
    """A searcher of any kind (searcher/base.py `Searcher`, the SearchR1Agent too; sync, batched) run off the event
    loop; `own_answer`: the agent's answer too.
    `trajectories`: a contexts.jsonl the agent's trajectories are appended to, a batch at a time (turns, queries,
    selections, stops: what the searcher did for each evaluated question; `s3 eval --contexts` replays it). A resumed
    run appends the retried questions again; readers keep the latest row per id. The file is repaired (a line torn by
    a kill cut, a contexts.jsonl.gz unpacked) at the first append, which runs under the run's lock: building the run
    (a --dry-run, a resume refused for another identity) leaves it as it was."""
    repaired = trajectories is None

    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        nonlocal repaired
        t0 = time.perf_counter()
        results = await asyncio.to_thread(agent.search, qs)
        per_q = (time.perf_counter() - t0) / max(len(qs), 1)
        if trajectories is not None:
            if not repaired:
                repair_tail(trajectories)
                repaired = True
            append_jsonl(trajectories, [contexts_row(r, q.id) for r, q in zip(results, qs, strict=True)])
        out = []
        for r in results:
            err = _policy_error(r)
            ans = None
            if own_answer and err is None:
                toks = sum(s.prompt_tokens for s in r.steps), sum(s.completion_tokens for s in r.steps)
                ans = Prediction(text=r.answer if r.answer is not None else "", latency_s=0.0,
                                 prompt_tokens=toks[0], completion_tokens=toks[1],
                                 note=None if r.answer is not None else "agent: no <answer> within the turn budget")
            out.append(ContextOut(documents=list(r.documents), answer=ans, error=err,
                                  latency_s=r.seconds or per_q, turns=r.turns))
        return out

    return contexts


def fixed_contexts(docs_by_q: dict[str, list[Document]]) -> ContextFn:
    """The documents given per question id (read from a contexts file)."""

    async def contexts(qs: list[QAExample]) -> list[ContextOut]:
        return [ContextOut(documents=docs_by_q[q.id]) for q in qs]

    return contexts


# ----------------------------------------------------------------------------------------------- contexts.jsonl


def contexts_row(result: SearchResult, question_id: str) -> dict[str, Any]:
    """One contexts.jsonl row for a SearchResult (documents without text: the eval harness joins the corpus)."""
    from searcher.service import summarize_result

    summary = summarize_result(result)
    return {
        "id": question_id,
        "question": result.question,
        "documents": [{"id": d.id, "title": d.title, "score": d.score, "turn": d.turn} for d in summary.documents],
        "turns": summary.trajectory.turns,
        "queries": summary.trajectory.queries,
        "steps": [
            {
                "turn": s.turn,
                "query": s.query,
                "retrieved_ids": s.retrieved_ids,
                "selected_ids": s.selected_ids,
                "selection_fallback": s.selection_fallback,
                "search_complete": s.search_complete,
                "invalid_reason": s.invalid_reason,
                "policy_text": raw.policy_text,  # what the policy wrote: `s3 analyze` and `s3 report` read it
                **({"queries": raw.queries} if raw.queries else {}),  # a turn's several queries (queries_per_turn > 1)
            }
            for s, raw in zip(summary.trajectory.steps, result.steps, strict=True)
        ],
        "seconds": summary.trajectory.seconds,
        "policy_seconds": summary.trajectory.policy_seconds,
        "reader_seconds": summary.trajectory.reader_seconds,
        "retrieval_seconds": summary.trajectory.retrieval_seconds,
    }


def read_done_ids(path: Path) -> set[str]:
    """Ids already written to a contexts file being appended to. A line torn by a kill is cut off the file (its
    question is searched again); a malformed line elsewhere is an error naming it."""
    repair_tail(path)
    return set(latest_by_id(path, what="contexts row"))


def read_contexts_file(path: Path, wanted: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Read a contexts / rankings jsonl: `{"id", "documents": [{"id", ...}, ...]}` per question. `path` may be kept
    compressed: FILE.jsonl.gz, or FILE where only FILE.gz exists (s3core.io `stored`).

    Every wanted question id must be present (the error names how many are missing and the first few).
    """
    path = stored(path)
    want = set(wanted)
    out: dict[str, list[dict[str, Any]]] = {}
    for lineno, obj in iter_jsonl(path, what=_ROW_SHAPE):
        docs = obj.get("documents")
        if "id" not in obj or not isinstance(docs, list):
            raise DataFormatError(f"{path}:{lineno}: expected {_ROW_SHAPE}")
        if not all(isinstance(d, dict) and "id" in d for d in docs):
            raise DataFormatError(f"{path}:{lineno}: every document needs an 'id'")
        qid = str(obj["id"])
        if qid in want:
            out[qid] = docs
    missing = [q for q in wanted if q not in out]
    if missing:
        raise DataFormatError(
            f"{path}: no contexts for {len(missing)} of {len(want)} questions (first: {', '.join(missing[:5])})"
        )
    return out


def contexts_sha256(path: Path) -> str:
    """The sha256 of a contexts file's rows as written (run.json's contexts.sha256): of FILE, or of the bytes its
    compressed copy unpacks to (FILE.jsonl.gz, or FILE where only FILE.gz exists), so a run resumes whichever copy is
    kept."""
    p = stored(path)
    if p.suffix != ".gz":
        return file_sha256(p)
    h = hashlib.sha256()
    with gzip.open(p, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def lookup_documents(
    ids: set[str], corpus: Path | None, getter: Callable[[list[str]], Sequence[Document | None]] | None
) -> dict[str, Document]:
    """Texts of the given doc ids, from a retriever's get(ids) when there is one, else by streaming the corpus."""
    found: dict[str, Document] = {}
    if getter is not None:
        order = sorted(ids)
        for i, d in zip(order, getter(order), strict=True):
            if d is not None:
                found[i] = d
    elif corpus is not None and corpus.is_file():
        for d in iter_corpus(corpus, check_unique=False):
            if d.id in ids:
                found[d.id] = d
    missing = sorted(ids - set(found))
    if missing:
        where = "the index" if getter is not None else str(corpus)
        raise DataFormatError(f"{len(missing)} context document ids are not in {where} (first: {', '.join(missing[:5])})")
    return found
