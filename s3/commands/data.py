"""`s3 data prepare FORMAT --input PATH... --out DIR`: raw QA / corpus files -> corpus.jsonl + questions.jsonl.

Also `s3 data formats` (the formats and what each reads) and `s3 data show DIR` (what a prepared folder holds).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config

FORMAT_NAMES = ["hotpotqa", "2wiki", "musique", "flashrag", "nq", "triviaqa", "popqa", "bamboogle", "mirage"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "data",
        help="prepare QA datasets and corpora (raw formats -> FlashRAG-shaped jsonl)",
        description="Convert raw QA / corpus files into corpus.jsonl + questions.jsonl + manifest.json.",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    prep = dsub.add_parser(
        "prepare",
        parents=[common],
        help="convert raw files of one format (merged) into a prepared folder",
        description="Writes DIR/corpus.jsonl (when the inputs carry paragraphs), DIR/questions.jsonl and "
        "DIR/manifest.json (counts, dropped rows with reasons, source files with sha256). Several --input files "
        "merge into one corpus; paragraphs are deduplicated by (title, text); a corpus record's own id is kept "
        "(renamed only when taken or unusable, the map in manifest.json's renamed_ids), others get stable "
        "hash-derived ids.",
    )
    prep.add_argument("format", choices=FORMAT_NAMES, metavar="FORMAT", help=f"one of: {', '.join(FORMAT_NAMES)}")
    prep.add_argument(
        "--input", "-i", dest="inputs", nargs="+", action="extend", required=True, metavar="PATH",
        help="input file(s): JSON array, JSON lines or a JSON object, whatever the extension; corpus files "
        "(HippoRAG title->sentences, FlashRAG {id, contents}) merge into the corpus",
    )
    prep.add_argument("--out", "-o", required=True, metavar="DIR", help="output folder (created; our files overwritten)")
    prep.set_defaults(handler=_prepare)

    fm = dsub.add_parser("formats", parents=[common], help="list the formats `data prepare` reads")
    fm.set_defaults(handler=_formats)

    show = dsub.add_parser("show", parents=[common], help="summarise a prepared folder (its manifest)")
    show.add_argument("dir", metavar="DIR")
    show.set_defaults(handler=_show)


def _prepare(args: argparse.Namespace, cfg: S3Config) -> int:
    from dataprep import prepare

    m = prepare(args.format, [Path(p) for p in args.inputs], Path(args.out))
    c = m.counts
    print(f"prepared {args.format} -> {args.out}")
    print(f"  questions            {c.questions}")
    if m.corpus_file:
        print(f"  paragraphs           {c.paragraphs}  ({c.paragraph_occurrences} occurrences, {c.duplicates_merged} duplicates merged)")
        print(f"  with supporting ids  {c.questions_with_supporting_ids}")
    else:
        print("  paragraphs           0  (question-only format: no corpus.jsonl)")
    for label, n in (
        ("duplicate questions merged", c.duplicate_questions_merged),
        ("question ids renamed", c.question_ids_renamed),
        ("corpus ids kept", c.corpus_ids_kept),
        ("questions without answers", c.questions_without_answers),
        ("supporting titles missing", c.supporting_titles_missing),
        ("empty paragraphs skipped", c.empty_paragraphs_skipped),
    ):
        if n:
            print(f"  {label:<26} {n}")
    if m.renamed_ids:
        print(f"  {'corpus ids renamed':<26} {len(m.renamed_ids)}  (manifest.json renamed_ids: original -> new)")
    for r in m.renamed_ids[:3]:
        print(f"    {r.original_id!r} -> {r.id!r} ({r.reason}; {r.where})")
    if len(m.renamed_ids) > 3:
        print(f"    ... {len(m.renamed_ids) - 3} more in {Path(args.out) / 'manifest.json'} (renamed_ids)")
    for d in m.dropped:
        print(f"  dropped {d.count} rows: {d.reason} (e.g. {d.examples[0] if d.examples else '?'})")
    return 0


def _formats(args: argparse.Namespace, cfg: S3Config) -> int:
    from dataprep import FORMATS

    for name, spec in FORMATS.items():
        kind = "questions + paragraphs" if spec.carries_paragraphs else "questions"
        print(f"{name:<10} {kind:<23} {spec.description}")
    return 0


def _show(args: argparse.Namespace, cfg: S3Config) -> int:
    from dataprep import MANIFEST_FILE, load_prepared

    corpus, questions = load_prepared(args.dir)
    mpath = Path(args.dir) / MANIFEST_FILE
    print(f"{args.dir}: {len(questions)} questions; corpus: {corpus if corpus else 'none'}")
    if mpath.is_file():
        m = json.loads(mpath.read_text(encoding="utf-8"))
        print(json.dumps({"format": m.get("format"), "counts": m.get("counts"), "dropped": m.get("dropped")}, indent=2))
    return 0
