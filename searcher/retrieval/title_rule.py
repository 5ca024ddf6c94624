"""Indexes built before s3core.corpus.TITLE_RULE, named when they are opened.

Before the rule, the first line of any multi-line "contents" was taken for the passage's title and cut from its
text (`Error E12 means ...\\nMove the vacuum ...` was served as the text `Move the vacuum ...`), and `s3 data prepare`
wrote such a line into its corpus as a quoted title. An index records the rule it was built under (index.json
`title_rule`); one that records none is checked when it is opened (`check_title_rule`):

- its corpus file has such a "contents": the index serves those passages cut (an IndexDirError with the command that
  rebuilds it);
- its corpus was written by `s3 data prepare` before the rule (the manifest.json beside it has no `renamed_ids`) from
  JSON-lines sources with such a "contents": the prepared corpus itself holds them cut (an IndexDirError with the
  commands that prepare it again and rebuild the index);
- else the index reads the same under both rules and opens. When the corpus cannot be read (gone, changed since the
  build, larger than VERIFY_HASH_MAX_BYTES) a warning says the index could not be checked, and it opens.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from s3core.errors import DataFormatError, IndexDirError
from s3core.io import file_sha256, iter_jsonl
from searcher.retrieval.store import VERIFY_HASH_MAX_BYTES, IndexManifest

__all__ = ["check_title_rule", "first_line_was_title"]

log = logging.getLogger(__name__)

_RULE = "a title is only a 'title' field or a quoted first line of 'contents' (\"Title\"\\ntext)"


def first_line_was_title(contents: str) -> bool:
    """Whether an index built before TITLE_RULE read this "contents" differently: a multi-line one whose first line is
    not double-quoted, which the old reading took for the title and cut from the text.

    >>> first_line_was_title("Error E12 means too hot.\\nMove it.")
    True
    >>> first_line_was_title('"Angkor Wat"\\nA temple.'), first_line_was_title("one line")
    (False, False)
    """
    first, sep, _ = contents.partition("\n")
    first = first.strip()
    return bool(sep and first) and not (len(first) >= 2 and first[0] == first[-1] == '"')


def _first_lines_taken(path: Path) -> tuple[int, str | None]:
    """(how many records of a corpus jsonl have a "contents" whose first line the old reading took, the first's id)."""
    lost, first_id = 0, None
    for _, obj in iter_jsonl(path):
        contents = obj.get("contents")
        if isinstance(contents, str) and first_line_was_title(contents):
            lost += 1
            first_id = str(obj.get("id")) if first_id is None else first_id
    return lost, first_id


def _prepared_sources(corpus: Path) -> tuple[str, list[Path]] | None:
    """(format, input files) of the `s3 data prepare` run that wrote `corpus` before the rule, from the manifest.json
    beside it; None when there is no such manifest or it was written under the rule (it has `renamed_ids`)."""
    mpath = corpus.parent / "manifest.json"
    try:
        m = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or "renamed_ids" in m or m.get("corpus_file") != corpus.name:
        return None
    sources = [s["path"] for s in m.get("sources") or [] if isinstance(s, dict) and isinstance(s.get("path"), str)]
    if not isinstance(m.get("format"), str) or not sources:
        return None
    return m["format"], [Path(os.path.normpath(corpus.parent / s)) for s in sources]


def _jsonl_lines_taken(sources: Iterable[Path]) -> tuple[int, str | None, Path | None]:
    """Like `_first_lines_taken` over the JSON-lines sources that are still there and small enough to read (a JSON
    array or object is not a FlashRAG / DPR corpus file: passed over)."""
    total, first_id, first_src = 0, None, None
    for src in sources:
        if not src.is_file() or src.stat().st_size > VERIFY_HASH_MAX_BYTES:
            continue
        try:
            lost, some_id = _first_lines_taken(src)
        except DataFormatError:
            continue
        total += lost
        if first_id is None and some_id is not None:
            first_id, first_src = some_id, src
    return total, first_id, first_src


def check_title_rule(index_dir: Path, manifest: IndexManifest, rebuild: str) -> None:
    """Raise IndexDirError for an index built before TITLE_RULE that serves passages cut by the old reading (module
    docstring), naming the index, how many passages and the commands that repair it (`rebuild`: the `s3 index build`
    command); warn when its corpus cannot be read to tell."""
    info = manifest.corpus
    if manifest.title_rule is not None or info is None:
        return
    corpus = Path(info.path)
    if not corpus.is_file():
        why = "is no longer there"
    elif info.bytes > VERIFY_HASH_MAX_BYTES:
        why = f"is over {VERIFY_HASH_MAX_BYTES >> 20} MiB, too large to read at every open"
    elif corpus.stat().st_size != info.bytes or file_sha256(corpus) != info.sha256:
        why = "has changed since the build"
    else:
        why = ""
    if why:
        log.warning(f"{index_dir} was built before the title rule ({_RULE}) and its corpus {corpus} {why}, so whether "
                    f"it serves a passage's first line as its title, cut from its text, cannot be checked; rebuild it "
                    f"to be sure: {rebuild}")
        return
    lost, first_id = _first_lines_taken(corpus)
    if lost:
        raise IndexDirError(
            f"{index_dir} was built before the title rule ({_RULE}): {lost} of its {manifest.doc_count} passages (the "
            f"first: id {first_id!r} of {corpus}) are served with their first line as the title, cut from their text; "
            f"rebuild it: {rebuild}")
    prepared = _prepared_sources(corpus)
    if prepared is None:
        return
    fmt, sources = prepared
    lost, first_id, src = _jsonl_lines_taken(sources)
    if lost:
        prepare = shlex.join(["s3", "data", "prepare", fmt, "--input", *map(str, sources), "--out", str(corpus.parent)])
        raise IndexDirError(
            f"{index_dir} was built from {corpus}, which `s3 data prepare` wrote before the title rule ({_RULE}): "
            f"{lost} passages of its inputs (the first: id {first_id!r} of {src}) have their first line as the title, "
            f"cut from their text; prepare it again (which also keeps the corpus's own ids) and rebuild the index: "
            f"{prepare} && {rebuild}")
