"""`s3 search`: one question (prints its trajectory), or a questions file -> contexts.jsonl (resumable).

    s3 search "who wrote the novel the film Blade Runner is based on?"
    s3 search --index runs/index/hotpot --questions dev.jsonl --out runs/contexts.jsonl
    s3 search --policy runs/train/smoke "who ...?"       # a trained searcher: its settings and its index

The index defaults to the config's [retriever].index; the searcher to the trained one that ships with s3
(searcher.default_policy: a LoRA adapter on the offline SmolLM2-135M, on the loop it was trained with), `--untrained`
the zero-shot LLM searcher ([searcher] model, the offline Qwen 0.5B). `--policy RUN_DIR` loads another trained searcher (transformers backend, or vLLM when searcher.policy=vllm is set) with the
turns / k / selection / document budget and the index it was trained with; an explicit --index, --config or --set wins.

`--set searcher.kind=title_following` runs the title-following script instead of a model (searcher/title_following.py):
naive RAG's top-k, then the pages titled exactly as a title-like span of the question or of those documents (k
documents a span, up to searcher.context_cap; the measured control: context_cap = 5). It needs titled documents: an
index without titles is refused (there it would return naive RAG's top-k unchanged).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.contexts import contexts_row, read_done_ids  # the contexts.jsonl contract (read by `s3 eval`)
from s3core.errors import DataFormatError, S3Error
from s3core.types import Document

if TYPE_CHECKING:
    from s3.config import S3Config

CONTEXTS_HELP = (
    'one JSON line per question: {"id", "question", "documents": [{"id","title","score","turn"}], "turns", '
    '"queries", "steps", "seconds", "policy_seconds", "reader_seconds", "retrieval_seconds"} (read by `s3 eval '
    '--contexts`)'
)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "search", parents=[common], help="run the searcher on a question (prints its trajectory) or a questions file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("question", nargs="?", help="a question to search for (prints the trajectory)")
    p.add_argument("--questions", type=Path, help="questions jsonl (FlashRAG shape) to run in batches")
    p.add_argument("--out", type=Path, help="contexts jsonl to write (with --questions): " + CONTEXTS_HELP)
    p.add_argument("--limit", type=int, default=None, help="only the first N questions of the file")
    p.add_argument("--batch-size", type=int, default=8, help="questions advanced in lockstep per batch (default 8)")
    p.add_argument("--json", action="store_true",
                   help="print the single question's result as JSON: the record /search and MCP gather_context return")
    from s3.commands.serve import add_searcher_args

    add_searcher_args(p)
    p.set_defaults(handler=_search)


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# ------------------------------------------------------------------------------------------------------ handlers


def _search(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3.build import build_searcher as build
    from s3.commands.serve import untrained

    if args.question and args.questions:
        raise S3Error("give a question or --questions FILE, not both")
    if not args.question and not args.questions:
        raise S3Error('give a question ("s3 search \\"who ...?\\"") or --questions FILE --out contexts.jsonl')
    if args.questions and not args.out:
        raise S3Error("--questions needs --out contexts.jsonl")
    if args.batch_size < 1:
        raise S3Error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.question is not None and not args.question.strip():
        raise S3Error("the question is empty")
    limit = cfg.service.max_query_chars
    if args.question is not None and len(args.question.strip()) > limit:  # what /search refuses, before the model loads
        raise S3Error(f"the question is {len(args.question.strip())} characters, more than service.max_query_chars="
                      f"{limit} (a search prompt must fit the searcher's context window)")
    if args.questions:
        return _search_file(args, cfg)
    searcher, retriever, _, _, why = build(untrained(args, cfg), args.index, args.policy)
    print(f"searcher: {why}", file=sys.stderr)
    if args.json:  # the settings /search answers a request without fields with, from the same function
        from searcher.service import (
            SearchRequest,
            check_request,
            described_settings,
            policy_price,
            summarize_result,
        )

        try:
            settings = check_request(SearchRequest(question=args.question), cfg.service, searcher)
        except ValueError as e:
            raise S3Error(str(e)) from None
    (result,) = searcher.search([args.question.strip()])
    if args.json:  # the record /search and MCP gather_context answer with (searcher/service.py SearchResponse)
        print(summarize_result(result, settings, price=policy_price(searcher.cfg),
                               ran_with=described_settings(searcher, settings)).model_dump_json(indent=2))
    else:
        print_trajectory(result, retriever, additive=searcher.cfg.additive)
    if result.error is not None:  # degraded: the documents above are what was admitted before it ended
        raise S3Error(f"the search ended early ({result.error_code or 'error'}): {result.error}")
    return 0


def _search_file(args: argparse.Namespace, cfg: S3Config) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from s3.build import build_searcher as build
    from s3.commands.serve import untrained
    from s3core.corpus import read_questions

    questions = read_questions(args.questions)
    if args.limit is not None:
        questions = questions[: args.limit]
    seen: set[str] = set()
    for q in questions:
        if q.id in seen:
            raise DataFormatError(f"{args.questions}: duplicate question id {q.id!r} (ids must be unique to resume)")
        seen.add(q.id)
    out: Path = args.out
    done = read_done_ids(out)
    todo = [q for q in questions if q.id not in done]
    console = Console(stderr=True)
    console.print(f"{len(questions)} questions, {len(questions) - len(todo)} already in {out}, {len(todo)} to search")
    if not todo:
        return 0
    searcher, _, _, _, why = build(untrained(args, cfg), args.index, args.policy)
    console.print(f"searcher: {why}")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    n_docs = n_turns = 0
    with (
        out.open("a", encoding="utf-8") as fh,
        Progress(
            TextColumn("search"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console,
            transient=False,
        ) as progress,
    ):
        task = progress.add_task("search", total=len(todo))
        for batch in _batches(todo, args.batch_size):
            results = searcher.search([q.question for q in batch])
            if len(results) != len(batch):
                raise S3Error(f"searcher returned {len(results)} results for {len(batch)} questions")
            for q, r in zip(batch, results, strict=True):
                fh.write(json.dumps(contexts_row(r, q.id), ensure_ascii=False) + "\n")
                n_docs += len(r.documents)
                n_turns += r.turns
            fh.flush()
            progress.advance(task, len(batch))
    dt = time.perf_counter() - t0
    n = len(todo)
    console.print(
        f"wrote {n} rows to {out} in {dt:.1f}s ({n / dt:.2f} questions/s); "
        f"mean turns {n_turns / n:.2f}, mean documents {n_docs / n:.2f}"
    )
    return 0


SNIPPET_CHARS = 80


def _documents(result: Any, retriever: Any) -> dict[str, Document]:
    """Every document the trajectory saw, by id (final documents, plus the retriever's doc store)."""
    docs = {d.id: d for d in result.documents}
    missing = [i for i in result.retrieved_documents_ids if i not in docs]
    get = getattr(retriever, "get", None)
    if missing and callable(get):
        with contextlib.suppress(S3Error):  # a remote retriever without a doc store: ids only
            docs.update({d.id: d for d in get(missing)})
    return docs


def doc_label(doc: Document | None, chars: int = SNIPPET_CHARS) -> str:
    """What names a document for a reader of the trajectory: its title, else (an untitled corpus) the start of its
    text, in quotes, on one line.

    >>> doc_label(Document(id="p-1", title="", text="Error E12 means\\nthe boiler is too hot; let it cool."), chars=20)
    '"Error E12 means the…"'
    """
    if doc is None:
        return ""
    if doc.title:
        return doc.title
    text = " ".join(doc.text.split())
    return f'"{text[:chars].rstrip()}…"' if len(text) > chars else f'"{text}"' if text else ""


def _seconds(policy: float, reader: float, retrieval: float, policy_ran: bool) -> str:
    """Each model's own share of a time: the policy's (where one ran), the reader's (where one read), retrieval's."""
    parts = [f"{policy:.2f}s policy"] if policy_ran else []
    if reader:
        parts.append(f"{reader:.2f}s reader")
    return ", ".join([*parts, f"{retrieval:.3f}s retrieval"])


def print_trajectory(result: Any, retriever: Any = None, file: Any = None, *, additive: bool = False) -> None:
    """Print a SearchResult readably: per turn the query, the retrieved documents by title (an untitled one by the
    start of its text; selected ones marked), stop flag and each model's seconds, then the final documents D_s3, each
    with why it is there. `additive`: the searcher ran with searcher.additive (naive RAG's top-k is kept whatever it
    selects)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=file or sys.stdout, soft_wrap=False)
    console.print(f"[bold]Question:[/bold] {escape(result.question)}")
    docs = _documents(result, retriever)
    for step in result.steps:
        label = "begin-with-search" if step.turn == 0 else f"turn {step.turn}"
        query = f"query: {escape(repr(step.query))}" if step.query is not None else "(no query)"
        if step.queries:  # several queries in one turn (a list of candidates, the title-following script's spans)
            query = f"{len(step.queries)} queries: {escape(', '.join(map(repr, step.queries)))}"
        console.print(f"\n[bold cyan]{label}[/bold cyan]  {query}")
        if step.invalid_reason:
            console.print(f"  [red]invalid action:[/red] {escape(step.invalid_reason)}")
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("", width=2)
        table.add_column("doc id")
        table.add_column("title (or text)")
        selected = set(step.selected_ids)
        for doc_id in step.retrieved_ids:
            mark = "✓" if doc_id in selected else ""
            table.add_row(mark, escape(doc_id), escape(doc_label(docs.get(doc_id))))
        if step.retrieved_ids:
            console.print(table)
        how = (f" (the reply selected none: all {len(step.retrieved_ids)} documents of this window are kept)"
               if step.selection_fallback else "")
        console.print(f"  selected: {escape(', '.join(step.selected_ids)) or '-'}{how}")
        if step.search_complete is not None:
            console.print(f"  search_complete: {step.search_complete}")
        ran = bool(step.policy_seconds or step.policy_text or step.completion_tokens)
        console.print(f"  [dim]{_seconds(step.policy_seconds, step.reader_seconds, step.retrieval_seconds, ran)}[/dim]")
    first = result.steps[0] if result.steps and result.steps[0].turn == 0 else None
    kept = set(first.retrieved_ids) if additive and first is not None else set()
    picked = {i for s in result.steps for i in s.selected_ids}
    note = (" — naive RAG's top documents of the question are always kept (additive searcher), then what it selected"
            if kept else "")
    console.print(f"\n[bold]Final documents ({len(result.documents)}):[/bold]{note}")
    for i, d in enumerate(result.documents, start=1):
        score = f"  score {d.score:.2f}" if d.score is not None else ""
        why = "  (top-k, kept)" if d.id in kept and d.id not in picked else "  (top-k, selected)" if d.id in kept else ""
        console.print(f"  {i}. {escape(f'[{d.id}]')} {escape(doc_label(d))}{score}{why}")
    if result.answer is not None:
        console.print(f"\n[bold]Answer:[/bold] {escape(result.answer)}")
    steps = result.steps
    shares = _seconds(sum(s.policy_seconds for s in steps), sum(s.reader_seconds for s in steps),
                      sum(s.retrieval_seconds for s in steps),
                      any(s.policy_seconds or s.policy_text or s.completion_tokens for s in steps))
    console.print(f"[dim]{result.turns} turn{'' if result.turns == 1 else 's'}, {result.seconds:.2f}s ({shares})[/dim]")
