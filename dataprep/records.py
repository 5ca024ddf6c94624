"""Raw dataset files as `(line number, record)`, whatever their layout or extension.

Raw QA releases come as one JSON array (the original HotpotQA, 2WikiMultihopQA and MuSiQue files, Bamboogle), as
JSON lines (FlashRAG, Hugging Face exports) or as one JSON object (MIRAGE's benchmark.json, a HippoRAG
title -> sentences corpus), and the extension does not reliably say which: `iter_records` sniffs the content.
JSON lines are streamed through `s3core.io.iter_jsonl` (strict UTF-8); a whole document is decoded element by
element so that every array element keeps its line number for error messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from s3core.errors import DataFormatError
from s3core.io import iter_jsonl, json_error_text

__all__ = ["iter_records"]

_JSON_WS = " \t\r\n"


def iter_records(path: str | Path) -> Iterator[tuple[int, object]]:
    """Yield `(line number, record)` from a JSON array, a JSON-lines file or a single JSON document.

    The format is sniffed from the content, never the extension. JSON-lines files are streamed. Raises
    DataFormatError naming the file and line on a missing file, malformed JSON or bytes that are not UTF-8.
    """
    p = Path(path)
    if p.is_dir():
        hint = sorted(x.name for x in p.iterdir() if x.suffix in (".json", ".jsonl"))
        found = f" (found: {', '.join(hint)})" if hint else ""
        raise DataFormatError(f"{p} is a directory; pass its data files with --input{found}")
    if not p.is_file():
        raise DataFormatError(f"input file not found: {p}")
    try:
        json_lines = _is_json_lines(p)
        text = "" if json_lines else p.read_text(encoding="utf-8").lstrip("\ufeff")
    except UnicodeDecodeError:
        raise _utf8_error(p) from None
    if json_lines:
        yield from iter_jsonl(p, strict_utf8=True)
    else:
        yield from _iter_json_document(p, text)


def _is_json_lines(p: Path) -> bool:
    """True when the first non-empty line is a whole JSON object (JSON lines); False for an array or one
    (pretty-printed) object. Raises DataFormatError on an empty file or one that does not start like JSON."""
    with p.open("r", encoding="utf-8") as fh:
        first, line = "", 1
        while chunk := fh.read(1 << 16):
            stripped = chunk.lstrip(_JSON_WS + "\ufeff")
            line += chunk[: len(chunk) - len(stripped)].count("\n")
            if stripped:
                first = stripped[0]
                break
        if not first:
            raise DataFormatError(f"{p}: the file is empty")
        if first not in "[{":
            raise DataFormatError(f"{p}:{line}: expected JSON (an array, JSON lines or an object), found {first!r}")
        if first == "[":
            return False
        fh.seek(0)
        lines = (line.lstrip("\ufeff") for line in fh if line.strip())
        first_line = next(lines, "")
        if _is_object_line(first_line):
            return True
        if first_line.strip() == "{":  # a pretty-printed object opens on a line of its own; no JSON-lines line does
            return False
        # a first line that does not parse: JSON lines all the same when a line after it is a whole object (then the
        # error names that first line), else one pretty-printed object, whose inner lines are never whole objects
        return any(_is_object_line(line) for _, line in zip(range(5), lines, strict=False))


def _is_object_line(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _utf8_error(p: Path) -> DataFormatError:
    """Locate the first byte that is not UTF-8 (error path only: reads the file as bytes)."""
    raw = p.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = 1 + raw.count(b"\n", 0, e.start)
        return DataFormatError(f"{p}:{line}: not UTF-8 text ({e.reason} at byte {e.start})")
    return DataFormatError(f"{p}: not UTF-8 text")


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _JSON_WS:
        i += 1
    return i


def _line_of(text: str, i: int) -> int:
    return 1 + text.count("\n", 0, i)


def _decode_error(p: Path, text: str, e: json.JSONDecodeError) -> DataFormatError:
    # an error at the very end (a truncated file) points at the last line that has content
    last = 1 + text.rstrip().count("\n")
    return DataFormatError(f"{p}:{min(e.lineno, last)}: not valid JSON ({json_error_text(e)})")


def _iter_json_document(p: Path, text: str) -> Iterator[tuple[int, object]]:
    """A whole-file JSON document: an array yields its elements (with their line numbers), an object itself."""
    dec = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    line = _line_of(text, pos)
    if text[pos] == "{":
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise _decode_error(p, text, e) from None
        if text[end:].strip():
            raise DataFormatError(f"{p}:{_line_of(text, end)}: unexpected data after the JSON object")
        yield line, obj
        return
    # an array: decode element by element to know each element's line
    i = pos + 1
    last = pos
    expect_value = True
    while True:
        i = _skip_ws(text, i)
        if i >= len(text):
            raise DataFormatError(f"{p}:{_line_of(text, i)}: JSON array is not closed")
        if text[i] == "]":
            if expect_value and last != pos:
                raise DataFormatError(f"{p}:{_line_of(text, i)}: trailing comma in JSON array")
            if text[i + 1 :].strip():
                raise DataFormatError(f"{p}:{_line_of(text, i)}: unexpected data after the JSON array")
            return
        if not expect_value:
            if text[i] != ",":
                raise DataFormatError(f"{p}:{_line_of(text, i)}: not valid JSON (expected ',' or ']' in the array)")
            i += 1
            expect_value = True
            continue
        line += text.count("\n", last, i)
        last = i
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise _decode_error(p, text, e) from None
        yield line, obj
        expect_value = False
