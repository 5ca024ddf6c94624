"""`s3 index build|info`, `s3 retrieve`: build indexes and query them (`s3 serve-retriever` is in serve.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config
    from searcher.retrieval.base import Retriever

RECALL_KS = (1, 3, 5, 10)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("index", help="build or describe a retrieval index", parents=[common])
    isub = p.add_subparsers(dest="index_command", metavar="ACTION", required=True)
    b = isub.add_parser("build", help="build an index directory from a corpus jsonl", parents=[common])
    b.add_argument("--corpus", required=True, help="corpus jsonl ({id, contents} or {id, title, text})")
    b.add_argument("--backend", default=None, help="bm25 | lucene | dense (default: retriever.backend)")
    b.add_argument("--out", required=True, help="index directory to create")
    b.add_argument("--overwrite", action="store_true", help="replace an existing index directory")
    b.add_argument("--index-type", default=None,
                   help="dense: flat | hnsw | ivfpq | opq_ivfpq | sq8 | sq4 | hnsw_sq | binary | auto "
                        "(default: retriever.dense.index_type; auto when --target-recall is given without it)")
    b.add_argument("--target-recall", type=float, default=None,
                   help="dense: recall@10 vs flat to reach; tunes the search settings (and with auto the type) "
                        "for the least resident memory and records them in the manifest")
    b.add_argument("--tune-queries", default=None,
                   help="dense: questions jsonl to tune on (default: sentences of random passages); never the "
                        "questions you report recall on")
    b.set_defaults(handler=_index_build)
    i = isub.add_parser("info", help="print an index directory's manifest", parents=[common])
    i.add_argument("dir", nargs="?", metavar="DIR", help="the index directory (or --index DIR)")
    i.add_argument("--index", default=None, help="the index directory (default: DIR, else retriever.index)")
    i.set_defaults(handler=_index_info)

    r = sub.add_parser("retrieve", help="query an index: one query, or a questions file", parents=[common])
    r.add_argument("query", nargs="*", help="query text (omit when --questions is given)")
    r.add_argument("--index", default=None, help="index directory (default: retriever.index)")
    r.add_argument("--questions", default=None, help="questions jsonl (FlashRAG shape)")
    r.add_argument("--k", type=int, default=None, help="documents per query (default: 10 with --questions, else retriever.k)")
    r.add_argument("--out", default=None, help="write rankings jsonl: {id, documents: [{id, title, score}]}")
    r.add_argument("--batch-size", type=int, default=64, help="queries per backend call with --questions")
    r.set_defaults(handler=_retrieve)


def _open(args: argparse.Namespace, cfg: S3Config) -> Retriever:
    from s3.build import index_dir
    from searcher.build import build_retriever

    return build_retriever(cfg.retriever, index_dir(cfg, Path(args.index) if args.index else None))


def _index_build(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3core.errors import ConfigError
    from searcher.retrieval import build_index, read_manifest

    backend = args.backend or cfg.retriever.backend
    dense_flags = {"index_type": args.index_type, "target_recall": args.target_recall, "tune_queries": args.tune_queries}
    given = {k: v for k, v in dense_flags.items() if v is not None}
    if given and backend != "dense":
        raise ConfigError(f"--{next(iter(given)).replace('_', '-')} applies to --backend dense only")
    if args.target_recall is not None and not 0 < args.target_recall <= 1:
        raise ConfigError(f"--target-recall must be in (0, 1], got {args.target_recall}")
    if args.target_recall is not None and args.index_type is None:
        given["index_type"] = "auto"
    rcfg = cfg.retriever
    if given:
        from searcher.config import DenseConfig

        try:
            dense = DenseConfig.model_validate({**cfg.retriever.dense.model_dump(), **given})
        except ValueError as e:
            raise ConfigError(f"invalid dense index option: {str(e).splitlines()[-1].strip()}") from None
        rcfg = cfg.retriever.model_copy(update={"dense": dense})
    t0 = time.perf_counter()
    out = build_index(args.corpus, backend, args.out, rcfg, overwrite=args.overwrite, progress=True)
    m = read_manifest(out)
    print(f"built {backend} index of {m.doc_count} documents in {out} ({time.perf_counter() - t0:.1f}s)")
    tuning = m.params.get("tuning")
    if tuning:
        ch = tuning["chosen"]
        print(f"chose {ch['index_type']} {ch['settings']}: recall@{tuning['k']} {ch['tuning_recall']:.3f} of flat on "
              f"{tuning['queries']} tuning queries, {ch['index_bytes'] / 2**20:.2f} MiB index")
    return 0


def _index_info(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3.build import index_dir
    from s3core.errors import S3Error
    from searcher.retrieval import read_manifest

    if args.dir and args.index and Path(args.dir) != Path(args.index):
        raise S3Error(f"two indexes given: DIR {args.dir} and --index {args.index}; give one")
    where = index_dir(cfg, Path(args.dir or args.index) if args.dir or args.index else None)
    if where is None:
        raise S3Error("no index directory to describe (this backend has none): pass DIR")
    print(json.dumps(read_manifest(where).model_dump(mode="json"), indent=2))
    return 0


def _retrieve(args: argparse.Namespace, cfg: S3Config) -> int:
    from s3core.errors import S3Error

    if args.k is not None and args.k <= 0:
        raise S3Error(f"--k must be positive, got {args.k}")
    if args.questions and args.query:
        raise S3Error("give either a query or --questions, not both")
    if not args.questions and not args.query:
        raise S3Error("nothing to retrieve: give a query or --questions FILE")
    retriever = _open(args, cfg)
    if args.questions:
        return _retrieve_file(args, retriever)
    return _retrieve_one(" ".join(args.query), args.k or cfg.retriever.k, retriever)


def _retrieve_one(query: str, k: int, retriever: Any) -> int:
    from rich.console import Console
    from rich.table import Table

    (docs,) = retriever.search([query], k)
    table = Table(title=f"top {k} for: {query}")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("id")
    table.add_column("title")
    table.add_column("text")
    for i, d in enumerate(docs, 1):
        text = d.text if len(d.text) <= 80 else d.text[:77] + "..."
        table.add_row(str(i), f"{d.score:.3f}" if d.score is not None else "", d.id, d.title, text)
    Console().print(table)
    if not docs:
        print("no document matches the query", file=sys.stderr)
    return 0


def _retrieve_file(args: argparse.Namespace, retriever: Any) -> int:
    from rich.console import Console
    from rich.table import Table

    from s3core.corpus import read_questions
    from s3core.errors import IndexDirError, S3Error
    from searcher.retrieval import recall_at_k
    from searcher.retrieval.metrics import supporting_ids_in_index

    k = args.k or 10
    questions = read_questions(args.questions)
    if not questions:
        raise S3Error(f"{args.questions}: no questions")
    bs = max(1, args.batch_size)
    t0 = time.perf_counter()
    rankings: list[list[Any]] = []
    for start in range(0, len(questions), bs):
        rankings.extend(retriever.search([q.question for q in questions[start : start + bs]], k))
    secs = time.perf_counter() - t0
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as fh:
            for q, docs in zip(questions, rankings, strict=True):
                row = {"id": q.id, "documents": [{"id": d.id, "title": d.title, "score": d.score} for d in docs]}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    console = Console()
    console.print(f"{len(questions)} questions, k={k}: {secs:.2f}s ({len(questions) / secs:.0f} queries/s)"
                  + (f"; rankings written to {args.out}" if args.out else ""))
    gold = [q.supporting_ids for q in questions]
    with_gold = [g for g in gold if g]
    if not with_gold:
        return 0
    coverage = supporting_ids_in_index(retriever, with_gold)
    if coverage is not None:
        held, total = coverage
        missing = total - held
        if missing == total:
            raise IndexDirError(
                "none of the questions' supporting ids is in the index: it was built from a different corpus"
            )
        if missing:
            console.print(f"[yellow]warning: {missing} of {total} supporting ids are not in the index[/yellow]")
    ks = [x for x in RECALL_KS if x <= k] or [k]
    rec = recall_at_k([[d.id for d in docs] for docs in rankings], gold, ks)
    table = Table(title=f"support recall ({len(with_gold)} questions with supporting ids)")
    for col in ("k", "any gold in top-k", "all gold in top-k", "mean support recall"):
        table.add_column(col, justify="right")
    for kk, r in rec.items():
        table.add_row(str(kk), f"{r.any_gold:.3f}", f"{r.all_gold:.3f}", f"{r.mean_recall:.3f}")
    console.print(table)
    return 0
